package opencount

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpens(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := Watch(t, dir)
	for range 3 { // three opens in a row: not merged into one
		os.ReadFile(filepath.Join(dir, "a"))
	}
	os.ReadFile(filepath.Join(dir, "b"))
	f, err := os.Open(filepath.Join(dir, "c")) // still open: counted
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := c.Opens(t)
	if got["a"] != 3 || got["b"] != 1 || got["c"] != 1 || len(got) != 3 {
		t.Errorf("opens %v, want a:3 b:1 c:1", got)
	}
	os.ReadFile(filepath.Join(dir, "b"))
	if got := c.Opens(t); got["b"] != 2 {
		t.Errorf("after one more read of b: %v, want b:2", got)
	}
}
