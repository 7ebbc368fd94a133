package selftest

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peerboot/peerboot/selftest/examples"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/NAME.golden (-update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./selftest -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// example is one of the reports the binary ships (peerboot report show example:NAME).
func example(t *testing.T, name string) *Report {
	t.Helper()
	b, err := examples.Report(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The shipped examples are selftest/verdict's healthy-4 and faulty-4 fixtures,
// judged; what an operator reads for them on an 80-column console is verdict's
// reviewed goldens of those fixtures, byte for byte. Rendered from this package, so
// that the console view's own code is held by its own package's tests.
func TestRenderExamplesAsVerdictGoldens(t *testing.T) {
	for _, c := range []struct{ example, golden string }{
		{"pass", "render-healthy-4"},
		{"fail", "render-faulty-4"},
	} {
		t.Run(c.example, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("verdict", "testdata", c.golden+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			if got := Render(example(t, c.example)); got != string(want) {
				t.Errorf("Render(example %s) differs from verdict/testdata/%s.golden:\n--- got\n%s--- want\n%s", c.example, c.golden, got, want)
			}
		})
	}
}

// The examples at other widths and in the boot console's short form: a wide
// console keeps the pair class in each cell and the upstream path in the GPU
// table; the narrowest layout splits the matrices into column blocks; no line is
// wider than asked (but for the narrowest, which lets words run long).
func TestRenderExamplesWidths(t *testing.T) {
	for _, name := range []string{"pass", "fail"} {
		r := example(t, name)
		for _, width := range []int{160, 100, 40} {
			t.Run(name+"-"+strconv.Itoa(width), func(t *testing.T) {
				got := RenderWidth(r, width)
				if width > minWidth {
					for i, line := range strings.Split(got, "\n") {
						if w := utf8.RuneCountInString(line); w > width {
							t.Errorf("line %d is %d columns, more than %d: %q", i+1, w, width, line)
						}
					}
				}
				golden(t, "render-"+name+"-"+strconv.Itoa(width), got)
			})
		}
		t.Run(name+"-below-min", func(t *testing.T) {
			if RenderWidth(r, 10) != RenderWidth(r, minWidth) {
				t.Error("a width below the narrowest layout is not laid out as the narrowest")
			}
		})
		t.Run(name+"-summary", func(t *testing.T) {
			golden(t, "summary-"+name, Summary(r))
		})
	}
}
