package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

func imageOutput(t *testing.T, st *store.Store, key, uki string) {
	t.Helper()
	dir, _ := st.NewScratch("image")
	os.WriteFile(filepath.Join(dir, "peerboot.efi"), []byte(uki), 0o644)
	// Sparse, mostly holes, as the image stage writes a disk.
	disk, _ := os.Create(filepath.Join(dir, "disk.img"))
	disk.Truncate(3 << 20)
	disk.WriteAt([]byte("GPT"), 1<<20)
	disk.Close()
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
	// The files are the store's, linked: no byte copied.
	for _, f := range []string{"peerboot.efi", "disk.img", "pxe/boot.ipxe"} {
		pub, err1 := os.Stat(filepath.Join(dir, f))
		sto, err2 := os.Stat(filepath.Join(st.OutputDir(key1), f))
		if err1 != nil || err2 != nil || !os.SameFile(pub, sto) {
			t.Errorf("%s: published file is not the store's (%v, %v)", f, err1, err2)
		}
	}
	if probs, err := st.Verify(context.Background(), nil); err != nil || len(probs) > 0 {
		t.Errorf("store after publish: %v %v", probs, err)
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

// Where out/ is on another filesystem than the store no link can be made:
// publish copies instead, and the copy is whole and checks.
func TestPublishAcrossFilesystems(t *testing.T) {
	st, _ := store.Open(t.TempDir())
	shm, err := os.MkdirTemp("/dev/shm", "publish-")
	if err != nil {
		testguard.Skipf(t, "no /dev/shm to publish across filesystems: %v", err)
	}
	defer os.RemoveAll(shm)
	var a, b syscall.Stat_t
	if syscall.Stat(shm, &a) != nil || syscall.Stat(st.Root, &b) != nil || a.Dev == b.Dev {
		testguard.Skipf(t, "/dev/shm and %s are one filesystem", st.Root)
	}
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t"}, Digest: "sha256:" + strings.Repeat("d", 64)}
	key := "image-" + strings.Repeat("1", 64)
	imageOutput(t, st, key, "uki one")
	dir, err := Publish(context.Background(), &Plan{Recipe: r, Stages: []*Stage{{Name: "image", Key: key}}}, st, nil, 1700000000, shm)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 4 {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}
	pub, _ := os.Stat(filepath.Join(dir, "peerboot.efi"))
	sto, _ := os.Stat(filepath.Join(st.OutputDir(key), "peerboot.efi"))
	if pub == nil || sto == nil || os.SameFile(pub, sto) {
		t.Errorf("across filesystems the published file should be a copy")
	}
}
