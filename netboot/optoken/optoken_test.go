package optoken

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestEnsure: serve's operator token is created 0600 once (two serves
// starting together agree on it), reused after, and a file others can read, or a
// short one, is refused rather than trusted.
func TestEnsure(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", FileName)
	var wg sync.WaitGroup
	toks := make([]string, 4)
	made := make([]bool, 4)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			toks[i], made[i], err = Ensure(file)
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	created := 0
	for i := range toks {
		if toks[i] != toks[0] || len(toks[i]) != 64 {
			t.Fatalf("tokens %q differ or are not 64 hex digits", toks)
		}
		if made[i] {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d callers created the file, want 1", created)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(file)); len(ents) != 1 {
		t.Errorf("left beside the token: %v", ents)
	}
	if tok, made, err := Ensure(file); err != nil || made || tok != toks[0] {
		t.Errorf("second start: %q %t %v", tok, made, err)
	}
	os.Chmod(file, 0o640)
	if _, _, err := Ensure(file); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a group-readable token: %v", err)
	}
	// Nowhere to write it (procfs refuses root too): serve runs with writes off
	// rather than not at all.
	if _, _, err := Ensure("/proc/peerboot-no-such-dir/operator.token"); !errors.Is(err, ErrCreate) {
		t.Errorf("an uncreatable token: %v, want ErrCreate", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if _, err := Read(short); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a short token: %v", err)
	}
}
