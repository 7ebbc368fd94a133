package verdict

import (
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// A lone GPU the driver gave no BAR1 P2P has no peer to miss: no finding.
func TestModeNoneAlone(t *testing.T) {
	for _, n := range []int{1, 2} {
		r := healthyReport(n)
		r.GPUs[0].P2PMode, r.GPUs[0].P2PModeLine = selftest.P2PModeNone, "NVRM: peerboot-p2p: bar1-mode gpu=0 pci="+r.GPUs[0].BDF+" mode=none why=small-bar1"
		Judge(r, FromRecipe(healthyRecipe(n)))
		got := false
		for _, f := range r.Findings {
			got = got || f.ID == "p2p.mode_none"
		}
		if got != (n > 1) {
			t.Errorf("%d GPU(s): p2p.mode_none %v, want %v:\n%s", n, got, n > 1, dump(r.Findings))
		}
	}
}
