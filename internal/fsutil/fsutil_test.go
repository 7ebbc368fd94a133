package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCopyTree(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(src, "scripts"), 0o755)
	os.WriteFile(filepath.Join(src, "scripts", "modpost"), []byte("elf"), 0o755)
	os.WriteFile(filepath.Join(src, "Makefile"), []byte("all:"), 0o644)
	os.WriteFile(filepath.Join(src, ".x.o.cmd"), []byte("cmd"), 0o644)
	os.Symlink("Makefile", filepath.Join(src, "link"))
	old := syscall.Umask(0o077) // the copies' modes must not depend on the umask
	defer syscall.Umask(old)
	skip := func(rel string) bool { return strings.HasSuffix(rel, ".cmd") }
	if err := CopyTree(src, dst, skip); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{"scripts/modpost": 0o755, "Makefile": 0o644} {
		info, err := os.Stat(filepath.Join(dst, path))
		if err != nil || info.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", path, info, err, mode)
		}
	}
	if l, _ := os.Readlink(filepath.Join(dst, "link")); l != "Makefile" {
		t.Errorf("symlink -> %q", l)
	}
	if _, err := os.Stat(filepath.Join(dst, ".x.o.cmd")); !os.IsNotExist(err) {
		t.Error("skipped file copied")
	}
	// CopyFile replaces a symlink at the destination instead of writing through it.
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(dst, "through"))
	if err := CopyFile(filepath.Join(src, "Makefile"), filepath.Join(dst, "through"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Error("CopyFile wrote through a symlink")
	}
	if info, _ := os.Lstat(filepath.Join(dst, "through")); info.Mode().Perm() != 0o600 || !info.Mode().IsRegular() {
		t.Errorf("got %v", info.Mode())
	}
}

func TestHashFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	// sha256("abc"), FIPS 180-2 appendix B.1.
	if h, err := HashFile(p); err != nil || h != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashFile = %s, %v", h, err)
	}
	if _, err := HashFile(p + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
}
