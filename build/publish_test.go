package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

func imageOutput(t *testing.T, st *store.Store, key, uki string) {
	t.Helper()
	dir, _ := st.NewScratch("image")
	os.WriteFile(filepath.Join(dir, "peerboot.efi"), []byte(uki), 0o644)
	disk := make([]byte, 3<<20) // mostly zeros, like a real disk image
	copy(disk[1<<20:], "GPT")
	os.WriteFile(filepath.Join(dir, "disk.img"), disk, 0o644)
	os.MkdirAll(filepath.Join(dir, "pxe"), 0o755)
	os.WriteFile(filepath.Join(dir, "pxe", "boot.ipxe"), []byte("#!ipxe\n"), 0o644)
	if err := st.CommitOutput(key, dir); err != nil {
		t.Fatal(err)
	}
}

func TestPublish(t *testing.T) {
	st, _ := store.Open(t.TempDir())
	outRoot := t.TempDir()
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t"}, Digest: "sha256:" + strings.Repeat("d", 64)}
	key1, key2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
	imageOutput(t, st, key1, "uki one")
	imageOutput(t, st, key2, "uki two")
	plan := func(key string) *Plan { return &Plan{Recipe: r, Stages: []*Stage{{Name: "image", Key: key}}} }

	dir, err := Publish(context.Background(), plan(key1), st, nil, 1700000000, outRoot)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 4 {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}
	var stat syscall.Stat_t
	syscall.Stat(filepath.Join(dir, "disk.img"), &stat)
	if stat.Blocks*512 >= 3<<20 {
		t.Errorf("disk.img not sparse: %d bytes allocated", stat.Blocks*512)
	}
	before, _ := os.Stat(filepath.Join(dir, "manifest.json"))

	// A no-op publish rewrites nothing.
	if _, err := Publish(context.Background(), plan(key1), st, nil, 1700000000, outRoot); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(filepath.Join(dir, "manifest.json"))
	if !os.SameFile(before, after) {
		t.Error("a no-op publish replaced the output directory")
	}

	// A cancelled publish leaves the previous output whole and no temp directory.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Publish(ctx, plan(key2), st, nil, 1700000000, outRoot); err == nil {
		t.Fatal("cancelled publish succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "peerboot.efi")); string(b) != "uki one" {
		t.Fatalf("previous output damaged: %q", b)
	}
	if entries, _ := os.ReadDir(outRoot); len(entries) != 1 {
		t.Fatalf("leftovers in %s: %v", outRoot, entries)
	}

	// A new image replaces the old one in one step.
	if _, err := Publish(context.Background(), plan(key2), st, nil, 1700000000, outRoot); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "peerboot.efi")); string(b) != "uki two" {
		t.Fatalf("output not replaced: %q", b)
	}
	if entries, _ := os.ReadDir(outRoot); len(entries) != 1 {
		t.Fatalf("leftovers in %s: %v", outRoot, entries)
	}
}
