package store

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
)

// CompareOutput checks that dir holds exactly the files of key's committed
// output with the same sha256 each (MANIFEST is the record), and names every
// file that differs. `peerboot build --check` uses it to prove that a stage
// built from empty gives what the store reused.
func (s *Store) CompareOutput(key, dir string) error {
	entries, err := readManifest(s.OutputDir(key))
	if err != nil {
		return err
	}
	want := map[string]string{}
	for _, e := range entries {
		want[e.path] = e.sum
	}
	got := map[string]string{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		sum, err := fsutil.HashFile(path)
		got[rel] = sum
		return err
	})
	if err != nil {
		return fmt.Errorf("hashing %s: %w", dir, err)
	}
	var diffs []string
	for rel, sum := range want {
		switch g, ok := got[rel]; {
		case !ok:
			diffs = append(diffs, rel+": only in the stored output")
		case g != sum:
			diffs = append(diffs, fmt.Sprintf("%s: stored sha256 %s, rebuilt %s", rel, sum, g))
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			diffs = append(diffs, rel+": only in the rebuild")
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	n := len(diffs) // before the list is cut to 20 lines
	if n > 20 {
		diffs = append(diffs[:20], fmt.Sprintf("... and %d more", n-20))
	}
	return fmt.Errorf("%d files differ:\n  %s", n, strings.Join(diffs, "\n  "))
}
