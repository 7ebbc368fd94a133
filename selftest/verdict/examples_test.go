package verdict

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/examples"
)

// The example reports the binary ships (selftest/examples) are these fixtures,
// judged: a healthy box that passes and the faulty one that fails for several
// reasons at once. -update rewrites them.
func TestExamples(t *testing.T) {
	cases := []struct {
		name    string
		verdict string
		report  func() (*selftest.Report, *Expect)
	}{
		{"pass", selftest.Pass, func() (*selftest.Report, *Expect) { return healthyReport(4), FromRecipe(healthyRecipe(4)) }},
		{"fail", selftest.Fail, faultyReport},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, e := c.report()
			Judge(r, e)
			if r.Verdict != c.verdict {
				t.Fatalf("the %s example judges %s", c.name, r.Verdict)
			}
			got, err := selftest.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "examples", c.name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			shipped, err := examples.Report(c.name)
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := os.ReadFile(path); !bytes.Equal(got, want) || (!*update && !bytes.Equal(shipped, want)) {
				t.Errorf("%s differs from the fixture (go test ./selftest/verdict -run TestExamples -update)", path)
			}
			// What a reader of the shipped file sees decodes back to the same report.
			back, err := selftest.Decode(shipped)
			if err != nil && !*update {
				t.Fatalf("the shipped %s example does not decode: %v", c.name, err)
			}
			if err == nil && back.Verdict != c.verdict && !*update {
				t.Errorf("the shipped %s example decodes with verdict %s", c.name, back.Verdict)
			}
		})
	}
}
