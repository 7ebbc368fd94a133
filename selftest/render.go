package selftest

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
)

// Render is the full console view of a report (peerboot report show): the verdict,
// the versions of every layer, the GPUs, the pair topology, one bandwidth matrix per
// copy method and direction, the NCCL sizes and transports, the above-BAR1 probe, the
// findings (fail and warn first, info last) and the phase durations, laid out for
// DefaultWidth columns. Summary stays the short form for the boot console.
func Render(r *Report) string { return RenderWidth(r, DefaultWidth) }

// RenderWidth is Render for a console width columns wide: matrices that do not fit
// drop the topology from their cells, then split into column blocks; the GPU table
// moves the upstream path under each GPU; prose wraps at word boundaries. The output
// is a function of the report and the width alone.
func RenderWidth(r *Report, width int) string {
	width = max(width, minWidth)
	var b strings.Builder
	renderHeader(&b, r, width)
	renderGPUs(&b, r, width)
	renderTopology(&b, r, width)
	renderCopies(&b, r, width)
	renderLatencies(&b, r, width)
	renderHighMem(&b, r, width)
	renderPeerMem(&b, r, width)
	renderBAR1(&b, r, width)
	renderNCCL(&b, r, width)
	renderSoak(&b, r)
	renderSoakSeries(&b, r, width)
	renderKernelEvents(&b, r, width)
	renderFindings(&b, r, width)
	renderDurations(&b, r, width)
	return trimLines(b.String())
}

func renderHeader(b *strings.Builder, r *Report, width int) {
	fmt.Fprintf(b, "peerboot self-test: %s", strings.ToUpper(orDefault(r.Verdict, "unknown")))
	if r.Recipe.Name != "" {
		fmt.Fprintf(b, "  recipe %s %s", r.Recipe.Name, shortDigest(r.Recipe.Digest))
	}
	b.WriteString("\n")
	line := func(label, format string, args ...any) {
		wrap(b, width, fmt.Sprintf("  %-8s ", label), 11, fmt.Sprintf(format, args...))
	}
	if r.StartedAt != "" || r.Tool != "" {
		line("started", "%s, tool %s", orDefault(r.StartedAt, "?"), orDefault(r.Tool, "?"))
	}
	line("kernel", "%s, cmdline: %s", orDefault(r.Kernel.Release, "?"), orDefault(r.Kernel.Cmdline, "?"))
	line("driver", "%s (NVML), modules: %s", orDefault(r.NVML.DriverVersion, "?"), moduleLine(r.Modules))
	cuda := libLine(r.CUDA.Library, r.CUDA.Loaded, r.CUDA.Error, "cuInit", r.CUDA.CuInit, "")
	if p := r.CUDA.PTX; p != nil {
		cuda += fmt.Sprintf(", PTX %s (%d)", p.Name, p.Code)
	}
	line("cuda", "%s, driver API %s", cuda, orDefault(cudaVersion(r.CUDA.DriverVersion), "?"))
	line("nvml", "%s, CUDA %s", libLine(r.NVML.Library, r.NVML.Loaded, r.NVML.Error, "init", r.NVML.Init, ""), orDefault(cudaVersion(r.NVML.CUDAVersion), "?"))
	if n := r.NCCL; n != nil {
		line("nccl", "%s %s, %d rank(s)", orDefault(n.Library, "?"), orDefault(ncclVersion(n.Version), "?"), n.Ranks)
	} else {
		line("nccl", "not run")
	}
	if io := r.IOMMU; io.Mode != "" || io.Active || len(io.Units) > 0 {
		s := orDefault(io.Mode, "mode unknown")
		if len(io.Units) > 0 {
			s += " (" + strings.Join(io.Units, ", ") + ")"
		}
		if len(io.Cmdline) > 0 {
			s += ", cmdline " + strings.Join(io.Cmdline, " ")
		}
		line("iommu", "%s", s)
	}
}

func moduleLine(ms []Module) string {
	if len(ms) == 0 {
		return "none attempted"
	}
	var parts []string
	for _, m := range ms {
		if m.RequiredBy != "" {
			continue
		}
		s := m.Name
		if m.Version != "" {
			s += " " + m.Version
		}
		s += " " + m.Result
		if m.Result == ModError && m.Errno != 0 {
			s += "(" + errnoName(m.Errno) + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// ncclVersion renders ncclGetVersion's code: major*10000 + minor*100 + patch since
// 2.9, major*1000 + minor*100 + patch before.
func ncclVersion(v int) string {
	switch {
	case v <= 0:
		return ""
	case v >= 10000:
		return fmt.Sprintf("%d.%d.%d", v/10000, (v%10000)/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, (v%1000)/100, v%100)
}

func newTab(b *strings.Builder) *tabwriter.Writer {
	return tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
}

func section(b *strings.Builder, title string) {
	b.WriteString("\n" + title + "\n")
}

func linkText(speed string, width int) string {
	s := strings.TrimSuffix(strings.TrimSpace(speed), " PCIe")
	s = strings.ReplaceAll(s, " GT/s", "GT/s")
	if s == "" {
		s = "?"
	}
	if width > 0 {
		s += fmt.Sprintf(" x%d", width)
	}
	return s
}

// linkNowMax is a link's current and maximum state in one cell: "16.0GT/s x16" when
// they agree, "2.5/16.0GT/s x8/16" where they differ.
func linkNowMax(l Link) string {
	speed := func(s string) string {
		return strings.TrimSuffix(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), " PCIe")), " GT/s")
	}
	cur, top := orDefault(speed(l.CurrentSpeed), "?"), orDefault(speed(l.MaxSpeed), "?")
	out := cur + "GT/s"
	if cur != top {
		out = cur + "/" + top + "GT/s"
	}
	switch {
	case l.CurrentWidth > 0 && l.CurrentWidth != l.MaxWidth && l.MaxWidth > 0:
		out += fmt.Sprintf(" x%d/%d", l.CurrentWidth, l.MaxWidth)
	case l.CurrentWidth > 0:
		out += fmt.Sprintf(" x%d", l.CurrentWidth)
	}
	return out
}

func renderGPUs(b *strings.Builder, r *Report, width int) {
	section(b, "GPUs")
	if len(r.GPUs) == 0 {
		b.WriteString("  none in sysfs\n")
		return
	}
	type gpuRow struct {
		now, maxLink, both, upstream, sizes string
		cells                               []string
	}
	var rows []gpuRow
	for i, g := range r.GPUs {
		vram, _ := r.GPUVRAM(i)
		var up []string
		for _, br := range g.Upstream {
			s := br.BDF + " " + linkText(br.Link.CurrentSpeed, br.Link.CurrentWidth)
			if br.ACS.Redirects() {
				s += " ACS:" + br.ACS.Bits()
			}
			up = append(up, s)
		}
		rows = append(rows, gpuRow{
			now:      linkText(g.Link.CurrentSpeed, g.Link.CurrentWidth),
			maxLink:  linkText(g.Link.MaxSpeed, g.Link.MaxWidth),
			both:     linkNowMax(g.Link),
			upstream: orDefault(strings.Join(up, " > "), "-"),
			sizes:    HumanBytes(r.GPUBAR1(i)) + "/" + HumanBytes(vram),
			cells:    []string{fmt.Sprintf("  %d", i), g.BDF, r.GPUModel(i), fmt.Sprint(g.NUMANode)},
		})
	}
	// Widest first; then the upstream path goes under each GPU, then the two link
	// columns become one.
	for layout := 0; ; layout++ {
		head := []string{"  #", "BDF", "NAME", "NUMA"}
		switch layout {
		case 0:
			head = append(head, "LINK NOW", "LINK MAX", "BAR1/VRAM", "UPSTREAM")
		case 1:
			head = append(head, "LINK NOW", "LINK MAX", "BAR1/VRAM")
		default:
			head = append(head, "LINK NOW/MAX", "BAR1/VRAM")
		}
		table := [][]string{head}
		for _, row := range rows {
			cells := append([]string{}, row.cells...)
			if layout < 2 {
				cells = append(cells, row.now, row.maxLink)
			} else {
				cells = append(cells, row.both)
			}
			cells = append(cells, row.sizes)
			if layout == 0 {
				cells = append(cells, row.upstream)
			}
			table = append(table, cells)
		}
		if layout < 2 && tableWidth(table) > width {
			continue
		}
		if layout == 0 {
			writeTable(b, table)
			return
		}
		// The upstream path under each GPU's row.
		var tb strings.Builder
		writeTable(&tb, table)
		lines := strings.Split(strings.TrimSuffix(tb.String(), "\n"), "\n")
		b.WriteString(lines[0] + "\n")
		for i, l := range lines[1:] {
			b.WriteString(l + "\n")
			if rows[i].upstream != "-" {
				wrap(b, width, "      upstream: ", 16, rows[i].upstream)
			}
		}
		return
	}
}

func renderTopology(b *strings.Builder, r *Report, width int) {
	n := len(r.GPUs)
	if n < 2 || len(r.Pairs) == 0 {
		return
	}
	section(b, "Topology (sysfs class; NVML P2P read/write if not OK; cuda-: no peer access)")
	cells := make([][]string, n)
	for a := 0; a < n; a++ {
		cells[a] = make([]string, n)
		for c := 0; c < n; c++ {
			cell := "X"
			if a != c {
				cell = "-"
				if p := r.PairOf(a, c); p != nil {
					cell = orDefault(p.Topology, orDefault(p.NVMLTopology, "?"))
					if (p.P2PRead != "" && p.P2PRead != "OK") || (p.P2PWrite != "" && p.P2PWrite != "OK") {
						cell += " " + orDefault(p.P2PRead, "?") + "/" + orDefault(p.P2PWrite, "?")
					}
					if p.CanAccessPeer != nil && !*p.CanAccessPeer {
						cell += " cuda-"
					}
				}
			}
			cells[a][c] = cell
		}
	}
	writeMatrix(b, width, cells)
}

// copyOrder lists methods and directions in the order the matrices print.
var copyOrder = []struct{ method, dir string }{
	{MethodCE, DirWrite}, {MethodCE, DirRead}, {MethodCE, DirBidir},
	{MethodSM, DirWrite}, {MethodSM, DirRead}, {MethodSM, DirBidir},
}

// failedSubjects is the set of subjects that carry a fail finding.
func failedSubjects(r *Report) map[string]bool {
	m := map[string]bool{}
	for _, f := range r.Findings {
		if f.Status == SevFail && f.Subject != "" {
			m[f.Subject] = true
		}
	}
	return m
}

func renderCopies(b *strings.Builder, r *Report, width int) {
	if len(r.Copies) == 0 {
		return
	}
	n := len(r.GPUs)
	for _, c := range r.Copies {
		n = max(n, r.GPUIndex(c.Src)+1, r.GPUIndex(c.Dst)+1)
	}
	failed := failedSubjects(r)
	cell := func(c *Copy, topo string) string {
		s := "error"
		if c.Error == "" {
			s = strings.TrimSpace(fmt.Sprintf("%.1f %s", c.GBps, topo))
		}
		if failed[CopySubject(r, c)] {
			s += "!"
		}
		return s
	}
	// Extra method/direction pairs a future p2pcheck may add print after the known ones.
	order := append([]struct{ method, dir string }{}, copyOrder...)
	for _, c := range r.Copies {
		if c.Direction == DirLocal || c.Src == c.Dst {
			continue
		}
		known := false
		for _, o := range order {
			if o.method == c.Method && o.dir == c.Direction {
				known = true
			}
		}
		if !known {
			order = append(order, struct{ method, dir string }{c.Method, c.Direction})
		}
	}
	printed, compact := false, false
	for _, o := range order {
		// grid lays out one method and direction; withTopo puts the pair's class in
		// each cell, which an 80-column console has no room for beyond 4 GPUs.
		grid := func(withTopo bool) ([][]string, bool) {
			g := make([][]string, n)
			for i := range g {
				g[i] = make([]string, n)
			}
			any := false
			for k := range r.Copies {
				c := &r.Copies[k]
				if c.Method != o.method {
					continue
				}
				a, d := r.GPUIndex(c.Src), r.GPUIndex(c.Dst)
				if a < 0 || d < 0 || a >= n || d >= n {
					continue
				}
				topo := ""
				if withTopo {
					topo = "loc"
					if a != d {
						topo = orDefault(r.PairTopology(a, d), "?")
					}
				}
				switch {
				case a == d && (c.Direction == DirLocal || c.Direction == o.dir):
					g[a][a] = cell(c, topo)
				case a != d && c.Direction == o.dir:
					any = true
					g[a][d] = cell(c, topo)
					if o.dir == DirBidir && g[d][a] == "" {
						g[d][a] = g[a][d]
					}
				}
			}
			for a := range g {
				for d := range g[a] {
					g[a][d] = orDefault(g[a][d], "-")
				}
			}
			return g, any
		}
		cells, any := grid(true)
		if !any {
			continue
		}
		if matrixWidth(cells) > width {
			cells, _ = grid(false)
			compact = true
		}
		printed = true
		what := "row: source, column: destination"
		switch o.dir {
		case DirRead:
			what = "row: source, column: destination that pulls"
		case DirBidir:
			what = "both directions at once, sum"
		}
		section(b, fmt.Sprintf("Copies %s %s, GB/s (%s)", o.method, o.dir, what))
		writeMatrix(b, width, cells)
	}
	if printed {
		legend := "PIX/PXB/PHB/NODE/SYS = pair topology; loc = local copy on the diagonal; \"!\" = the copy has a fail finding; error = the copy failed; - = not measured"
		if compact {
			legend = "the diagonal = local copies; \"!\" = the copy has a fail finding; error = the copy failed; - = not measured; each pair's class is in the Topology matrix"
		}
		wrap(b, width, "  legend: ", 10, legend)
	} else {
		section(b, "Copies")
		for k := range r.Copies {
			c := &r.Copies[k]
			fmt.Fprintf(b, "  %s  %s\n", CopySubject(r, c), cell(c, "loc"))
		}
	}
}

// renderPeerMem shows each GPU's P2P mode as the driver logged it and the peermem
// phase's checks; nothing when the report has neither (a stock driver, an older
// p2pcheck).
func renderPeerMem(b *strings.Builder, r *Report, width int) {
	var modes [][]string
	for i, g := range r.GPUs {
		if g.P2PMode != "" {
			why := "-"
			for _, f := range strings.Fields(g.P2PModeLine) {
				if strings.HasPrefix(f, "why=") {
					why = strings.TrimPrefix(f, "why=")
				}
			}
			modes = append(modes, []string{fmt.Sprintf("  GPU%d", i), g.BDF, g.P2PMode, why})
		}
	}
	if len(modes) > 0 {
		section(b, "P2P mode (the driver's peerboot-p2p line)")
		writeTable(b, append([][]string{{"  GPU", "BDF", "MODE", "WHY"}}, modes...))
	}
	if len(r.PeerMem) == 0 {
		return
	}
	section(b, "Peer memory (managed, VMM, shared by fd or IPC handle)")
	rows := [][]string{{"  FORM", "OWNER", "PEER", "BYTES", "RESULT"}}
	for _, m := range r.PeerMem {
		res := "not verified"
		switch {
		case m.Refused != "":
			res = "refused: " + m.Refused
		case m.Error != "":
			res = m.Step + " error: " + m.Error
		case m.Mismatch != nil:
			res = fmt.Sprintf("CORRUPT in the %s at byte %#x (%d words)", m.Step, m.Mismatch.Offset, m.Mismatch.Words)
		case m.Verified:
			res = "verified"
		}
		peer := fmt.Sprintf("GPU%d", r.GPUIndex(m.Peer))
		if m.Peer == m.Owner {
			peer = "(local)"
		}
		rows = append(rows, []string{"  " + m.Kind, fmt.Sprintf("GPU%d", r.GPUIndex(m.Owner)), peer, HumanBytes(m.Bytes), res})
	}
	writeTable(b, rows)
}

func renderHighMem(b *strings.Builder, r *Report, width int) {
	if len(r.HighMem) == 0 {
		return
	}
	section(b, "Above-BAR1 probe")
	rows := [][]string{{"  GPU", "PEER", "BAR1/VRAM", "BALLAST", "BUFFER VA", "RESULT"}}
	for _, h := range r.HighMem {
		peer := "-"
		if h.Peer >= 0 {
			peer = fmt.Sprintf("GPU%d", r.GPUIndex(h.Peer))
		}
		res := "not verified"
		switch {
		case h.Error != "":
			res = "error: " + h.Error
		case h.Mismatch != nil:
			res = fmt.Sprintf("CORRUPT at byte %#x (%d words)", h.Mismatch.Offset, h.Mismatch.Words)
		case h.Verified:
			res = "verified"
		}
		rows = append(rows, []string{fmt.Sprintf("  GPU%d", r.GPUIndex(h.GPU)), peer, HumanBytes(h.BAR1Bytes) + "/" + HumanBytes(h.VRAMBytes),
			fmt.Sprintf("%dMiB", h.BallastMiB), orDefault(h.BufferVA, "?"), res})
	}
	writeTable(b, rows)
	if g := r.HighMem[0].Guarantee; g != "" {
		wrap(b, width, "  placement: ", 13, g)
	}
}

func renderNCCL(b *strings.Builder, r *Report, width int) {
	n := r.NCCL
	if n == nil {
		return
	}
	title := fmt.Sprintf("NCCL all-reduce (%d rank(s)", n.Ranks)
	if n.BusBWAtMax > 0 {
		title += fmt.Sprintf(", busbw at the largest size %.2f GB/s", n.BusBWAtMax)
	}
	section(b, title+")")
	if n.Error != "" {
		wrap(b, width, "  error: ", 9, n.Error)
	}
	if len(n.Sizes) > 0 {
		rows := [][]string{{"  BYTES", "TIME", "ALGBW GB/s", "BUSBW GB/s", "WRONG"}}
		for _, s := range n.Sizes {
			rows = append(rows, []string{"  " + HumanBytes(s.Bytes), fmt.Sprintf("%.1fus", s.TimeUS), fmt.Sprintf("%.2f", s.AlgBW), fmt.Sprintf("%.2f", s.BusBW), fmt.Sprint(s.Wrong)})
		}
		writeTable(b, rows)
	}
	counts := map[string]int{}
	notP2P := 0
	for _, t := range n.Transports {
		counts[t.Via]++
		if !t.P2P && t.From != t.To {
			notP2P++
		}
	}
	vias := make([]string, 0, len(counts))
	for v := range counts {
		vias = append(vias, v)
	}
	sort.Strings(vias)
	parts := make([]string, len(vias))
	for i, v := range vias {
		parts[i] = fmt.Sprintf("%d via %s", counts[v], v)
	}
	if len(n.Transports) == 0 {
		fmt.Fprintf(b, "  transports: none logged\n")
	} else {
		wrap(b, width, "  transports: ", 14, fmt.Sprintf("%d connection(s), %d not P2P: %s", len(n.Transports), notP2P, strings.Join(parts, ", ")))
	}
	if len(n.Env) > 0 {
		keys := make([]string, 0, len(n.Env))
		for k := range n.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			keys[i] = k + "=" + n.Env[k]
		}
		wrap(b, width, "  env: ", 7, strings.Join(keys, " "))
	}
	if n.LogFile != "" {
		fmt.Fprintf(b, "  log: %s\n", n.LogFile)
	}
}

func renderKernelEvents(b *strings.Builder, r *Report, width int) {
	if len(r.KernelEvents) == 0 {
		return
	}
	section(b, fmt.Sprintf("Kernel log (%d event(s))", len(r.KernelEvents)))
	for _, ev := range r.KernelEvents {
		wrap(b, width, fmt.Sprintf("  %-11s ", ev.Kind), 14, ev.Line)
	}
}

// sortedFindings returns the findings fail first, then warn, then info, each in the
// order the rules produced them.
func sortedFindings(fs []Finding) []Finding {
	rank := func(s string) int {
		switch s {
		case SevFail:
			return 0
		case SevWarn:
			return 1
		case SevInfo:
			return 3
		}
		return 2
	}
	out := append([]Finding{}, fs...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].Status) < rank(out[j].Status) })
	return out
}

func renderFindings(b *strings.Builder, r *Report, width int) {
	count := map[string]int{}
	for _, f := range r.Findings {
		count[f.Status]++
	}
	section(b, fmt.Sprintf("Findings (%d fail, %d warn, %d info)", count[SevFail], count[SevWarn], count[SevInfo]))
	for _, f := range sortedFindings(r.Findings) {
		wrap(b, width, fmt.Sprintf("  %-4s  ", strings.ToUpper(f.Status)), 8, f.ID+": "+f.Message)
		if f.Evidence != "" && f.Status != SevInfo {
			wrap(b, width, "        evidence: ", 18, f.Evidence)
		}
		if f.Hint != "" {
			wrap(b, width, "        hint: ", 14, f.Hint)
		}
	}
}

func renderDurations(b *strings.Builder, r *Report, width int) {
	if len(r.Durations) == 0 && r.Stall == nil && r.DeadlineExceeded == "" {
		return
	}
	section(b, "Durations")
	var parts []string
	for _, d := range r.Durations {
		parts = append(parts, d.Phase+" "+MSDuration(d.MS))
	}
	if len(parts) > 0 {
		wrap(b, width, "  ", 2, strings.Join(parts, ", "))
	}
	switch {
	case r.Stall != nil:
		msg := fmt.Sprintf("stalled in %s after %s", r.Stall.Phase, MSDuration(r.Stall.AfterMS))
		if r.Stall.Cause != "" {
			msg += ": " + r.Stall.Cause
		}
		wrap(b, width, "  ", 2, msg)
	case r.DeadlineExceeded != "":
		fmt.Fprintf(b, "  stalled in %s\n", r.DeadlineExceeded)
	}
}

// renderBAR1 is NVML's BAR1 budget per GPU: used before the copies, used after them
// (every context closed), and the total.
func renderBAR1(b *strings.Builder, r *Report, width int) {
	if len(r.BAR1) == 0 {
		return
	}
	section(b, "BAR1 (NVML: used before the copies / after them, of the total)")
	rows := [][]string{{"  GPU", "BEFORE", "AFTER", "TOTAL", "CHANGE"}}
	for _, u := range r.BAR1 {
		after, change := "-", "-"
		if u.UsedAfter != nil {
			after = HumanBytesAny(*u.UsedAfter)
			change = signedBytes(*u.UsedAfter - u.UsedBefore)
		}
		rows = append(rows, []string{fmt.Sprintf("  GPU%d", u.GPU), HumanBytesAny(u.UsedBefore), after, HumanBytesAny(u.Total), change})
	}
	writeTable(b, rows)
}

// HumanBytesAny renders any byte count, 0 included, in the largest binary unit with
// one decimal: "0B", "5.0MiB", "31.8GiB".
func HumanBytesAny(n int64) string {
	v := float64(n)
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1<<30:
		return fmt.Sprintf("%.1fGiB", v/(1<<30))
	case a >= 1<<20:
		return fmt.Sprintf("%.1fMiB", v/(1<<20))
	case a >= 1<<10:
		return fmt.Sprintf("%.1fKiB", v/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func signedBytes(n int64) string {
	if n > 0 {
		return "+" + HumanBytesAny(n)
	}
	return HumanBytesAny(n)
}
