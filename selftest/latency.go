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
	return fmt.Sprintf("GPU%d->GPU%d latency", r.GPUIndex(l.Src), r.GPUIndex(l.Dst))
}

// renderLatencies prints the latency matrix: row the writing GPU, column the GPU
// written to, the diagonal local.
func renderLatencies(b *strings.Builder, r *Report, width int) {
	if len(r.Latencies) == 0 {
		return
	}
	n := len(r.GPUs)
	for _, l := range r.Latencies {
		n = max(n, r.GPUIndex(l.Src)+1, r.GPUIndex(l.Dst)+1)
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
		a, d := r.GPUIndex(l.Src), r.GPUIndex(l.Dst)
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
	for a := range grid {
		for d := range grid[a] {
			grid[a][d] = orDefault(grid[a][d], "-")
		}
	}
	writeMatrix(b, width, grid)
	wrap(b, width, "  legend: ", 10, "diagonal = local write; \"!\" = the measurement has a fail or warn finding; - = not measured (no peer access)")
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
			m[key{r.GPUIndex(l.Src), r.GPUIndex(l.Dst)}] = l
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
