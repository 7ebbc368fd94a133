package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// outDir writes a build output of files with their SHA256SUMS.
func outDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var sums []output.Sum
	for p, b := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, output.Sum{Path: p, SHA256: sum(b)})
	}
	os.WriteFile(filepath.Join(dir, output.SumsFile), output.FormatSums(sums), 0o644)
	return dir
}

func sum(b string) string {
	h := sha256.Sum256([]byte(b))
	return hex.EncodeToString(h[:])
}

func TestPublish(t *testing.T) {
	ctx := context.Background()
	out := outDir(t, map[string]string{"pxe/vmlinuz": "kernel", "pxe/initrd.img": "initrd", "peerboot.efi": "uki"})
	dst := t.TempDir()
	got, err := Publish(ctx, out, dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("published %d files, want 3: %+v", len(got), got)
	}
	for _, f := range got {
		b, err := os.ReadFile(filepath.Join(dst, Path(f.SHA256)))
		if err != nil || sum(string(b)) != f.SHA256 || !f.Copied {
			t.Errorf("%s: entry %s: %v copied=%v", f.File, Path(f.SHA256), err, f.Copied)
		}
	}
	// Again: nothing copied. A damaged entry is replaced.
	entry := filepath.Join(dst, Path(sum("initrd")))
	os.WriteFile(entry, []byte("initrD"), 0o644)
	again, err := Publish(ctx, out, dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again {
		if f.Copied != (f.File == "pxe/initrd.img") {
			t.Errorf("second publish: %s copied=%v", f.File, f.Copied)
		}
	}
	if b, _ := os.ReadFile(entry); string(b) != "initrd" {
		t.Errorf("damaged entry not replaced: %q", b)
	}
	// An output altered since its SHA256SUMS was written publishes nothing.
	os.WriteFile(filepath.Join(out, "pxe", "vmlinuz"), []byte("kernel!"), 0o644)
	fresh := t.TempDir()
	_, err = Publish(ctx, out, fresh)
	var me *MismatchError
	if !errors.As(err, &me) || !strings.Contains(err.Error(), "vmlinuz: sha256 ") {
		t.Fatalf("altered output: %v", err)
	}
	if _, err := os.Stat(filepath.Join(fresh, Dir)); !os.IsNotExist(err) {
		t.Errorf("a refused publish wrote %s", Dir)
	}
	if _, err := Publish(ctx, t.TempDir(), fresh); err == nil || !strings.Contains(err.Error(), "is not a build output") {
		t.Errorf("no SHA256SUMS: %v", err)
	}
}

func TestCheck(t *testing.T) {
	files := map[string]string{"/m/" + Path(sum("good")): "good", "/m/" + Path(sum("bad")): "bad!"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(b))
	}))
	defer srv.Close()
	ctx, c := context.Background(), srv.Client()
	if err := Check(ctx, c, srv.URL+"/m/", sum("good")); err != nil {
		t.Errorf("good: %v", err)
	}
	var me *MismatchError
	if err := Check(ctx, c, srv.URL+"/m", sum("bad")); !errors.As(err, &me) || me.Got != sum("bad!") {
		t.Errorf("altered: %v", err)
	}
	if err := Check(ctx, c, srv.URL+"/m", sum("absent")); !errors.Is(err, ErrMissing) {
		t.Errorf("missing: %v", err)
	}
}
