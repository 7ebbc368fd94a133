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
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// PassphraseEnv names the variable holding the passphrase of an encrypted key.
const PassphraseEnv = "PEERBOOT_KEY_PASSPHRASE"

// readRef returns the bytes a key reference names and a name for messages.
func readRef(ref string) ([]byte, string, error) {
	kind, val, ok := strings.Cut(ref, ":")
	if !ok || val == "" {
		return nil, ref, fmt.Errorf("key reference %q: want file:PATH or env:VAR", ref)
	}
	switch kind {
	case "file":
		b, err := os.ReadFile(val)
		if err != nil {
			return nil, val, fmt.Errorf("key reference %q: %w", ref, err)
		}
		return b, val, nil
	case "env":
		s, ok := os.LookupEnv(val)
		if !ok || s == "" {
			return nil, "$" + val, fmt.Errorf("key reference %q: environment variable %s is not set", ref, val)
		}
		return []byte(s), "$" + val, nil
	default:
		return nil, ref, fmt.Errorf("key reference %q: unknown kind %q (want file:PATH or env:VAR)", ref, kind)
	}
}

// LoadSigner loads a private key: PEM "PRIVATE KEY" (PKCS#8), "EC PRIVATE KEY",
// "RSA PRIVATE KEY", or "ENCRYPTED PRIVATE KEY" (PKCS#8 PBES2, the passphrase in
// $PEERBOOT_KEY_PASSPHRASE).
func LoadSigner(ref string) (crypto.Signer, error) {
	b, name, err := readRef(ref)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return k, nil
}

// ParsePrivateKeyPEM parses the first private key block of PEM text.
func ParsePrivateKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM private key block found")
		}
		var key any
		var err error
		switch blk.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			if blk.Headers["Proc-Type"] != "" {
				return nil, errors.New("legacy OpenSSL-encrypted PEM (Proc-Type header) is not supported: convert it with `openssl pkey -in KEY -out NEW.pem -aes256` (PKCS#8)")
			}
			key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			pass, ok := os.LookupEnv(PassphraseEnv)
			if !ok {
				return nil, fmt.Errorf("the key is encrypted and %s is not set", PassphraseEnv)
			}
			var der []byte
			der, err = decryptPKCS8(blk.Bytes, []byte(pass))
			if err == nil {
				key, err = x509.ParsePKCS8PrivateKey(der)
			}
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s block: %w", blk.Type, err)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%s block: %T is not a signing key", blk.Type, key)
		}
		return s, nil
	}
}

// LoadCert loads the first certificate of PEM (or DER) text.
func LoadCert(ref string) (*x509.Certificate, error) {
	b, name, err := readRef(ref)
	if err != nil {
		return nil, err
	}
	c, err := ParseCert(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// ParseCert parses a PEM CERTIFICATE block, or DER.
func ParseCert(b []byte) (*x509.Certificate, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("want a CERTIFICATE PEM block, got %q", blk.Type)
		}
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	return c, nil
}

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

// keyKind names a public key's algorithm for messages.
func keyKind(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	}
	return fmt.Sprintf("%T", pub)
}
