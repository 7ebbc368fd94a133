package netboot

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The catalogue holds several builds of a recipe in entry order, picks up a new
// directory under a watched root, and treats a directory rebuilt in place as a new
// entry (the old id gone).
func TestBuildsCatalogue(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, size int64, age time.Duration) string {
		dir := filepath.Join(root, name)
		fakeBuild(t, dir, "default", size)
		at := time.Now().Add(-age)
		if err := os.Chtimes(filepath.Join(dir, "manifest.json"), at, at); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// Given newest first: they enter oldest manifest first.
	b2, b1 := mk("b2", 2048, time.Hour), mk("b1", 1024, 2*time.Hour)
	bs, err := LoadBuilds([]string{b2, b1, b1}) // a directory given twice is one build
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		var out []string
		for _, b := range bs.All() {
			out = append(out, filepath.Base(b.Dir))
		}
		return out
	}
	if got := ids(); len(got) != 2 || got[0] != "b1" || got[1] != "b2" {
		t.Fatalf("entry order %v, want [b1 b2]", got)
	}
	newest, _ := bs.Get("default")
	if filepath.Base(newest.Dir) != "b2" {
		t.Fatalf("newest is %s", newest.Dir)
	}
	old := bs.All()[0]
	if bs.ByID(old.ID) != old || bs.ByID("0123456789abcdef") != nil {
		t.Fatal("ByID")
	}

	bs.WatchRoot(root)
	mk("b3", 3072, 0)
	if added := bs.Rescan(); len(added) != 1 || filepath.Base(added[0].Dir) != "b3" {
		t.Fatalf("rescan added %v", added)
	}
	if added := bs.Rescan(); len(added) != 0 {
		t.Fatalf("a rescan within a second added %v", added)
	}
	if got := ids(); len(got) != 3 || got[2] != "b3" {
		t.Fatalf("after the rescan: %v", got)
	}

	// b1 rebuilt in place: a new id, at the end; the old one no longer served.
	os.RemoveAll(b1)
	mk("b1", 4096, 0)
	if bs.ByID(old.ID) != nil {
		t.Fatal("the replaced build is still served")
	}
	if got := ids(); len(got) != 3 || got[2] != "b1" {
		t.Fatalf("after the rebuild: %v", got)
	}
	if nb, _ := bs.Get("default"); filepath.Base(nb.Dir) != "b1" || nb.ID == old.ID {
		t.Fatalf("newest after the rebuild: %s %s", nb.Dir, nb.ID)
	}
}

// serve before any build: a missing out/ reads as an empty one, with the command
// that fills it, not as the directory read's "no such file or directory".
func TestFindOutputsNone(t *testing.T) {
	root := t.TempDir()
	want := "no build output under " + root + ": run `peerboot build RECIPE` first"
	if _, err := FindOutputs(root); err == nil || err.Error() != want {
		t.Errorf("empty root: %v, want %q", err, want)
	}
	missing := filepath.Join(root, "out")
	want = "no build output under " + missing + ": run `peerboot build RECIPE` first"
	if _, err := FindOutputs(missing); err == nil || err.Error() != want {
		t.Errorf("missing root: %v, want %q", err, want)
	}
}
