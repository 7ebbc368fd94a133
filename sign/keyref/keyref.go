// Package keyref loads keys and certificates named by references, "file:PATH"
// or "env:VAR" (the variable holds the PEM text), behind crypto.Signer. It is a
// leaf package so both the build stages (module signing) and package sign (the
// final signing step) can use it.
package keyref

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
	"path/filepath"
	"strings"
)

// PassphraseEnv names the variable holding the passphrase of an encrypted key.
const PassphraseEnv = "PEERBOOT_KEY_PASSPHRASE"

// Read returns the bytes a key reference names and a name for messages.
func Read(ref string) ([]byte, string, error) {
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
	b, name, err := Read(ref)
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
				// Good padding from a wrong passphrase happens about once in 256
				// tries; what then fails to parse is still that passphrase.
				if key, err = x509.ParsePKCS8PrivateKey(der); err != nil {
					err = fmt.Errorf("wrong passphrase in %s (the decrypted bytes are not a PKCS#8 key: %w)", PassphraseEnv, err)
				}
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
	b, name, err := Read(ref)
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

// Resolve makes a relative "file:" reference relative to dir (a recipe's
// directory) instead of the working directory; other references are returned
// as they are.
func Resolve(ref, dir string) string {
	if p, ok := strings.CutPrefix(ref, "file:"); ok && p != "" && !filepath.IsAbs(p) {
		return "file:" + filepath.Join(dir, p)
	}
	return ref
}

// Kind names a public key's algorithm for messages ("ECDSA P-256", "RSA 2048").
func Kind(pub crypto.PublicKey) string {
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
