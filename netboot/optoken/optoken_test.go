package optoken

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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

// TestCreate: a token file is never replaced, so one a serve already handed
// out stays valid; a created one has its mode whatever the umask, and nothing
// is left beside it either way.
func TestCreate(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, existing := range []string{"", "first\n"} {
		dir := t.TempDir()
		file := filepath.Join(dir, FileName)
		if existing != "" {
			os.WriteFile(file, []byte(existing), 0o600)
		}
		err := create(file, []byte("second\n"))
		got, _ := os.ReadFile(file)
		if existing != "" && (!errors.Is(err, fs.ErrExist) || string(got) != existing) {
			t.Errorf("over an existing file: %v, content %q; want fs.ErrExist and %q kept", err, got, existing)
		}
		if existing == "" {
			if fi, serr := os.Stat(file); err != nil || string(got) != "second\n" || serr != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("a new file: %v, content %q, mode %v", err, got, fi.Mode())
			}
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("left beside the token: %v", ents)
		}
	}
}
