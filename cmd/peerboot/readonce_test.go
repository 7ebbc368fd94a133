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

	"github.com/peerboot/peerboot/internal/opencount"
)

// TestPlanReadsDataOnce: `peerboot plan` validates a recipe's data files and
// keys them from one read: the kernel counts each file's opens (inotify), the
// fragment, the patch, the module key and certificate, and the image binaries
// once each (three times each before the plan took the validation's bytes).
func TestPlanReadsDataOnce(t *testing.T) {
	dir := t.TempDir()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "read once"},
		NotBefore: time.Unix(1700000000, 0), NotAfter: time.Unix(1800000000, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	sum := strings.Repeat("a", 64)
	files := map[string]string{
		"t.toml": `name = "t"
source_date_epoch = 1700000000
[kernel]
source = { url = "https://example.invalid/linux-6.1.tar.xz", sha256 = "` + sum + `" }
fragments = ["base.config", "./local.config"]
[driver]
version = "535.261.03"
source = { url = "https://example.invalid/nvidia.tar.xz", sha256 = "` + sum + `" }
patches = ["./0001-local.patch"]
[outputs]
efi_stub = { url = "https://example.invalid/stub.deb", sha256 = "` + sum + `" }
[sign]
module_key = "file:module.key"
module_cert = "file:module.crt"
`,
		"local.config":     "CONFIG_NUMA=y\n",
		"0001-local.patch": "patch v1\n",
		"module.key":       "key v1",
		"module.crt":       string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		"peerboot-init":    "init v1",
		"p2pcheck":         "p2pcheck v1",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opens := opencount.Watch(t, dir)
	out, errs, code := runEnv(t, []string{"PEERBOOT_TOOLS_DIR=" + dir}, "--cache", filepath.Join(t.TempDir(), "cache"), "plan", filepath.Join(dir, "t.toml"))
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s%s", code, out, errs)
	}
	got := opens.Opens(t)
	for name := range files {
		if name != "t.toml" && got[name] != 1 {
			t.Errorf("%s opened %d times, want once", name, got[name])
		}
	}
}
