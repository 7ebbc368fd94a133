package rootfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/sign/modsign"
)

func moduleKey(t *testing.T) (*rsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "rootfs test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return k, c
}

func TestSignModules(t *testing.T) {
	key, cert := moduleKey(t)
	dir := t.TempDir()
	mods := map[string]string{"kernel/drivers/net/igb.ko": "igb", "updates/dkms/nvidia.ko": "nvidia", "modules.order": "not a module"}
	for p, body := range mods {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(dir, p), []byte(body), 0o644)
	}
	sign := func() map[string][]byte {
		n, err := SignModules(context.Background(), dir, key, cert)
		if err != nil || n != 2 {
			t.Fatalf("SignModules: %d, %v; want 2 modules", n, err)
		}
		got := map[string][]byte{}
		for p := range mods {
			got[p], _ = os.ReadFile(filepath.Join(dir, p))
		}
		return got
	}
	first := sign()
	for _, p := range []string{"kernel/drivers/net/igb.ko", "updates/dkms/nvidia.ko"} {
		if _, err := modsign.Verify(first[p], []*x509.Certificate{cert}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if string(first["modules.order"]) != "not a module" {
		t.Error("a file that is not a .ko was changed")
	}
	second := sign() // re-signing replaces the signature: same bytes
	for p := range mods {
		if !bytes.Equal(first[p], second[p]) {
			t.Errorf("%s: signing twice with the same key gave different bytes", p)
		}
	}
	os.WriteFile(filepath.Join(dir, "kernel/x.ko.xz"), []byte("xz"), 0o644)
	if _, err := SignModules(context.Background(), dir, key, cert); err == nil || !strings.Contains(err.Error(), "x.ko.xz") {
		t.Errorf("compressed module: %v, want an error naming it", err)
	}
	_, other := moduleKey(t)
	if _, err := SignModules(context.Background(), dir, key, other); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("key with another key's certificate: %v", err)
	}
}
