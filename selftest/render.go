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
// findings (fail and warn first, info last) and the phase durations. The output is a
// function of the report alone. Summary stays the short form for the boot console.
func Render(r *Report) string {
	var b strings.Builder
	renderHeader(&b, r)
	renderGPUs(&b, r)
	renderTopology(&b, r)
	renderCopies(&b, r)
	renderLatencies(&b, r)
	renderHighMem(&b, r)
	renderNCCL(&b, r)
	renderKernelEvents(&b, r)
	renderFindings(&b, r)
	renderDurations(&b, r)
	return trimLines(b.String())
}

func renderHeader(b *strings.Builder, r *Report) {
	fmt.Fprintf(b, "peerboot self-test: %s", strings.ToUpper(orDefault(r.Verdict, "unknown")))
	if r.Recipe.Name != "" {
		fmt.Fprintf(b, "  recipe %s %s", r.Recipe.Name, shortDigest(r.Recipe.Digest))
	}
	b.WriteString("\n")
	line := func(label, format string, args ...any) {
		fmt.Fprintf(b, "  %-8s %s\n", label, fmt.Sprintf(format, args...))
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

func renderGPUs(b *strings.Builder, r *Report) {
	section(b, "GPUs")
	if len(r.GPUs) == 0 {
		b.WriteString("  none in sysfs\n")
		return
	}
	tw := newTab(b)
	fmt.Fprintf(tw, "  #\tBDF\tNAME\tNUMA\tLINK NOW\tLINK MAX\tBAR1/VRAM\tUPSTREAM\n")
	for i, g := range r.GPUs {
		name := r.GPUName(i)
		if name == "" {
			name = strings.TrimPrefix(g.Vendor, "0x") + ":" + strings.TrimPrefix(g.Device, "0x")
		}
		vram, _ := r.GPUVRAM(i)
		var up []string
		for _, br := range g.Upstream {
			s := br.BDF + " " + linkText(br.Link.CurrentSpeed, br.Link.CurrentWidth)
			if br.ACS.Redirects() {
				s += " ACS:" + br.ACS.Bits()
			}
			up = append(up, s)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s/%s\t%s\n", i, g.BDF, name, g.NUMANode,
			linkText(g.Link.CurrentSpeed, g.Link.CurrentWidth), linkText(g.Link.MaxSpeed, g.Link.MaxWidth),
			HumanBytes(r.GPUBAR1(i)), HumanBytes(vram), orDefault(strings.Join(up, " > "), "-"))
	}
	tw.Flush()
}

func renderTopology(b *strings.Builder, r *Report) {
	n := len(r.GPUs)
	if n < 2 || len(r.Pairs) == 0 {
		return
	}
	section(b, "Topology (sysfs class; NVML P2P read/write where not OK; \"cuda-\": cuDeviceCanAccessPeer false)")
	tw := newTab(b)
	header(tw, n)
	for a := 0; a < n; a++ {
		fmt.Fprintf(tw, "  GPU%d", a)
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
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintf(tw, "\n")
	}
	tw.Flush()
}

func header(tw *tabwriter.Writer, n int) {
	fmt.Fprintf(tw, "  ")
	for c := 0; c < n; c++ {
		fmt.Fprintf(tw, "\tGPU%d", c)
	}
	fmt.Fprintf(tw, "\n")
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

func renderCopies(b *strings.Builder, r *Report) {
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
			s = fmt.Sprintf("%.1f %s", c.GBps, topo)
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
	printed := false
	for _, o := range order {
		grid := make([][]string, n)
		for i := range grid {
			grid[i] = make([]string, n)
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
			switch {
			case a == d && (c.Direction == DirLocal || c.Direction == o.dir):
				grid[a][a] = cell(c, "loc")
			case a != d && c.Direction == o.dir:
				any = true
				grid[a][d] = cell(c, orDefault(r.PairTopology(a, d), "?"))
				if o.dir == DirBidir && grid[d][a] == "" {
					grid[d][a] = grid[a][d]
				}
			}
		}
		if !any {
			continue
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
	}
	if printed {
		b.WriteString("  legend: PIX/PXB/PHB/NODE/SYS = pair topology; loc = local copy on the diagonal; \"!\" = the copy has a fail finding; error = the copy failed; - = not measured\n")
	} else {
		section(b, "Copies")
		for k := range r.Copies {
			c := &r.Copies[k]
			fmt.Fprintf(b, "  %s  %s\n", CopySubject(r, c), cell(c, "loc"))
		}
	}
}

func renderHighMem(b *strings.Builder, r *Report) {
	if len(r.HighMem) == 0 {
		return
	}
	section(b, "Above-BAR1 probe")
	tw := newTab(b)
	fmt.Fprintf(tw, "  GPU\tPEER\tBAR1/VRAM\tBALLAST\tBUFFER VA\tRESULT\n")
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
		fmt.Fprintf(tw, "  GPU%d\t%s\t%s/%s\t%dMiB\t%s\t%s\n", r.GPUIndex(h.GPU), peer, HumanBytes(h.BAR1Bytes), HumanBytes(h.VRAMBytes), h.BallastMiB, orDefault(h.BufferVA, "?"), res)
	}
	tw.Flush()
	if g := r.HighMem[0].Guarantee; g != "" {
		fmt.Fprintf(b, "  placement: %s\n", g)
	}
}

func renderNCCL(b *strings.Builder, r *Report) {
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
		fmt.Fprintf(b, "  error: %s\n", n.Error)
	}
	if len(n.Sizes) > 0 {
		tw := newTab(b)
		fmt.Fprintf(tw, "  BYTES\tTIME\tALGBW GB/s\tBUSBW GB/s\tWRONG\n")
		for _, s := range n.Sizes {
			fmt.Fprintf(tw, "  %s\t%.1fus\t%.2f\t%.2f\t%d\n", HumanBytes(s.Bytes), s.TimeUS, s.AlgBW, s.BusBW, s.Wrong)
		}
		tw.Flush()
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
		fmt.Fprintf(b, "  transports: %d connection(s), %d not P2P: %s\n", len(n.Transports), notP2P, strings.Join(parts, ", "))
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
		fmt.Fprintf(b, "  env: %s\n", strings.Join(keys, " "))
	}
	if n.LogFile != "" {
		fmt.Fprintf(b, "  log: %s\n", n.LogFile)
	}
}

func renderKernelEvents(b *strings.Builder, r *Report) {
	if len(r.KernelEvents) == 0 {
		return
	}
	section(b, fmt.Sprintf("Kernel log (%d event(s))", len(r.KernelEvents)))
	for _, ev := range r.KernelEvents {
		fmt.Fprintf(b, "  %-11s %s\n", ev.Kind, ev.Line)
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

func renderFindings(b *strings.Builder, r *Report) {
	count := map[string]int{}
	for _, f := range r.Findings {
		count[f.Status]++
	}
	section(b, fmt.Sprintf("Findings (%d fail, %d warn, %d info)", count[SevFail], count[SevWarn], count[SevInfo]))
	for _, f := range sortedFindings(r.Findings) {
		fmt.Fprintf(b, "  %-4s  %s: %s\n", strings.ToUpper(f.Status), f.ID, f.Message)
		if f.Evidence != "" && f.Status != SevInfo {
			fmt.Fprintf(b, "        evidence: %s\n", f.Evidence)
		}
		if f.Hint != "" {
			fmt.Fprintf(b, "        hint: %s\n", f.Hint)
		}
	}
}

func renderDurations(b *strings.Builder, r *Report) {
	if len(r.Durations) == 0 && r.Stall == nil && r.DeadlineExceeded == "" {
		return
	}
	section(b, "Durations")
	var parts []string
	for _, d := range r.Durations {
		parts = append(parts, d.Phase+" "+MSDuration(d.MS))
	}
	if len(parts) > 0 {
		fmt.Fprintf(b, "  %s\n", strings.Join(parts, ", "))
	}
	switch {
	case r.Stall != nil:
		fmt.Fprintf(b, "  stalled in %s after %s", r.Stall.Phase, MSDuration(r.Stall.AfterMS))
		if r.Stall.Cause != "" {
			fmt.Fprintf(b, ": %s", r.Stall.Cause)
		}
		b.WriteString("\n")
	case r.DeadlineExceeded != "":
		fmt.Fprintf(b, "  stalled in %s\n", r.DeadlineExceeded)
	}
}
