package e2e

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// privateStore makes a store of this test's own, for tests that delete or
// damage store entries: the shared store ($PEERBOOT_CACHE, the one `make
// image` and a user's builds use) must never lose an output under a build
// running beside the tests. It sits beside the shared store (same filesystem,
// so hard links work; copies otherwise) and holds hard links to every blob and
// to the outputs keep says yes to (the warm kernel and driver compiles: linking
// them costs nothing, rebuilding them hours). The store writes by rename, never
// into an existing file, so a linked file is never changed through the link.
// It is removed when the test ends; the caller points PEERBOOT_CACHE at it.
func privateStore(t *testing.T, keep func(output string) bool) string {
	t.Helper()
	shared := cacheDir()
	dir, err := os.MkdirTemp(filepath.Dir(shared), "peerboot-test-store-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := linkTree(filepath.Join(shared, "blobs"), filepath.Join(dir, "blobs")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	outs, err := os.ReadDir(filepath.Join(shared, "out"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") || !keep(o.Name()) {
			continue
		}
		if err := linkTree(filepath.Join(shared, "out", o.Name()), filepath.Join(dir, "out", o.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// linkTree recreates src at dst: directories made, regular files hard-linked
// (copied where a link cannot be made), symlinks recreated.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case d.Type().IsRegular():
			err := os.Link(p, to)
			if errors.Is(err, syscall.EXDEV) || errors.Is(err, syscall.EPERM) {
				return copyFile(p, to)
			}
			return err
		}
		return nil // sockets, fifos: not store content
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// The private store shares no writable state with the shared one: removing
// an output there leaves the shared output whole, and a file linked from the
// shared store is the same bytes.
func TestPrivateStore(t *testing.T) {
	shared := t.TempDir()
	t.Setenv("PEERBOOT_CACHE", filepath.Join(shared, "peerboot"))
	for p, body := range map[string]string{
		"peerboot/blobs/sha256/ab/abcd":          "blob",
		"peerboot/out/kernel-1/MANIFEST":         "m",
		"peerboot/out/kernel-1/boot/vmlinuz":     "kernel",
		"peerboot/out/userspace-2/MANIFEST":      "m",
		"peerboot/out/userspace-2/usr/lib/x.so":  "lib",
		"peerboot/locks/out-userspace-2.lock":    "",
		"peerboot/tmp/abcd.partial":              "partial",
		"peerboot/out/kernel-1/lib/modules/x.ko": "ko",
	} {
		p = filepath.Join(shared, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("x.so", filepath.Join(shared, "peerboot/out/userspace-2/usr/lib/x.so.1"))
	priv := privateStore(t, func(o string) bool { return strings.HasPrefix(o, "kernel-") })
	if filepath.Dir(priv) != shared {
		t.Fatalf("private store at %s, want beside the shared one in %s", priv, shared)
	}
	for p, want := range map[string]string{"blobs/sha256/ab/abcd": "blob", "out/kernel-1/boot/vmlinuz": "kernel", "out/kernel-1/lib/modules/x.ko": "ko"} {
		if b, err := os.ReadFile(filepath.Join(priv, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	for _, p := range []string{"out/userspace-2", "locks", "tmp"} {
		if _, err := os.Lstat(filepath.Join(priv, p)); err == nil {
			t.Errorf("%s was carried into the private store", p)
		}
	}
	if err := os.RemoveAll(filepath.Join(priv, "out", "kernel-1")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(shared, "peerboot/out/kernel-1/boot/vmlinuz")); err != nil || string(b) != "kernel" {
		t.Fatalf("removing the private output touched the shared one: %q %v", b, err)
	}
}
