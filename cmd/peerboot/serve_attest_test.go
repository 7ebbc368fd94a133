package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadEKRoots(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "EK CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	key := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"one certificate", cert, ""},
		{"two", append(append([]byte{}, cert...), cert...), ""},
		{"empty", nil, "no PEM certificate"},
		{"a key", append(append([]byte{}, cert...), key...), `block 2: want CERTIFICATE, got "PRIVATE KEY"`},
		{"bad DER", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}), "block 1:"},
	} {
		p := filepath.Join(t.TempDir(), "ca.pem")
		os.WriteFile(p, tc.data, 0o644)
		_, err := loadEKRoots(p)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := loadEKRoots(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "--ek-ca") {
		t.Errorf("missing file: %v", err)
	}
}
