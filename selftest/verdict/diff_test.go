package verdict

import (
	"encoding/json"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

func judged(r *selftest.Report, e *Expect) *selftest.Report {
	Judge(r, e)
	return r
}

func TestDiff(t *testing.T) {
	healthy := judged(healthyReport(4), FromRecipe(healthyRecipe(4)))
	bad, e := faultyReport()
	judged(bad, e)
	bad.NVML.DriverVersion = "550.54.15"
	bad.Modules[0].Version = "550.54.15"
	bad.NCCL.Version = 22704
	bad.Copies = bad.Copies[:len(bad.Copies)-1] // one copy measured only before

	d := selftest.Diff(healthy, bad)
	if d.Clean || !d.FailAdded || d.Verdict.A != selftest.Pass || d.Verdict.B != selftest.Fail {
		t.Errorf("diff healthy -> faulty: clean %v, fail added %v, verdict %+v", d.Clean, d.FailAdded, d.Verdict)
	}
	if len(d.Removed) != 0 {
		t.Errorf("removed %d findings, want 0: %+v", len(d.Removed), d.Removed)
	}
	golden(t, "diff-healthy-faulty", selftest.RenderDiff(d, 5))
	js, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "diff-healthy-faulty-json", string(js)+"\n")

	back := selftest.Diff(bad, healthy)
	if back.Clean || back.FailAdded || len(back.Added) != 0 || len(back.Removed) != len(d.Added) {
		t.Errorf("diff faulty -> healthy: clean %v, fail added %v, %d added, %d removed", back.Clean, back.FailAdded, len(back.Added), len(back.Removed))
	}
	golden(t, "diff-faulty-healthy", selftest.RenderDiff(back, 5))
}

func TestDiffSameVerdict(t *testing.T) {
	a := judged(healthyReport(2), FromRecipe(healthyRecipe(2)))
	b := judged(healthyReport(2), FromRecipe(healthyRecipe(2)))
	b.StartedAt = "2026-11-30T08:00:00Z"
	findCopy(b, 0, 1, selftest.MethodCE, selftest.DirWrite).GBps = 22.0 // -8.7%: listed, still clean
	b.GPUs[0].Link.CurrentSpeed = "8.0 GT/s PCIe"                       // a warn added: still clean
	b.Findings = nil
	judged(b, FromRecipe(healthyRecipe(2)))
	d := selftest.Diff(a, b)
	if !d.Clean || d.FailAdded || len(d.Added) != 1 || d.Added[0].ID != "pcie.link" {
		t.Fatalf("clean %v, fail added %v, added %+v", d.Clean, d.FailAdded, d.Added)
	}
	var moved []selftest.CopyChange
	for _, c := range d.Copies {
		if c.Percent != 0 {
			moved = append(moved, c)
		}
	}
	if len(moved) != 1 || moved[0].Percent != -8.7 || moved[0].Src != 0 || moved[0].Dst != 1 {
		t.Errorf("copy changes: %+v", moved)
	}
	golden(t, "diff-same-verdict", selftest.RenderDiff(d, 5))

	self := selftest.Diff(a, a)
	if !self.Clean || len(self.Added)+len(self.Removed)+len(self.Versions) != 0 {
		t.Errorf("a report differs from itself: %+v", self)
	}
}

// Old reports (before findings had a subject) still match by message.
func TestDiffFindingsWithoutSubject(t *testing.T) {
	a, b := vmReport(), vmReport()
	a.Findings = []selftest.Finding{{ID: "x", Status: selftest.SevWarn, Message: "m1"}, {ID: "x", Status: selftest.SevWarn, Message: "m1"}}
	b.Findings = []selftest.Finding{{ID: "x", Status: selftest.SevWarn, Message: "m1"}, {ID: "x", Status: selftest.SevFail, Message: "m1"}}
	d := selftest.Diff(a, b)
	if len(d.Added) != 1 || d.Added[0].Status != selftest.SevFail || len(d.Removed) != 1 || d.Removed[0].Status != selftest.SevWarn || !d.FailAdded {
		t.Errorf("added %+v removed %+v", d.Added, d.Removed)
	}
}
