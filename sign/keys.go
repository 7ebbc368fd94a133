// Package sign applies peerboot's signatures to a finished build output, as the
// separate final step DESIGN.md asks for: the UKI is signed for UEFI Secure Boot
// (Authenticode, with sbsign), SHA256SUMS gets a detached signature in the form
// `cosign verify-blob --key` accepts, and an in-toto statement with SLSA provenance
// is written in a signed DSSE envelope. Verify checks all of it.
//
// Keys are inputs, never generated during a build: they are named by references,
// "file:PATH" or "env:VAR" (the variable holds the PEM text), and loaded behind
// crypto.Signer so hardware or KMS signers can take their place later.
package sign

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/sign/keyref"
)

// PassphraseEnv names the variable holding the passphrase of an encrypted key.
const PassphraseEnv = keyref.PassphraseEnv

// readRef returns the bytes a key reference names and a name for messages.
func readRef(ref string) ([]byte, string, error) { return keyref.Read(ref) }

// LoadSigner loads a private key (see keyref.LoadSigner).
func LoadSigner(ref string) (crypto.Signer, error) { return keyref.LoadSigner(ref) }

// LoadCert loads the first certificate of PEM (or DER) text.
func LoadCert(ref string) (*x509.Certificate, error) { return keyref.LoadCert(ref) }

// LoadPublicKey loads a public key: a PEM "PUBLIC KEY" (PKIX, as cosign.pub), or
// the key of a certificate. A plain path is accepted as well as a reference.
func LoadPublicKey(ref string) (crypto.PublicKey, error) {
	if !strings.HasPrefix(ref, "file:") && !strings.HasPrefix(ref, "env:") {
		ref = "file:" + ref
	}
	b, name, err := readRef(ref)
	if err != nil {
		return nil, err
	}
	k, err := ParsePublicKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return k, nil
}

// ParsePublicKeyPEM parses a PKIX PUBLIC KEY or CERTIFICATE block.
func ParsePublicKeyPEM(b []byte) (crypto.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM block found (want PUBLIC KEY)")
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		return k, nil
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		return c.PublicKey, nil
	}
	return nil, fmt.Errorf("want a PUBLIC KEY PEM block, got %q", blk.Type)
}

// PublicKeyPEM encodes a public key as PKIX PEM (cosign.pub's form).
func PublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// privateKeyPEM encodes a private key as unencrypted PKCS#8 PEM.
func privateKeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
