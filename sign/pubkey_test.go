package sign

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/sign/keyref"
)

// A public key is named as a reference (file:, env:) or as a plain path, all
// to the same key; it is a PUBLIC KEY or a CERTIFICATE's key, and any other
// block, or one that does not parse, is refused with what it is.
func TestLoadPublicKey(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := PublicKeyPEM(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cosign.pub")
	if err := os.WriteFile(path, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PB_TEST_PUB", string(pub))
	for _, ref := range []string{path, "file:" + path, "env:PB_TEST_PUB"} {
		got, err := LoadPublicKey(ref)
		if err != nil || !k.PublicKey.Equal(got) {
			t.Errorf("LoadPublicKey(%q): %v", ref, err)
		}
	}
	// The certificate of the test key set holds the db key.
	db, err := LoadPublicKey(filepath.Join(testKeys, DBCertFile))
	if err != nil || keyref.Kind(db) != "RSA 2048" {
		t.Errorf("a certificate's key: %v, %v", db, err)
	}
	for name, c := range map[string]struct{ pem, err string }{
		"no PEM":          {"cosign.pub", "no PEM block found"},
		"private key":     {string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), `want a PUBLIC KEY PEM block, got "PRIVATE KEY"`},
		"bad public key":  {string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1}})), "public key: "},
		"bad certificate": {string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}})), "certificate: "},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		if err := os.WriteFile(p, []byte(c.pem), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := LoadPublicKey(p); err == nil || got != nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, %v; want an error naming %s and containing %q", name, got, err, p, c.err)
		}
	}
}
