package rollout

import (
	"testing"
	"time"
)

// Decisions the mutation run found untested (make mutants, rollout): each
// case here fails if its condition is inverted.
func TestDecisionEdges(t *testing.T) {
	v := func(node, ch, build string) Verdict {
		return Verdict{Node: node, Channel: ch, Build: build, Pass: true, At: t0.Add(time.Hour)}
	}
	// Passes for B on canary after canary moved on to C: B is on no channel now
	// and must not be promoted to beta by its old votes.
	replaced := state(false, "canary", "C", "beta", "A", "stable", "A")
	if got := AfterVerdict(pol(), replaced, v("n2", "canary", "B"), []Verdict{v("n1", "canary", "B"), v("n2", "canary", "B")}); got != nil {
		t.Errorf("stale passes for a replaced build: %+v, want nothing", got)
	}
	// A vote from a channel the policy has no build on changes nothing.
	if got := AfterVerdict(pol(), state(false, "beta", "A"), v("n2", "canary", "A"), []Verdict{v("n1", "canary", "A"), v("n2", "canary", "A")}); got != nil {
		t.Errorf("passes on an empty channel: %+v, want nothing", got)
	}
	// ManualPromote with no build named skips an empty first channel and
	// promotes the newest build in the pipeline.
	ev, err := ManualPromote(pol(), state(false, "beta", "B", "stable", "A"), "", t0)
	if err != nil || ev.Build != "B" || ev.From != "beta" || ev.To != "stable" {
		t.Errorf("empty canary: %+v, %v; want B beta -> stable", ev, err)
	}
	for ch, want := range map[string]bool{"canary": true, "stable": true, "nightly": false, "": false} {
		if got := pol().Has(ch); got != want {
			t.Errorf("Has(%q) = %v, want %v", ch, got, want)
		}
	}
}
