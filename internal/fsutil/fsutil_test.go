package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
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

func TestWriteAtomic(t *testing.T) {
	old := syscall.Umask(0o077) // the mode must not depend on the umask
	defer syscall.Umask(old)
	boom := errors.New("boom")
	tests := []struct {
		name    string
		write   func(f *os.File) error
		wantErr string // "": succeeds
	}{
		{"writes", func(f *os.File) error { _, err := f.WriteString("new\n"); return err }, ""},
		{"write fails", func(f *os.File) error { f.WriteString("part"); return boom }, "boom"},
		// The file closed under it: chmod, sync and close fail after a good
		// write, and the failure must come back rather than a renamed file.
		{"sync fails", func(f *os.File) error { f.WriteString("new\n"); return f.Close() }, "file already closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "SHA256SUMS")
			if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			err := WriteAtomic(path, 0o644, tt.write)
			got, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != "new\n" {
					t.Errorf("content %q, want %q", got, "new\n")
				}
				if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
					t.Errorf("mode %v, want 0644 whatever the umask", fi.Mode().Perm())
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Errorf("err = %v, want one naming %s and %q", err, path, tt.wantErr)
				}
				if string(got) != "old\n" {
					t.Errorf("a failed write changed the file to %q", got)
				}
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// TestWriteFileAtomicSymlink: a symlink at the path is replaced, never written
// through (an output directory's file must not reach outside it).
func TestWriteFileAtomicSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(dir, "out")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(link, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("written through the link: %q", b)
	}
	if fi, _ := os.Lstat(link); !fi.Mode().IsRegular() {
		t.Errorf("%s is %v, want a regular file", link, fi.Mode())
	}
	if err := WriteFileAtomic(filepath.Join(dir, "no", "dir"), nil, 0o644); err == nil {
		t.Error("no error writing into a missing directory")
	}
}

// CopyFile keeps a sparse file's bytes and its holes: data at the start, in
// the middle and at the very end, a file that ends in a hole, all holes, empty.
func TestCopyFileSparse(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name string
		size int64
		data map[int64]string
	}{
		{"data at both ends", 16 * mib, map[int64]string{0: "MBR", 8 * mib: "middle", 16*mib - 3: "end"}},
		{"ends in a hole", 16 * mib, map[int64]string{mib: "GPT"}},
		{"all holes", 16 * mib, nil},
		{"empty", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			f, _ := os.Create(src)
			f.Truncate(tc.size)
			for off, s := range tc.data {
				f.WriteAt([]byte(s), off)
			}
			f.Close()
			os.WriteFile(dst, []byte(strings.Repeat("old", 1000)), 0o644) // replaced, not merged
			if err := CopyFile(src, dst, 0o644); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(src)
			b, _ := os.ReadFile(dst)
			if len(a) != int(tc.size) || string(a) != string(b) {
				t.Fatalf("copy differs: %d bytes vs %d", len(b), len(a))
			}
			var ss, ds syscall.Stat_t
			syscall.Stat(src, &ss)
			syscall.Stat(dst, &ds)
			if ss.Blocks*512 >= tc.size && tc.size > 0 {
				testguard.Skipf(t, "this filesystem keeps no holes (%d bytes allocated)", ss.Blocks*512)
			}
			if ds.Blocks > ss.Blocks+8 {
				t.Errorf("copy allocates %d bytes, source %d: holes were written", ds.Blocks*512, ss.Blocks*512)
			}
		})
	}
}
