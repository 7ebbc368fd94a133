package netboot

import (
	"bytes"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// withLatencies adds the 16-byte write latencies a P2P box measures to a demo report.
func withLatencies(r *selftest.Report) *selftest.Report {
	n := len(r.GPUs)
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			l := selftest.Latency{Src: a, Dst: b, Direction: selftest.DirWrite, Bytes: 16, Writes: 100, US: 0.5 + 0.01*float64(b), Verified: true}
			if a == b {
				l.Direction, l.US = selftest.DirLocal, 1.6
			}
			r.Latencies = append(r.Latencies, l)
		}
	}
	return r
}

// The node page's heatmap carries each pair's latency; a latency write that failed or
// did not arrive fails its cell; a latency that grew shows among the changes.
func TestHeatmapLatency(t *testing.T) {
	r := withLatencies(DemoReport(Epyc4GPU, 0, false))
	for k := range r.Latencies {
		l := &r.Latencies[k]
		switch {
		case l.Src == 0 && l.Dst == 3:
			l.Mismatch = &selftest.Mismatch{Words: 2}
		case l.Src == 3 && l.Dst == 1:
			l.Error = "CUDA_ERROR_LAUNCH_FAILED"
		}
	}
	h := NewHeatmap(r)
	if c := h.Cells[0][1]; c.LatencyUS != 0.51 || c.Failed {
		t.Errorf("cell 0,1: %+v", c)
	}
	if c := h.Cells[2][2]; c.LatencyUS != 1.6 || !c.Local {
		t.Errorf("local cell: %+v", c)
	}
	for _, p := range [][2]int{{0, 3}, {3, 1}} {
		if c := h.Cells[p[0]][p[1]]; !c.Failed || !strings.Contains(c.Why, "16-byte write") || c.LatencyUS != 0 {
			t.Errorf("cell %v: %+v", p, c)
		}
	}
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, "node.html", &NodeView{ID: "n1", Latest: &ReportView{Heatmap: h}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-latency-us="0.51"`, `, 16-byte write 0.51 µs`, ` · 0.51 µs</small>`, `data-src="0" data-dst="3" data-gbps="`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("node page lacks %q", want)
		}
	}

	prev := withLatencies(DemoReport(Epyc4GPU, 0, false))
	cur := withLatencies(DemoReport(Epyc4GPU, 0, false))
	for k := range cur.Latencies {
		if l := &cur.Latencies[k]; l.Src == 1 && l.Dst == 2 {
			l.US = 14.1 // P2P fell back to staged writes
		}
	}
	found := false
	for _, c := range DiffReports(prev, cur) {
		if c.What == "GPU1→GPU2 16-byte write µs" {
			found = c.Worse && c.Was == "0.52" && strings.HasPrefix(c.Now, "14.10 (+")
		}
	}
	if !found {
		t.Errorf("no worse change for the GPU1→GPU2 latency: %+v", DiffReports(prev, cur))
	}
}
