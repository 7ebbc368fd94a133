package netboot

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// Heatmap is the P2P bandwidth matrix of one report: GB/s per ordered pair from the
// copy-engine write copies (row = source, column = destination), the topology letters
// of each pair, and the pairs that failed.
type Heatmap struct {
	GPUs  []string    `json:"gpus"` // labels, by CUDA ordinal
	Max   float64     `json:"max_gbps"`
	Cells [][]Cell    `json:"cells"` // [src][dst]
	Rows  []HeatRow   `json:"-"`
	Note  string      `json:"note,omitempty"`
	Key   []legendKey `json:"-"`
}

// HeatRow is one source GPU's cells, for the template.
type HeatRow struct {
	Label string
	Cells []Cell
}

// Cell is one ordered pair.
type Cell struct {
	Src      int          `json:"src"`
	Dst      int          `json:"dst"`
	GBps     float64      `json:"gbps"`
	Measured bool         `json:"measured"`
	Local    bool         `json:"local"`
	Topology string       `json:"topology,omitempty"`
	Failed   bool         `json:"failed"`
	Why      string       `json:"why,omitempty"`
	Style    template.CSS `json:"-"`
	// LatencyUS is the 16-byte write latency from Src to Dst (report latencies[]), 0
	// when not measured: ~0.5 µs is direct P2P, ~14 µs a write staged through the host.
	LatencyUS float64 `json:"latency_us,omitempty"`
}

type legendKey struct {
	Label string
	Style template.CSS
}

// NewHeatmap builds the matrix; nil when the report has no GPUs and no copies.
func NewHeatmap(r *selftest.Report) *Heatmap {
	n := len(r.GPUs)
	for _, c := range r.Copies {
		n = max(n, c.Src+1, c.Dst+1)
	}
	for _, p := range r.Pairs {
		n = max(n, p.B+1)
	}
	if n == 0 {
		return nil
	}
	n = min(n, 64)
	h := &Heatmap{Cells: make([][]Cell, n)}
	for i := 0; i < n; i++ {
		label := fmt.Sprintf("GPU%d", i)
		if i < len(r.GPUs) {
			label += " " + strings.TrimPrefix(r.GPUs[i].BDF, "0000:")
		}
		h.GPUs = append(h.GPUs, label)
		h.Cells[i] = make([]Cell, n)
		for j := 0; j < n; j++ {
			h.Cells[i][j] = Cell{Src: i, Dst: j, Local: i == j}
		}
	}
	for _, p := range r.Pairs {
		if p.A < 0 || p.B >= n || p.A >= p.B {
			continue
		}
		topo := p.Topology
		if topo == "" {
			topo = p.NVMLTopology
		}
		for _, c := range []*Cell{&h.Cells[p.A][p.B], &h.Cells[p.B][p.A]} {
			c.Topology = topo
			if p.CanAccessPeer != nil && !*p.CanAccessPeer {
				c.fail("no peer access (cuDeviceCanAccessPeer)")
			}
		}
		if p.P2PWrite != "" && p.P2PWrite != "OK" {
			h.Cells[p.A][p.B].fail("NVML P2P write " + p.P2PWrite)
			h.Cells[p.B][p.A].fail("NVML P2P write " + p.P2PWrite)
		}
		if p.P2PRead != "" && p.P2PRead != "OK" {
			h.Cells[p.A][p.B].fail("NVML P2P read " + p.P2PRead)
			h.Cells[p.B][p.A].fail("NVML P2P read " + p.P2PRead)
		}
	}
	for _, c := range r.Copies {
		if c.Method != selftest.MethodCE || c.Src >= n || c.Dst >= n || c.Src < 0 || c.Dst < 0 {
			continue
		}
		if c.Src == c.Dst && c.Direction != selftest.DirLocal || c.Src != c.Dst && c.Direction != selftest.DirWrite {
			continue
		}
		cell := &h.Cells[c.Src][c.Dst]
		switch {
		case c.Error != "":
			cell.fail(c.Error)
		case c.Mismatch != nil:
			cell.fail(fmt.Sprintf("data corrupted: %d words differ from offset %d", c.Mismatch.Words, c.Mismatch.Offset))
		default:
			cell.GBps, cell.Measured = c.GBps, true
			if c.LinkGBps > 0 && c.GBps > 1.05*c.LinkGBps {
				cell.fail(fmt.Sprintf("%.1f GB/s is above the link's %.1f GB/s", c.GBps, c.LinkGBps))
			}
			if !cell.Local {
				h.Max = max(h.Max, c.GBps)
			}
		}
	}
	for _, l := range r.Latencies {
		if l.Src < 0 || l.Dst < 0 || l.Src >= n || l.Dst >= n {
			continue
		}
		cell := &h.Cells[l.Src][l.Dst]
		switch {
		case l.Error != "":
			cell.fail("16-byte write: " + l.Error)
		case l.Mismatch != nil:
			cell.fail(fmt.Sprintf("16-byte write did not arrive: %d words differ", l.Mismatch.Words))
		default:
			cell.LatencyUS = l.US
		}
	}
	for i := range h.Cells {
		row := HeatRow{Label: h.GPUs[i]}
		for j := range h.Cells[i] {
			c := &h.Cells[i][j]
			c.Style = cellStyle(c, h.Max)
			row.Cells = append(row.Cells, *c)
		}
		h.Rows = append(h.Rows, row)
	}
	if h.Max == 0 {
		h.Note = "no peer copy was measured"
	}
	for _, f := range []float64{0.25, 0.5, 0.75, 1} {
		c := &Cell{Measured: true, GBps: f * h.Max}
		h.Key = append(h.Key, legendKey{Label: fmt.Sprintf("%.0f GB/s", f*h.Max), Style: cellStyle(c, h.Max)})
	}
	return h
}

func (c *Cell) fail(why string) {
	c.Failed = true
	if c.Why != "" {
		c.Why += "; "
	}
	c.Why += why
}

// cellStyle shades a cell by its share of the fastest peer copy: pale to dark blue.
func cellStyle(c *Cell, maxGBps float64) template.CSS {
	switch {
	case c.Failed:
		return "background:#c62828;color:#fff"
	case c.Local:
		return "background:#eceff1;color:#455a64"
	case !c.Measured || maxGBps <= 0:
		return "background:#fafafa;color:#9e9e9e"
	}
	f := math.Max(0, math.Min(1, c.GBps/maxGBps))
	light := 94 - 60*f
	fg := "#0d1b2a"
	if light < 55 {
		fg = "#fff"
	}
	return template.CSS(fmt.Sprintf("background:hsl(212,70%%,%.0f%%);color:%s", light, fg))
}

// Curve is the NCCL all-reduce bus bandwidth by size, drawn as inline SVG.
type Curve struct {
	Points []CurvePoint  `json:"points"`
	AtMax  float64       `json:"busbw_at_max"`
	Ranks  int           `json:"ranks"`
	Error  string        `json:"error,omitempty"`
	SVG    template.HTML `json:"-"`
}

// CurvePoint is one size.
type CurvePoint struct {
	Bytes int64   `json:"bytes"`
	BusBW float64 `json:"busbw"`
	Wrong int64   `json:"wrong"`
}

// NewCurve returns nil when NCCL did not run.
func NewCurve(r *selftest.Report) *Curve {
	if r.NCCL == nil {
		return nil
	}
	c := &Curve{AtMax: r.NCCL.BusBWAtMax, Ranks: r.NCCL.Ranks, Error: r.NCCL.Error}
	for _, s := range r.NCCL.Sizes {
		if s.Bytes > 0 {
			c.Points = append(c.Points, CurvePoint{Bytes: s.Bytes, BusBW: s.BusBW, Wrong: s.Wrong})
		}
	}
	sort.Slice(c.Points, func(i, j int) bool { return c.Points[i].Bytes < c.Points[j].Bytes })
	c.SVG = curveSVG(c.Points)
	return c
}

// curveSVG draws busbw against log2(size); every value is a number we format, so the
// markup is safe to mark as HTML.
func curveSVG(pts []CurvePoint) template.HTML {
	if len(pts) == 0 {
		return ""
	}
	const w, h, left, right, top, bottom = 520.0, 220.0, 48.0, 12.0, 12.0, 32.0
	lo, hi := math.Log2(float64(pts[0].Bytes)), math.Log2(float64(pts[len(pts)-1].Bytes))
	if hi == lo {
		hi = lo + 1
	}
	ymax := 0.0
	for _, p := range pts {
		ymax = math.Max(ymax, p.BusBW)
	}
	ymax = niceCeil(ymax * 1.1)
	x := func(b int64) float64 { return left + (math.Log2(float64(b))-lo)/(hi-lo)*(w-left-right) }
	y := func(v float64) float64 { return h - bottom - v/ymax*(h-top-bottom) }
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="curve" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="NCCL all-reduce bus bandwidth by message size">`, w, h, w, h)
	for i := 0; i <= 5; i++ {
		v := ymax * float64(i) / 5
		fmt.Fprintf(&sb, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e0e0e0"/><text x="%.1f" y="%.1f" font-size="10" text-anchor="end">%s</text>`,
			left, w-right, y(v), y(v), left-4, y(v)+3, strconv.FormatFloat(v, 'f', -1, 64))
	}
	fmt.Fprintf(&sb, `<text x="12" y="%.1f" font-size="10" transform="rotate(-90 12 %.1f)" text-anchor="middle">busbw GB/s</text>`, (h-bottom)/2, (h-bottom)/2)
	step := max(1, len(pts)/8)
	for i, p := range pts {
		if i%step == 0 || i == len(pts)-1 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`, x(p.Bytes), h-bottom+14, sizeLabel(p.Bytes))
		}
	}
	sb.WriteString(`<polyline fill="none" stroke="#1565c0" stroke-width="2" points="`)
	for _, p := range pts {
		fmt.Fprintf(&sb, "%.1f,%.1f ", x(p.Bytes), y(p.BusBW))
	}
	sb.WriteString(`"/>`)
	for _, p := range pts {
		color := "#1565c0"
		if p.Wrong > 0 {
			color = "#c62828"
		}
		fmt.Fprintf(&sb, `<circle class="pt" cx="%.1f" cy="%.1f" r="3.5" fill="%s" data-bytes="%d" data-busbw="%.2f"><title>%s: %.2f GB/s%s</title></circle>`,
			x(p.Bytes), y(p.BusBW), color, p.Bytes, p.BusBW, sizeLabel(p.Bytes), p.BusBW, wrongNote(p.Wrong))
	}
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String())
}

func wrongNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d wrong elements", n)
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func sizeLabel(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// Change is one way a node differs from its previous boot.
type Change struct {
	What  string `json:"what"`
	Was   string `json:"was"`
	Now   string `json:"now"`
	Worse bool   `json:"worse"`
}

// DiffReports says how cur differs from prev, from selftest.Diff: the verdict, the
// versions, fail and warn findings added and removed, peer copies whose bandwidth moved
// by more than 10% (or that failed or appeared), and NCCL sizes that moved by more than 5%.
func DiffReports(prev, cur *selftest.Report) []Change {
	d := selftest.Diff(prev, cur)
	out := []Change{}
	add := func(what, was, now string, worse bool) {
		out = append(out, Change{What: what, Was: was, Now: now, Worse: worse})
	}
	if d.Verdict.A != d.Verdict.B {
		add("verdict", d.Verdict.A, d.Verdict.B, d.Verdict.B == selftest.Fail)
	}
	for _, v := range d.Versions {
		add(v.Field, v.A, v.B, false)
	}
	for _, f := range d.Added {
		if f.Status != selftest.SevInfo {
			add("finding "+f.ID, "", f.Status+": "+f.Message, f.Status == selftest.SevFail)
		}
	}
	for _, f := range d.Removed {
		if f.Status != selftest.SevInfo {
			add("finding "+f.ID, f.Status+": "+f.Message, "gone", false)
		}
	}
	for _, c := range d.Copies {
		if c.Src == c.Dst {
			continue
		}
		what := fmt.Sprintf("GPU%d→GPU%d %s %s GB/s", c.Src, c.Dst, c.Method, c.Direction)
		switch {
		case c.ErrorB != "" && c.ErrorA == "":
			add(what, fmt.Sprintf("%.1f", c.A), "failed: "+c.ErrorB, true)
		case c.ErrorA != "" && c.ErrorB == "":
			add(what, "failed: "+c.ErrorA, fmt.Sprintf("%.1f", c.B), false)
		case c.Only == "a":
			add(what, fmt.Sprintf("%.1f", c.A), "not measured", true)
		case c.Only == "b":
			add(what, "not measured", fmt.Sprintf("%.1f", c.B), false)
		case math.Abs(c.Percent) > 10:
			add(what, fmt.Sprintf("%.1f", c.A), fmt.Sprintf("%.1f (%+.0f%%)", c.B, c.Percent), c.Percent < 0)
		}
	}
	for _, l := range d.Latencies {
		what := fmt.Sprintf("GPU%d→GPU%d 16-byte write µs", l.Src, l.Dst)
		switch {
		case l.Src == l.Dst || l.Only != "":
		case l.ErrorB != "" && l.ErrorA == "":
			add(what, fmt.Sprintf("%.2f", l.A), l.ErrorB, true)
		case math.Abs(l.Percent) > 25:
			add(what, fmt.Sprintf("%.2f", l.A), fmt.Sprintf("%.2f (%+.0f%%)", l.B, l.Percent), l.Percent > 0)
		}
	}
	for _, n := range d.NCCL {
		what := "NCCL busbw at " + sizeLabel(n.Bytes)
		switch {
		case n.Only != "":
			add(what, fmt.Sprintf("%.2f", n.A), fmt.Sprintf("%.2f", n.B), n.Only == "a")
		case n.WrongB > 0 && n.WrongA == 0:
			add(what, "correct", fmt.Sprintf("%d wrong elements", n.WrongB), true)
		case math.Abs(n.Percent) > 5:
			add(what, fmt.Sprintf("%.2f", n.A), fmt.Sprintf("%.2f (%+.0f%%)", n.B, n.Percent), n.Percent < 0)
		}
	}
	if (prev.NCCL == nil) != (cur.NCCL == nil) {
		add("NCCL", ran(prev.NCCL != nil), ran(cur.NCCL != nil), cur.NCCL == nil)
	}
	return out
}

func ran(b bool) string {
	if b {
		return "ran"
	}
	return "did not run"
}
