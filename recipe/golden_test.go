package recipe

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// checkGolden compares got with the golden file, or rewrites it under -update.
func checkGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./recipe/ -run %s -update to create it)", err, t.Name())
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

func noAbsolutePaths(t *testing.T, text string) {
	t.Helper()
	wd, _ := os.Getwd()
	for _, p := range []string{wd, filepath.Dir(wd), os.TempDir()} {
		if p != "" && p != "/" && strings.Contains(text, p) {
			t.Errorf("output holds the absolute path %s:\n%s", p, text)
		}
	}
}

func TestGoldenResolved(t *testing.T) {
	files, err := filepath.Glob("../recipes/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recipes in ../recipes")
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".toml"), func(t *testing.T) {
			r, err := Load(f)
			if err != nil {
				t.Fatalf("Load(%s): %v", f, err)
			}
			if !strings.HasPrefix(r.Digest, "sha256:") || len(r.Digest) != len("sha256:")+64 {
				t.Errorf("Digest = %q", r.Digest)
			}
			if r.Files[0] != defaultsFile || r.Files[len(r.Files)-1] != f {
				t.Errorf("Files = %q: want the defaults first and %s last", r.Files, f)
			}
			got := "# digest: " + r.Digest + "\n" + string(r.Canonical())
			noAbsolutePaths(t, got)
			checkGolden(t, filepath.Join("testdata", "resolved", name+".golden"), []byte(got))
		})
	}
}

// firstLineRe is what the first line of every bad-recipe error must look like:
// the testdata file, a line number above zero, then a key path.
var firstLineRe = regexp.MustCompile(`^(testdata/bad/[^:]+\.toml):([1-9][0-9]*): ([A-Za-z0-9_.\[\]-]+): `)

// syntaxOnly lists the bad cases whose error has no key path (the TOML parser
// stops before a key is known).
var syntaxOnly = map[string]bool{"33-toml-syntax": true}

func TestGoldenBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 24 {
		t.Fatalf("only %d bad recipes in testdata/bad", len(files))
	}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".toml")
		t.Run(base, func(t *testing.T) {
			r, err := Load(f)
			if err == nil {
				t.Fatalf("Load(%s) accepted a bad recipe:\n%s", f, r.Canonical())
			}
			got := err.Error() + "\n"
			noAbsolutePaths(t, got)
			first, _, _ := strings.Cut(got, "\n")
			if syntaxOnly[base] {
				if !regexp.MustCompile(`^` + regexp.QuoteMeta(f) + `:[1-9][0-9]*: `).MatchString(first) {
					t.Errorf("first line %q: want %s:LINE: ...", first, f)
				}
			} else if m := firstLineRe.FindStringSubmatch(first); m == nil {
				t.Errorf("first line %q: want testdata/bad/FILE.toml:LINE: KEY: ...", first)
			}
			if !strings.HasPrefix(first, "testdata/bad/") {
				t.Errorf("first line %q does not name a testdata/bad file", first)
			}
			checkGolden(t, filepath.Join("testdata", "bad", base+".err"), []byte(got))
		})
	}
}
