package verdict

import (
	"strings"
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

// A GPU without a mode line counts as missing one only when the driver
// answered for it (NVML or CUDA knows it, either will do) and its chip is one
// the series logs for. The finding's evidence names the nvidia.ko that ran:
// its modinfo version, or its file when that is all the report has.
func TestModeLineMissing(t *testing.T) {
	dynamic := func(r *selftest.Report, i int) {
		r.GPUs[i].P2PMode, r.GPUs[i].P2PModeLine = selftest.P2PModeDynamic, "NVRM: peerboot-p2p: bar1-mode gpu=0 pci="+r.GPUs[i].BDF+" mode=dynamic why=bar1-below-fb"
	}
	for _, c := range []struct {
		name string
		set  func(r *selftest.Report, e *Expect)
		msg  string // "": no p2p.mode_missing finding
		ev   string
		noEv string
	}{
		{"GPU1 unknown to NVML and CUDA", func(r *selftest.Report, e *Expect) {
			dynamic(r, 0)
			r.GPUs[1].NVML, r.GPUs[1].CUDA = nil, nil
		}, "", "", ""},
		{"GPU1 known to NVML only", func(r *selftest.Report, e *Expect) {
			dynamic(r, 0)
			r.GPUs[1].CUDA = nil
		}, "no peerboot-p2p mode line for GPU1 (0000:02:00.0) AD102, though 1 other GPU(s) have one", "", ""},
		{"GPU1 known to CUDA only", func(r *selftest.Report, e *Expect) {
			dynamic(r, 0)
			r.GPUs[1].NVML = nil
		}, "no peerboot-p2p mode line for GPU1 (0000:02:00.0) AD102, though 1 other GPU(s) have one", "", ""},
		{"a chip the series does not log for", func(r *selftest.Report, e *Expect) {
			e.ModeLineChips = []string{"GA102"}
		}, "", "", ""},
		{"only the file of the nvidia.ko that ran", func(r *selftest.Report, e *Expect) {
			r.Modules[0].File = "updates/dkms/nvidia.ko"
		}, "no peerboot-p2p mode line for GPU0 (0000:01:00.0) AD102, GPU1 (0000:02:00.0) AD102", "nvidia.ko file updates/dkms/nvidia.ko; /sys/module/nvidia/version=", "modinfo"},
		{"neither its file nor its modinfo version", func(r *selftest.Report, e *Expect) { r.Modules[0].File = "" }, "no peerboot-p2p mode line for GPU0",
			"/sys/module/nvidia/version=" + testDriver + "; NVML driver " + testDriver + "; recipe driver.version=" + testDriver, "nvidia.ko"},
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		e.ModeLineChips = []string{"AD102"}
		c.set(r, e)
		if r.GPUs[0].NVML == nil || r.GPUs[0].CUDA == nil {
			t.Fatalf("%s: the fixture's GPUs lack NVML or CUDA records", c.name)
		}
		Judge(r, e)
		var hit *selftest.Finding
		for k := range r.Findings {
			if r.Findings[k].ID == "p2p.mode_missing" {
				hit = &r.Findings[k]
			}
		}
		switch {
		case hit == nil && c.msg != "":
			t.Errorf("%s: no p2p.mode_missing finding:\n%s", c.name, dump(r.Findings))
		case hit != nil && c.msg == "":
			t.Errorf("%s: %s", c.name, hit.Message)
		case hit != nil && (!strings.Contains(hit.Message, c.msg) || !strings.Contains(hit.Evidence, c.ev) || c.noEv != "" && strings.Contains(hit.Evidence, c.noEv)):
			t.Errorf("%s: message %q, evidence %q; want %q, evidence with %q and without %q", c.name, hit.Message, hit.Evidence, c.msg, c.ev, c.noEv)
		}
	}
}

// Corruption injected into another check does not excuse a peer-memory
// mismatch: its hint is a real corruption's.
func TestPeerMemInjectedElsewhere(t *testing.T) {
	r := healthyReport(2)
	r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): CorruptOnce test hook: after the ce write copy GPU 0 -> GPU 1, the word at byte offset 100 ...", "")
	corrupt(findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite), 100, 1)
	r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Step: selftest.StepPeerWrite, Mismatch: &selftest.Mismatch{Offset: 4096, Want: 1, Got: 2, Words: 1}}}
	Judge(r, FromRecipe(healthyRecipe(2)))
	found := false
	for _, f := range r.Findings {
		if f.ID == "peermem.corrupt" {
			found = true
			if strings.Contains(f.Hint, "on purpose") || !strings.Contains(f.Hint, "landed in the wrong place") {
				t.Errorf("hint %q, want a real corruption's", f.Hint)
			}
		}
	}
	if !found {
		t.Errorf("no peermem.corrupt finding:\n%s", dump(r.Findings))
	}
}
