package netboot

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/verdict"
)

// The demo's reports are real ones: they pass the validation report show and serve
// apply, every finding id is one the rules document, and judging the demo's
// measurements against the platform's real recipe file gives the demo's findings.
func TestDemoIsARealReport(t *testing.T) {
	doc, err := os.ReadFile("../docs/selftest-findings.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_.]+)`").FindAllSubmatch(doc, -1) {
		documented[string(m[1])] = true
	}
	for _, tc := range []struct {
		p      DemoPlatform
		recipe string
		broken bool
		want   string
	}{
		{Xeon8GPU, "xeon-8gpu", false, selftest.Pass},
		{Xeon8GPU, "xeon-8gpu", true, selftest.Fail},
		{Epyc4GPU, "epyc-4gpu", false, selftest.Pass},
	} {
		r := DemoReport(tc.p, 1, tc.broken)
		body, err := selftest.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := selftest.Decode(body); err != nil {
			t.Errorf("%s broken=%v: the demo report is refused: %v", tc.recipe, tc.broken, err)
		}
		if r.Verdict != tc.want {
			t.Errorf("%s broken=%v: verdict %s, want %s", tc.recipe, tc.broken, r.Verdict, tc.want)
		}
		for _, f := range r.Findings {
			if !documented[f.ID] {
				t.Errorf("%s: finding %s is not in docs/selftest-findings.md", tc.recipe, f.ID)
			}
		}
		if tc.broken && !slices.ContainsFunc(r.Findings, func(f selftest.Finding) bool {
			return f.ID == "copy.corrupt" && f.Subject == "GPU5->GPU6 ce write"
		}) {
			t.Errorf("broken demo lacks copy.corrupt on GPU5->GPU6: %+v", r.Findings)
		}
		res, err := recipe.Load("../recipes/" + tc.recipe + ".toml")
		if err != nil {
			t.Fatal(err)
		}
		e := verdict.FromRecipe(&res.Recipe)
		// The demo pins its driver; the recipe's branch may move on without the demo.
		e.DriverVersion = ""
		again := demoMeasured(tc.p, 1, tc.broken)
		verdict.Judge(again, e)
		if key(again.Findings) != key(r.Findings) {
			t.Errorf("%s broken=%v: against the recipe file the findings are\n%s\nthe demo has\n%s", tc.recipe, tc.broken, key(again.Findings), key(r.Findings))
		}
		for _, f := range r.Findings {
			if f.ID == "copy.corrupt" && res.Recipe.Driver.P2P == recipe.P2PDynamicBAR1 && regexp.MustCompile(`use driver.p2p = "dynamic-bar1"`).MatchString(f.Hint) {
				t.Errorf("the hint asks a dynamic-BAR1 recipe for the dynamic-BAR1 driver: %s", f.Hint)
			}
		}
	}
}

func key(fs []selftest.Finding) string {
	s := ""
	for _, f := range fs {
		s += f.Status + " " + f.ID + " " + f.Subject + "\n"
	}
	return s
}
