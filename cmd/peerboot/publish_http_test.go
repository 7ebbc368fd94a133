package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// publish --http writes the mirror layout; a changed output is exit 6 and
// writes nothing; a registry and --http together, or neither, is exit 2.
func TestPublishHTTP(t *testing.T) {
	out := t.TempDir()
	os.MkdirAll(filepath.Join(out, "pxe"), 0o755)
	var sums []output.Sum
	for p, b := range map[string]string{"pxe/vmlinuz": "kernel", "pxe/initrd.img": "initrd"} {
		os.WriteFile(filepath.Join(out, p), []byte(b), 0o644)
		h := sha256.Sum256([]byte(b))
		sums = append(sums, output.Sum{Path: p, SHA256: hex.EncodeToString(h[:])})
	}
	os.WriteFile(filepath.Join(out, output.SumsFile), output.FormatSums(sums), 0o644)
	mirror := filepath.Join(t.TempDir(), "mirror")
	stdout, errs, code := run(t, "publish", out, "--http", mirror)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, errs)
	}
	for _, s := range sums {
		if b, err := os.ReadFile(filepath.Join(mirror, "sha256", s.SHA256)); err != nil || !strings.Contains(stdout, "sha256/"+s.SHA256+"  "+s.Path+" (copied)") {
			t.Errorf("%s: %v %q\n%s", s.Path, err, b, stdout)
		}
	}
	if stdout, _, code := run(t, "publish", out, "--http", mirror); code != 0 || !strings.Contains(stdout, "2 files, 0 copied") {
		t.Errorf("again: exit %d\n%s", code, stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"publish", out}, "publish: want oci://REGISTRY/REPO:TAG or --http DIR"},
		{[]string{"publish", out, "oci://127.0.0.1:1/x:y", "--http", mirror}, "--http DIR writes a directory"},
	} {
		if _, errs, code := run(t, c.args...); code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, want 2 with %q\n%s", c.args, code, c.want, errs)
		}
	}
	os.WriteFile(filepath.Join(out, "pxe", "initrd.img"), []byte("initrd, altered"), 0o644)
	fresh := filepath.Join(t.TempDir(), "fresh")
	if _, errs, code := run(t, "publish", out, "--http", fresh); code != 6 || !strings.Contains(errs, "initrd.img: sha256 ") {
		t.Errorf("altered output: exit %d, want 6\n%s", code, errs)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a refused publish created %s", fresh)
	}
}
