package verdict

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// The NCCL rules' inputs that the catalogue's rows leave at their healthy
// values: the bus bandwidth taken from the largest size when busbw_at_max is
// not set, a run with no sizes, the env NCCL ran with when the report does
// not record it (the recipe's), and the busbw hint when every channel is P2P.
func TestNCCLJudge(t *testing.T) {
	for _, c := range []struct {
		name      string
		set       func(r *selftest.Report, e *Expect)
		id        string // "": no warn or fail finding at all
		msg, hint string
		ev        string
		also      string // another warn or fail finding the fault makes
	}{
		{"busbw low, all channels P2P", func(r *selftest.Report, e *Expect) { r.NCCL.BusBWAtMax = 3.2 },
			"nccl.busbw", "3.2 GB/s at 1GiB", "a slow pair drags the whole ring", "", ""},
		{"busbw low, one pair over SHM", func(r *selftest.Report, e *Expect) {
			r.NCCL.BusBWAtMax = 3.2
			setVia(r, 0, 1, "SHM/direct/direct")
		}, "nccl.busbw", "3.2 GB/s", "NCCL is not using P2P on every channel", "", "nccl.transport"},
		{"no busbw_at_max: the largest size's busbw", func(r *selftest.Report, e *Expect) {
			r.NCCL.BusBWAtMax = 0
			r.NCCL.Sizes[len(r.NCCL.Sizes)-1].BusBW = 3.2
		}, "nccl.busbw", "all-reduce bus bandwidth 3.2 GB/s at 1GiB, below selftest.min_busbw_gbps = 12.0", "", "busbw_at_max=3.20 bytes=1073741824", ""},
		{"no sizes, an error", func(r *selftest.Report, e *Expect) {
			r.NCCL.Sizes, r.NCCL.BusBWAtMax = []selftest.NCCLSize{}, 0
			r.NCCL.Error = "ncclCommInitAll: unhandled system error (2)"
		}, "nccl.error", "NCCL all-reduce failed: ncclCommInitAll", "", "", ""},
		{"the report records no env: the recipe's NCCL_P2P_LEVEL", func(r *selftest.Report, e *Expect) {
			r.NCCL.Env = nil
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "GPU1 (0000:02:00.0)-GPU2 (0000:41:00.0): NCCL connected", "NCCL takes P2P only where NVML reports P2P OK", "NCCL_P2P_LEVEL=SYS", ""},
		{"no env recorded, none in the recipe", func(r *selftest.Report, e *Expect) {
			r.NCCL.Env = nil
			delete(e.Env, "NCCL_P2P_LEVEL")
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "beyond NCCL's default level PXB", "topology NODE", ""},
		// The transport finding's hint and evidence.
		{"a PXB pair over SHM, no level set", func(r *selftest.Report, e *Expect) {
			delete(r.NCCL.Env, "NCCL_P2P_LEVEL")
			delete(e.Env, "NCCL_P2P_LEVEL")
			pair(r, 1, 2).Topology, pair(r, 1, 2).NVMLTopology = selftest.TopoPXB, selftest.TopoPXB
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "NCCL takes P2P only where NVML reports P2P OK", "topology PXB; nvml p2p r=OK w=OK", ""},
		{"NCCL_P2P_LEVEL=PXB, a NODE pair over SHM", func(r *selftest.Report, e *Expect) {
			r.NCCL.Env["NCCL_P2P_LEVEL"] = "PXB"
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "set NCCL_P2P_LEVEL=SYS: the pair is NODE, beyond NCCL_P2P_LEVEL=PXB", "; NCCL_P2P_LEVEL=PXB", ""},
		{"NCCL_P2P_DISABLE=1", func(r *selftest.Report, e *Expect) {
			r.NCCL.Env["NCCL_P2P_DISABLE"] = "1"
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "NCCL_P2P_DISABLE is set", "", ""},
		{"NCCL_P2P_DISABLE=0", func(r *selftest.Report, e *Expect) {
			r.NCCL.Env["NCCL_P2P_DISABLE"] = "0"
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "NCCL takes P2P only where NVML reports P2P OK", "", ""},
		{"NVML's write status only", func(r *selftest.Report, e *Expect) {
			pair(r, 1, 2).P2PRead = ""
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "", "; nvml p2p r=? w=OK", "p2p.status"},
		{"NVML's read status only", func(r *selftest.Report, e *Expect) {
			pair(r, 1, 2).P2PWrite = ""
			setVia(r, 1, 2, "SHM/direct/direct")
		}, "nccl.transport", "via SHM/direct/direct", "", "; nvml p2p r=OK w=?", "p2p.status"},
		// One rank has no channels to name; a run that measured no size named none yet.
		{"one rank, no channels", func(r *selftest.Report, e *Expect) {
			r.NCCL.Ranks, r.NCCL.Transports = 1, []selftest.Transport{}
		}, "", "", "", "", ""},
		{"no sizes measured, no channels", func(r *selftest.Report, e *Expect) {
			r.NCCL.Sizes, r.NCCL.BusBWAtMax, r.NCCL.Transports = []selftest.NCCLSize{}, 0, []selftest.Transport{}
		}, "", "", "", "", ""},
	} {
		r := healthyReport(4)
		e := FromRecipe(healthyRecipe(4))
		c.set(r, e)
		Judge(r, e)
		var hit *selftest.Finding
		for k := range r.Findings {
			f := &r.Findings[k]
			if f.Status == selftest.SevInfo || f.ID == c.also {
				continue
			}
			if f.ID != c.id || hit != nil {
				t.Errorf("%s: %s %s: %s", c.name, f.Status, f.ID, f.Message)
				continue
			}
			hit = f
		}
		if hit == nil {
			if c.id != "" {
				t.Errorf("%s: no %s finding:\n%s", c.name, c.id, dump(r.Findings))
			}
			continue
		}
		if !strings.Contains(hit.Message, c.msg) || !strings.Contains(hit.Hint, c.hint) || !strings.Contains(hit.Evidence, c.ev) {
			t.Errorf("%s: %s: message %q, hint %q, evidence %q; want %q, %q, %q", c.name, c.id, hit.Message, hit.Hint, hit.Evidence, c.msg, c.hint, c.ev)
		}
	}
}

// Without a recipe, unknown transports are a warning, not a failure: nothing
// says P2P is required.
func TestNCCLTransportsUnknownWithoutRecipe(t *testing.T) {
	r := healthyReport(4)
	r.NCCL.Transports = []selftest.Transport{}
	Judge(r, nil)
	found := false
	for _, f := range r.Findings {
		if f.ID == "nccl.transport" {
			found = true
			if f.Status != selftest.SevWarn {
				t.Errorf("without a recipe: %s %s: %s", f.Status, f.ID, f.Message)
			}
		}
	}
	if !found {
		t.Errorf("no nccl.transport finding:\n%s", dump(r.Findings))
	}
}

func pair(r *selftest.Report, a, b int) *selftest.Pair {
	p := r.PairOf(a, b)
	if p == nil {
		panic(fmt.Sprintf("no pair %d-%d", a, b))
	}
	return p
}

// A transport between GPUs that NVML gave no P2P status for, or that have no
// pair record at all, says nothing of NVML in its evidence.
func TestNCCLTransportWithoutNVMLStatus(t *testing.T) {
	for _, drop := range []bool{false, true} {
		r := healthyReport(4)
		if drop {
			r.Pairs = slices.DeleteFunc(r.Pairs, func(p selftest.Pair) bool { return p.A == 1 && p.B == 2 })
		} else {
			pair(r, 1, 2).P2PRead, pair(r, 1, 2).P2PWrite = "", ""
		}
		setVia(r, 1, 2, "SHM/direct/direct")
		Judge(r, FromRecipe(healthyRecipe(4)))
		found := false
		for _, f := range r.Findings {
			if f.ID == "nccl.transport" {
				found = true
				if strings.Contains(f.Evidence, "nvml") || !strings.Contains(f.Evidence, "channels [0 1] via SHM/direct/direct") {
					t.Errorf("pair record dropped %v: evidence %q", drop, f.Evidence)
				}
			}
		}
		if !found {
			t.Errorf("pair record dropped %v: no nccl.transport finding:\n%s", drop, dump(r.Findings))
		}
	}
}
