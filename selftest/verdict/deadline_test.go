package verdict

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// The deadline finding blames a BAR1 smaller than VRAM under a static-BAR1
// driver only for the phases that map peers (CUDA and NCCL), only when BAR1 is
// known and really smaller, and says how long the phase ran only when the
// stall record knows.
func TestDeadline(t *testing.T) {
	const blame = "likely cause: NCCL init on a card whose BAR1 is smaller than VRAM"
	for _, c := range []struct {
		name  string
		phase string
		after int64
		set   func(r *selftest.Report)
		msg   string // the whole message
	}{
		{"CUDA, BAR1 below VRAM", selftest.PhaseCUDA, 900, nil, "self-test stalled in cuda after 900ms: cuMemcpyAsync; " + blame + " with a static-BAR1 driver"},
		{"NVML, BAR1 below VRAM", selftest.PhaseNVML, 900, nil, "self-test stalled in nvml after 900ms: cuMemcpyAsync"},
		{"no time recorded", selftest.PhaseNVML, 0, nil, "self-test stalled in nvml: cuMemcpyAsync"},
		{"BAR1 as large as VRAM", selftest.PhaseNCCL, 900, func(r *selftest.Report) {
			for i := range r.GPUs {
				v, _ := r.GPUVRAM(i)
				r.GPUs[i].BAR1Bytes = v
			}
		}, "self-test stalled in nccl after 900ms: cuMemcpyAsync"},
		{"BAR1 unknown", selftest.PhaseNCCL, 900, func(r *selftest.Report) {
			for i := range r.GPUs {
				r.GPUs[i].BAR1Bytes, r.GPUs[i].NVML.BAR1Total = 0, 0
			}
		}, "self-test stalled in nccl after 900ms: cuMemcpyAsync"},
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		e.P2P = P2PStaticBAR1
		if c.set != nil {
			c.set(r)
		}
		r.Stall = &selftest.Stall{Phase: c.phase, AfterMS: c.after, Cause: "cuMemcpyAsync"}
		Judge(r, e)
		found := false
		for _, f := range r.Findings {
			if f.ID != "deadline" {
				continue
			}
			found = true
			if f.Message != c.msg {
				t.Errorf("%s: %q, want %q", c.name, f.Message, c.msg)
			}
			if blamed := strings.Contains(f.Hint, "use the dynamic-BAR1 branch"); blamed != strings.Contains(c.msg, blame) {
				t.Errorf("%s: hint %q", c.name, f.Hint)
			}
		}
		if !found {
			t.Errorf("%s: no deadline finding:\n%s", c.name, dump(r.Findings))
		}
	}
}

// The PTX finding's evidence carries the JIT log's first line only, and a
// one-line log whole.
func TestPTXEvidence(t *testing.T) {
	for log, want := range map[string]string{
		"ptxas fatal   : Unsupported .version 7.0\nmore\n": "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222): ptxas fatal   : Unsupported .version 7.0",
		"ptxas fatal   : Unsupported .version 7.0":         "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222): ptxas fatal   : Unsupported .version 7.0",
		"": "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)",
	} {
		r := healthyReport(2)
		r.CUDA.PTX = &selftest.Status{Name: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", Code: 222}
		r.CUDA.PTXLog = log
		Judge(r, FromRecipe(healthyRecipe(2)))
		for _, f := range r.Findings {
			if f.ID == "cuda.ptx" && f.Evidence != want {
				t.Errorf("log %q: evidence %q, want %q", log, f.Evidence, want)
			}
		}
	}
}
