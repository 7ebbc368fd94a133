package recipe

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary text to Load as a recipe file. Load must never panic, and a
// recipe it accepts must come back unchanged from its own canonical form: Canonical
// re-loads to the same digest.
//
// go test -fuzz=FuzzLoad ./recipe/ spends much of a short run minimizing new inputs
// (those executions are not counted as execs); -fuzzminimizetime=5s shortens that.
func FuzzLoad(f *testing.F) {
	for _, glob := range []string{"../recipes/*.toml", "../recipes/drivers/*.toml", "testdata/bad/*.toml", "testdata/bad/inc/*.toml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(minimal))
	f.Add([]byte(trickyTOML))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "fuzz.toml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(path)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no text")
			}
			return
		}
		// Canonical always writes the name, so the new file name does not matter.
		canon := r.Canonical()
		again := filepath.Join(dir, "again.toml")
		if err := os.WriteFile(again, canon, 0o644); err != nil {
			t.Fatal(err)
		}
		r2, err := Load(again)
		if err != nil {
			t.Fatalf("canonical form does not load: %v\n%s", err, canon)
		}
		if r2.Digest != r.Digest {
			t.Fatalf("digest changed on re-load: %s -> %s\n--- first\n%s\n--- second\n%s", r.Digest, r2.Digest, canon, r2.Canonical())
		}
	})
}
