package verdict

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// withLatencies gives a healthy report the latencies a P2P box measures: 1.6 µs for a
// local 16-byte write (the H200's copy engine), about half a microsecond for a peer.
func withLatencies(r *selftest.Report) *selftest.Report {
	n := len(r.GPUs)
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			l := selftest.Latency{Src: a, Dst: b, Direction: selftest.DirWrite, Bytes: 16, Writes: 100, US: 0.52 + 0.01*float64(a+b), Verified: true}
			if a == b {
				l.Direction, l.US = selftest.DirLocal, 1.6
			}
			l.Samples = []float64{l.US - 0.01, l.US, l.US + 0.02}
			r.Latencies = append(r.Latencies, l)
		}
	}
	return r
}

func latencyOf(r *selftest.Report, src, dst int) *selftest.Latency {
	for k := range r.Latencies {
		if l := &r.Latencies[k]; l.Src == src && l.Dst == dst {
			return l
		}
	}
	return nil
}

// boundLatency sets max_latency_us for every topology class of the recipe.
func boundLatency(e *Expect, us float64) {
	for class, th := range e.Thresholds {
		th.MaxLatencyUS = us
		e.Thresholds[class] = th
	}
}

// The latency rows of the fault catalogue (TestFaultCatalogue runs them; the docs
// table names them).
func init() {
	faultRows = append(faultRows, []faultRow{
		{name: "peer write latency of a staged copy", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			withLatencies(r)
			boundLatency(e, 5)
			latencyOf(r, 0, 1).US = 13.9
		}, id: "latency.slow", status: selftest.SevWarn, msg: "GPU0->GPU1 16-byte write takes 13.90 µs, above the", hint: "staged through host memory about 14 µs"},
		{name: "latency write landed elsewhere", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
			withLatencies(r)
			l := latencyOf(r, 2, 3)
			l.Verified, l.Mismatch = false, &selftest.Mismatch{Offset: 4, Want: 0x1234abcd, Got: 0xedcb5432, Words: 1}
		}, id: "latency.corrupt", status: selftest.SevFail, msg: "GPU2->GPU3 16-byte write did not arrive: 1 word(s) differ, first at byte 0x4", hint: "peer write landed elsewhere"},
		{name: "latency write failed", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			withLatencies(r)
			latencyOf(r, 1, 0).Error = "cuMemcpyAsync on GPU 1: CUDA_ERROR_ILLEGAL_ADDRESS"
		}, id: "latency.error", status: selftest.SevFail, msg: "timing the GPU1->GPU0 16-byte write failed", hint: "unmapped address"},
	}...)
}

// What must not warn: a peer write inside the bound, a slow local write (the bound
// is for peers), no bound in the recipe, no recipe at all.
func TestLatencyQuiet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *selftest.Report, e *Expect) *Expect
	}{
		{"inside the bound", func(r *selftest.Report, e *Expect) *Expect { boundLatency(e, 5); latencyOf(r, 0, 1).US = 4.9; return e }},
		{"slow local write", func(r *selftest.Report, e *Expect) *Expect { boundLatency(e, 5); latencyOf(r, 1, 1).US = 9; return e }},
		{"no bound", func(r *selftest.Report, e *Expect) *Expect { latencyOf(r, 0, 1).US = 13.9; return e }},
		{"no recipe", func(r *selftest.Report, e *Expect) *Expect { latencyOf(r, 0, 1).US = 13.9; return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := withLatencies(healthyReport(2))
			e := tc.mutate(r, FromRecipe(healthyRecipe(2)))
			Judge(r, e)
			for _, f := range r.Findings {
				if strings.HasPrefix(f.ID, "latency.") {
					t.Errorf("unexpected %s %s: %s", f.Status, f.ID, f.Message)
				}
			}
		})
	}
}

func TestRenderLatency(t *testing.T) {
	r := withLatencies(healthyReport(4))
	e := FromRecipe(healthyRecipe(4))
	boundLatency(e, 5)
	latencyOf(r, 0, 3).US = 14.2
	bad := latencyOf(r, 2, 1)
	bad.Verified, bad.Mismatch = false, &selftest.Mismatch{Offset: 0, Want: 1, Got: 2, Words: 1}
	r.Latencies = r.Latencies[:len(r.Latencies)-2] // GPU3->GPU2 and GPU3's local: not measured
	Judge(r, e)
	out := selftest.Render(r)
	for _, want := range []string{"Latency of 16-byte writes, µs", "14.20!", "corrupt!", "1.60"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q", want)
		}
	}
	golden(t, "render-latency-4", out)
}

func TestDiffLatency(t *testing.T) {
	a := judged(withLatencies(healthyReport(2)), FromRecipe(healthyRecipe(2)))
	b := withLatencies(healthyReport(2))
	latencyOf(b, 0, 1).US = 13.9                          // P2P fell back to staged copies
	latencyOf(b, 1, 0).Error = "CUDA_ERROR_LAUNCH_FAILED" // an error appeared
	b.Latencies = b.Latencies[1:]                         // GPU0's local write: only in A
	e := FromRecipe(healthyRecipe(2))
	boundLatency(e, 5)
	judged(b, e)
	d := selftest.Diff(a, b)
	byPair := map[[2]int]selftest.LatencyChange{}
	for _, c := range d.Latencies {
		byPair[[2]int{c.Src, c.Dst}] = c
	}
	if len(d.Latencies) != 4 || byPair[[2]int{0, 1}].Percent != 2522.6 || byPair[[2]int{0, 0}].Only != "a" ||
		byPair[[2]int{1, 0}].ErrorB == "" || byPair[[2]int{1, 1}].Percent != 0 {
		t.Errorf("latency changes: %+v", d.Latencies)
	}
	out := selftest.RenderDiff(d, 5)
	golden(t, "diff-latency", out)
	js, err := json.Marshal(d.Latencies)
	if err != nil || !strings.Contains(string(js), `"a_us":0.53,"b_us":13.9`) {
		t.Errorf("latency JSON %s (%v)", js, err)
	}
}
