package source

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/debfile/debtest"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

// A source .deb holds a tarball under usr/src (like linux-source and
// nvidia-open-kernel-source); Unpack finds it and descends to the tree root.
func TestUnpackSourceDeb(t *testing.T) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, f := range []struct{ name, body string }{{"modules/nvidia-open-kernel/Kbuild", "obj-m := nvidia.o\n"}, {"modules/nvidia-open-kernel/nvidia/nv-pci.c", "int x;\n"}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	deb := debtest.Build("nvidia-open-kernel-source", []debtest.Entry{
		{Name: "./usr/src/nvidia-open-kernel.tar", Body: tb.String()},
		{Name: "./usr/share/doc/nvidia-open-kernel-source/copyright", Body: "x"},
	})
	st, _ := store.Open(t.TempDir())
	sum := sha256.Sum256(deb)
	hexsum := hex.EncodeToString(sum[:])
	if err := st.Put(context.Background(), bytes.NewReader(deb), hexsum); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := Unpack(context.Background(), st, lock.Input{Kind: "deb", Name: "nvidia-open-kernel-source", SHA256: hexsum}, dir)
	if err != nil {
		t.Fatal(err)
	}
	if root != filepath.Join(dir, "modules", "nvidia-open-kernel") {
		t.Fatalf("root %s", root)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "nvidia", "nv-pci.c")); string(b) != "int x;\n" {
		t.Fatalf("content %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "nvidia-open-kernel.tar")); !os.IsNotExist(err) {
		t.Error("the extracted tarball was left behind")
	}
	// A package without a source tarball is an error naming it.
	empty := debtest.Build("x", []debtest.Entry{{Name: "./usr/share/doc/x", Body: "x"}})
	s2 := sha256.Sum256(empty)
	st.Put(context.Background(), bytes.NewReader(empty), hex.EncodeToString(s2[:]))
	if _, err := Unpack(context.Background(), st, lock.Input{Kind: "deb", Name: "x", SHA256: hex.EncodeToString(s2[:])}, t.TempDir()); err == nil {
		t.Error("a .deb without a source tarball was accepted")
	}
}
