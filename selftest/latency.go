package selftest

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Small-write latency: the verdict rule, the console matrix and the report diff.
// The figure is p2pBandwidthLatencyTest's (Latency in schema.go): the field's quickest
// tell whether P2P is really on, about half a microsecond for direct P2P over PCIe
// against about 14 µs for a write staged through host memory.

// LatencySubject names a latency measurement: "GPU0->GPU1 latency" (GPU indexes).
func LatencySubject(r *Report, l *Latency) string {
	return fmt.Sprintf("GPU%d->GPU%d latency", ordIndex(r, l.Src), ordIndex(r, l.Dst))
}

// latencies judges every latency measurement: a failed CUDA call or bytes that did not
// arrive fail; a peer write slower than the recipe's max_latency_us for the pair's
// topology class warns. Bandwidth and verified data are what a pass rests on; a slow
// small write on a pair whose copies pass is a symptom worth a look, not a broken box.
func (j *judge) latencies() {
	r := j.r
	for k := range r.Latencies {
		l := &r.Latencies[k]
		a, b := ordIndex(r, l.Src), ordIndex(r, l.Dst)
		subject := LatencySubject(r, l)
		name := fmt.Sprintf("GPU%d->GPU%d %d-byte write", a, b, l.Bytes)
		if a == b {
			name = fmt.Sprintf("GPU%d local %d-byte write", a, l.Bytes)
		}
		if l.Error != "" {
			j.add(SevFail, "latency.error", subject, fmt.Sprintf("timing the %s failed: %s", name, l.Error), l.Error, copyErrorHint(l.Error))
			continue
		}
		if m := l.Mismatch; m != nil {
			hint := "a peer write landed elsewhere: check kernel.iommu_fault and kernel.xid, and the driver's P2P mapping (driver.p2p)"
			if a == b {
				hint = "a write inside one GPU did not arrive: check kernel.xid for this GPU and its memory (ECC, nvidia-smi -q -d ECC)"
			}
			j.add(SevFail, "latency.corrupt", subject, fmt.Sprintf("%s did not arrive: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", name, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("offset=%d want=0x%08x got=0x%08x words=%d", m.Offset, m.Want, m.Got, m.Words), hint)
			continue
		}
		if a == b || j.e == nil {
			continue
		}
		topo := pairTopology(r, a, b)
		th, ok := j.e.Thresholds[topo]
		if !ok || th.MaxLatencyUS <= 0 || l.US <= th.MaxLatencyUS {
			continue
		}
		j.add(SevWarn, "latency.slow", subject, fmt.Sprintf("%s takes %.2f µs, above the %s bound of %.2f µs", name, l.US, topo, th.MaxLatencyUS),
			fmt.Sprintf("us=%.3f selftest.thresholds.%s.max_latency_us=%g samples=%s", l.US, topo, th.MaxLatencyUS, floats(l.Samples)),
			"direct P2P writes take about 0.5 µs, writes staged through host memory about 14 µs: check p2p.status, acs.redirect and the IOMMU mode; a value near the staged figure means P2P is not really on")
	}
}

// renderLatencies prints the latency matrix: row the writing GPU, column the GPU
// written to, the diagonal local.
func renderLatencies(b *strings.Builder, r *Report) {
	if len(r.Latencies) == 0 {
		return
	}
	n := len(r.GPUs)
	for _, l := range r.Latencies {
		n = max(n, ordIndex(r, l.Src)+1, ordIndex(r, l.Dst)+1)
	}
	marked := map[string]bool{}
	for _, f := range r.Findings {
		if (f.Status == SevFail || f.Status == SevWarn) && f.Subject != "" {
			marked[f.Subject] = true
		}
	}
	grid := make([][]string, n)
	for i := range grid {
		grid[i] = make([]string, n)
	}
	bytes := int64(0)
	for k := range r.Latencies {
		l := &r.Latencies[k]
		a, d := ordIndex(r, l.Src), ordIndex(r, l.Dst)
		if a < 0 || d < 0 || a >= n || d >= n {
			continue
		}
		bytes = max(bytes, l.Bytes)
		s := "error"
		switch {
		case l.Error != "":
		case l.Mismatch != nil:
			s = "corrupt"
		default:
			s = fmt.Sprintf("%.2f", l.US)
		}
		if marked[LatencySubject(r, l)] {
			s += "!"
		}
		grid[a][d] = s
	}
	section(b, fmt.Sprintf("Latency of %d-byte writes, µs (row: writer, column: written to; median)", bytes))
	tw := newTab(b)
	header(tw, n)
	for a := 0; a < n; a++ {
		fmt.Fprintf(tw, "  GPU%d", a)
		for d := 0; d < n; d++ {
			fmt.Fprintf(tw, "\t%s", orDefault(grid[a][d], "-"))
		}
		fmt.Fprintf(tw, "\n")
	}
	tw.Flush()
	b.WriteString("  legend: diagonal = local write; \"!\" = the measurement has a fail or warn finding; - = not measured (no peer access)\n")
}

// LatencyChange compares one latency (GPU indexes) across two reports.
type LatencyChange struct {
	Src     int     `json:"src"`
	Dst     int     `json:"dst"`
	A       float64 `json:"a_us"`
	B       float64 `json:"b_us"`
	Percent float64 `json:"percent"`        // (B-A)/A in percent; 0 when either side has no figure
	Only    string  `json:"only,omitempty"` // "a" or "b" when measured in one report only
	ErrorA  string  `json:"error_a,omitempty"`
	ErrorB  string  `json:"error_b,omitempty"`
}

func diffLatencies(a, b *Report) []LatencyChange {
	type key struct{ src, dst int }
	index := func(r *Report) map[key]*Latency {
		m := map[key]*Latency{}
		for i := range r.Latencies {
			l := &r.Latencies[i]
			m[key{ordIndex(r, l.Src), ordIndex(r, l.Dst)}] = l
		}
		return m
	}
	ma, mb := index(a), index(b)
	var keys []key
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		// Local writes first, then the pairs in order.
		li, lj := keys[i].src == keys[i].dst, keys[j].src == keys[j].dst
		if li != lj {
			return li
		}
		if keys[i].src != keys[j].src {
			return keys[i].src < keys[j].src
		}
		return keys[i].dst < keys[j].dst
	})
	errText := func(l *Latency) string {
		if l.Error != "" {
			return l.Error
		}
		if l.Mismatch != nil {
			return "corrupt"
		}
		return ""
	}
	out := []LatencyChange{}
	for _, k := range keys {
		ch := LatencyChange{Src: k.src, Dst: k.dst}
		la, lb := ma[k], mb[k]
		if la != nil {
			ch.A, ch.ErrorA = la.US, errText(la)
		} else {
			ch.Only = "b"
		}
		if lb != nil {
			ch.B, ch.ErrorB = lb.US, errText(lb)
		} else {
			ch.Only = "a"
		}
		if la != nil && lb != nil && ch.ErrorA == "" && ch.ErrorB == "" {
			ch.Percent = percent(ch.A, ch.B)
		}
		out = append(out, ch)
	}
	return out
}

// renderLatencyDiff lists the latencies that moved by minPercent or more, appeared,
// disappeared or changed their error; the rest are counted.
func renderLatencyDiff(b *strings.Builder, ls []LatencyChange, minPercent float64) {
	if len(ls) == 0 {
		return
	}
	var rows []LatencyChange
	for _, c := range ls {
		if c.Only != "" || c.ErrorA != c.ErrorB || math.Abs(c.Percent) >= minPercent {
			rows = append(rows, c)
		}
	}
	fmt.Fprintf(b, "\nlatency, µs (%d compared; %d changed by less than %g%%)\n", len(ls), len(ls)-len(rows), minPercent)
	tw := newTab(b)
	for _, c := range rows {
		fmt.Fprintf(tw, "  GPU%d->GPU%d\t%s\t-> %s\t%s\n", c.Src, c.Dst,
			latencySide(c.A, c.ErrorA, c.Only == "b"), latencySide(c.B, c.ErrorB, c.Only == "a"), pctText(c.Percent, c.Only, c.ErrorA != "" || c.ErrorB != ""))
	}
	tw.Flush()
}

func latencySide(v float64, errText string, missing bool) string {
	switch {
	case missing:
		return "-"
	case errText == "corrupt":
		return "corrupt"
	case errText != "":
		return "error"
	}
	return fmt.Sprintf("%.2f", v)
}
