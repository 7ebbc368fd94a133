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

// A GPU in mode none is p2p.mode_none's, not half of a mixed pair, whichever
// side of the pair it is.
func TestModeNoneIsNotMixed(t *testing.T) {
	for none := range 2 {
		r := healthyReport(2)
		for i := range r.GPUs {
			mode := selftest.P2PModeDynamic
			if i == none {
				mode = selftest.P2PModeNone
			}
			r.GPUs[i].P2PMode, r.GPUs[i].P2PModeLine = mode, "NVRM: peerboot-p2p: bar1-mode gpu="+string(rune('0'+i))+" pci="+r.GPUs[i].BDF+" mode="+mode+" why=small-bar1"
		}
		Judge(r, FromRecipe(healthyRecipe(2)))
		var ids []string
		for _, f := range r.Findings {
			if f.Status != selftest.SevInfo {
				ids = append(ids, f.ID)
			}
		}
		if len(ids) != 1 || ids[0] != "p2p.mode_none" {
			t.Errorf("GPU%d in mode none: %v, want [p2p.mode_none]:\n%s", none, ids, dump(r.Findings))
		}
	}
}
