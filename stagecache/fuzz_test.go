package stagecache

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtractTree: a tree layer is outside bytes until its digest is checked,
// so any bytes given to extractTree may fail but never panic, and never put
// anything outside the directory it unpacks into.
func FuzzExtractTree(f *testing.F) {
	tarOf := func(entries ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	f.Add(tarOf(tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "..", Mode: 0o777}, tar.Header{Name: "l/escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/tmp", Mode: 0o777}, tar.Header{Name: "out/x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(tarOf(tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add(tarOf(tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}))
	f.Add(tarOf(tar.Header{Name: "f", Typeflag: tar.TypeReg, Size: 1, Mode: 0o4755}))
	f.Add(tarOf(tar.Header{Name: "MANIFEST", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "out")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		files, err := extractTree(context.Background(), bytes.NewReader(data), root)
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "out" {
			t.Fatalf("extractTree wrote beside its directory: %v", ents)
		}
		if err != nil {
			return
		}
		for _, f := range files {
			if info, err := os.Lstat(filepath.Join(dir, f.Path)); err != nil || !info.Mode().IsRegular() || info.Size() != f.Size {
				t.Errorf("%s: listed as a %d-byte file, is %v (%v)", f.Path, f.Size, info, err)
			}
		}
	})
}
