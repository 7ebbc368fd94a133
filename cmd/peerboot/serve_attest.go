package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/measure"
)

// loadEKRoots reads serve --ek-ca: a PEM bundle of the TPM manufacturers' EK
// CA certificates (roots and intermediates). Every block must be a certificate.
func loadEKRoots(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--ek-ca: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		n++
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("--ek-ca %s: block %d: want CERTIFICATE, got %q", path, n, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--ek-ca %s: block %d: %w", path, n, err)
		}
		pool.AddCert(c)
	}
	if n == 0 {
		return nil, fmt.Errorf("--ek-ca %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// predictPCR11 is the PCR 11 systemd-stub leaves for uki at the phase nodes
// quote (measure.Predict's enter-initrd value).
func predictPCR11(uki []byte) ([32]byte, error) {
	p, err := measure.Predict(uki)
	if err != nil {
		return [32]byte{}, err
	}
	v, ok := p.Value(attest.PhaseEnterInitrd)
	if !ok {
		return [32]byte{}, fmt.Errorf("the prediction has no %s phase", attest.PhaseEnterInitrd)
	}
	return v, nil
}
