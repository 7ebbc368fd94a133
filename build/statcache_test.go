package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/store"
)

// The image binaries are keyed through the store's stat cache, never read by
// the plan once cached: a binary rewritten with its size and mtime put back
// still changes the tools key (its ctime moved), and a binary that changes
// after the plan keyed it is refused by the run that reads it.
func TestToolsKeyedThroughStatCache(t *testing.T) {
	dir, write := planFixture(t)
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plan := func() *Plan {
		t.Helper()
		return fixturePlan(t, dir, st)
	}
	first := plan()
	if _, err := os.Stat(st.HintPath(store.StatCacheHint)); err != nil {
		t.Fatalf("the plan wrote no stat cache: %v", err)
	}
	if again := plan(); again.Stage(StageTools).Key != first.Stage(StageTools).Key {
		t.Fatal("the tools key moved with nothing changed")
	}
	p2p := filepath.Join(dir, "p2pcheck")
	fi, err := os.Stat(p2p)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(p2p)
	write("p2pcheck", strings.Repeat("X", len(old)))
	if err := os.Chtimes(p2p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	edited := plan()
	if edited.Stage(StageTools).Key == first.Stage(StageTools).Key {
		t.Fatal("a same-size edit with its mtime put back kept the tools key")
	}
	var d Datum
	for _, x := range edited.Stage(StageTools).data {
		if x.Name == "binary usr/bin/p2pcheck" {
			d = x
		}
	}
	if b, err := d.read(); err != nil || string(b) != strings.Repeat("X", len(old)) {
		t.Fatalf("reading the keyed binary: %q, %v", b, err)
	}
	write("p2pcheck", "changed after the plan")
	if _, err := d.read(); err == nil || !strings.Contains(err.Error(), "changed since the plan keyed it") {
		t.Errorf("a binary changed after the plan was read: %v", err)
	}
}
