package selftest

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// ReportDiff is what changed from report A (before) to report B (after): the verdict,
// the versions of each layer, findings added and removed (matched by status, ID and
// subject), the bandwidth of every copy and every NCCL size.
type ReportDiff struct {
	Verdict  Change       `json:"verdict"`
	Versions []Change     `json:"versions"`         // only what differs
	Added    []Finding    `json:"findings_added"`   // in B, not in A
	Removed  []Finding    `json:"findings_removed"` // in A, not in B
	Copies   []CopyChange `json:"copies"`           // every copy in either report
	NCCL     []NCCLChange `json:"nccl"`             // every all-reduce size in either report
	// Latencies compares every small-write latency (local and per ordered pair).
	Latencies []LatencyChange `json:"latencies"`
	// FailAdded: B has a fail finding A did not have. Clean: the verdicts are equal and
	// no fail was added, which is what `peerboot report diff` exits 0 on.
	FailAdded bool `json:"fail_added"`
	Clean     bool `json:"clean"`
}

// Change is one value in A and in B.
type Change struct {
	Field string `json:"field"`
	A     string `json:"a"`
	B     string `json:"b"`
}

// CopyChange compares one copy (GPU indexes, method, direction) across the reports.
type CopyChange struct {
	Src       int     `json:"src"`
	Dst       int     `json:"dst"`
	Method    string  `json:"method"`
	Direction string  `json:"direction"`
	A         float64 `json:"a_gbps"`
	B         float64 `json:"b_gbps"`
	Percent   float64 `json:"percent"`        // (B-A)/A in percent; 0 when either side has no figure
	Only      string  `json:"only,omitempty"` // "a" or "b" when measured in one report only
	ErrorA    string  `json:"error_a,omitempty"`
	ErrorB    string  `json:"error_b,omitempty"`
}

// NCCLChange compares the all-reduce bus bandwidth of one size across the reports.
type NCCLChange struct {
	Bytes   int64   `json:"bytes"`
	A       float64 `json:"a_busbw"`
	B       float64 `json:"b_busbw"`
	Percent float64 `json:"percent"`
	Only    string  `json:"only,omitempty"`
	WrongA  int64   `json:"wrong_a"`
	WrongB  int64   `json:"wrong_b"`
}

// Diff compares two reports.
func Diff(a, b *Report) *ReportDiff {
	d := &ReportDiff{
		Verdict:  Change{Field: "verdict", A: a.Verdict, B: b.Verdict},
		Versions: diffVersions(a, b),
		Copies:   diffCopies(a, b),
		NCCL:     diffNCCL(a, b),
	}
	d.Latencies = diffLatencies(a, b)
	d.Added, d.Removed = diffFindings(a.Findings, b.Findings)
	for _, f := range d.Added {
		if f.Status == SevFail {
			d.FailAdded = true
		}
	}
	d.Clean = a.Verdict == b.Verdict && !d.FailAdded
	return d
}

func findingKey(f *Finding) string {
	return f.Status + "\x00" + f.ID + "\x00" + orDefault(f.Subject, f.Message)
}

// diffFindings matches findings as multisets, keeping each side's order.
func diffFindings(a, b []Finding) (added, removed []Finding) {
	left := map[string]int{}
	for i := range a {
		left[findingKey(&a[i])]++
	}
	matched := map[string]int{}
	added = []Finding{}
	for i := range b {
		k := findingKey(&b[i])
		if left[k] > 0 {
			left[k]--
			matched[k]++
			continue
		}
		added = append(added, b[i])
	}
	removed = []Finding{}
	for i := range a {
		k := findingKey(&a[i])
		if matched[k] > 0 {
			matched[k]--
			continue
		}
		removed = append(removed, a[i])
	}
	return added, removed
}

// versionFields lists what each report says about the software and hardware it ran on.
func versionFields(r *Report) ([]string, map[string]string) {
	keys := []string{"recipe", "recipe digest", "kernel", "driver (NVML)", "CUDA driver API", "NVML CUDA version", "NCCL", "tool", "gpus"}
	v := map[string]string{
		"recipe":            r.Recipe.Name,
		"recipe digest":     shortDigest(r.Recipe.Digest),
		"kernel":            r.Kernel.Release,
		"driver (NVML)":     r.NVML.DriverVersion,
		"CUDA driver API":   cudaVersion(r.CUDA.DriverVersion),
		"NVML CUDA version": cudaVersion(r.NVML.CUDAVersion),
		"tool":              r.Tool,
	}
	if r.NCCL != nil {
		v["NCCL"] = ncclVersion(r.NCCL.Version)
	}
	var names []string
	for i := range r.GPUs {
		names = append(names, orDefault(r.GPUName(i), strings.TrimPrefix(r.GPUs[i].Device, "0x")))
	}
	v["gpus"] = gpuSummary(names)
	for _, m := range r.Modules {
		if m.Version != "" && m.RequiredBy == "" {
			k := "module " + m.Name
			keys = append(keys, k)
			v[k] = m.Version
		}
	}
	return keys, v
}

// gpuSummary renders GPU names as "4x NVIDIA GeForce RTX 4090".
func gpuSummary(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	count := map[string]int{}
	var order []string
	for _, n := range names {
		if count[n] == 0 {
			order = append(order, n)
		}
		count[n]++
	}
	parts := make([]string, len(order))
	for i, n := range order {
		parts[i] = fmt.Sprintf("%dx %s", count[n], n)
	}
	return strings.Join(parts, ", ")
}

func diffVersions(a, b *Report) []Change {
	ka, va := versionFields(a)
	kb, vb := versionFields(b)
	seen := map[string]bool{}
	out := []Change{}
	for _, k := range append(ka, kb...) {
		if seen[k] {
			continue
		}
		seen[k] = true
		if va[k] != vb[k] {
			out = append(out, Change{Field: k, A: va[k], B: vb[k]})
		}
	}
	return out
}

type copyKey struct {
	src, dst          int
	method, direction string
}

func copyMap(r *Report) (map[copyKey]*Copy, []copyKey) {
	m := map[copyKey]*Copy{}
	var order []copyKey
	for i := range r.Copies {
		c := &r.Copies[i]
		k := copyKey{r.GPUIndex(c.Src), r.GPUIndex(c.Dst), c.Method, c.Direction}
		if _, ok := m[k]; !ok {
			order = append(order, k)
		}
		m[k] = c
	}
	return m, order
}

func percent(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return math.Round((b-a)/a*1000) / 10
}

func diffCopies(a, b *Report) []CopyChange {
	ma, oa := copyMap(a)
	mb, ob := copyMap(b)
	keys := append([]copyKey{}, oa...)
	for _, k := range ob {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.SliceStable(keys, func(i, j int) bool {
		x, y := keys[i], keys[j]
		if x.method != y.method {
			return x.method < y.method
		}
		if x.direction != y.direction {
			return dirRank(x.direction) < dirRank(y.direction)
		}
		if x.src != y.src {
			return x.src < y.src
		}
		return x.dst < y.dst
	})
	out := []CopyChange{}
	for _, k := range keys {
		ch := CopyChange{Src: k.src, Dst: k.dst, Method: k.method, Direction: k.direction}
		ca, cb := ma[k], mb[k]
		if ca != nil {
			ch.A, ch.ErrorA = ca.GBps, ca.Error
		} else {
			ch.Only = "b"
		}
		if cb != nil {
			ch.B, ch.ErrorB = cb.GBps, cb.Error
		} else {
			ch.Only = "a"
		}
		if ca != nil && cb != nil && ca.Error == "" && cb.Error == "" {
			ch.Percent = percent(ch.A, ch.B)
		}
		out = append(out, ch)
	}
	return out
}

func dirRank(d string) int {
	switch d {
	case DirLocal:
		return 0
	case DirWrite:
		return 1
	case DirRead:
		return 2
	case DirBidir:
		return 3
	}
	return 4
}

func diffNCCL(a, b *Report) []NCCLChange {
	sizes := func(r *Report) map[int64]NCCLSize {
		m := map[int64]NCCLSize{}
		if r.NCCL != nil {
			for _, s := range r.NCCL.Sizes {
				m[s.Bytes] = s
			}
		}
		return m
	}
	ma, mb := sizes(a), sizes(b)
	var all []int64
	for k := range ma {
		all = append(all, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			all = append(all, k)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	out := []NCCLChange{}
	for _, n := range all {
		sa, inA := ma[n]
		sb, inB := mb[n]
		ch := NCCLChange{Bytes: n, A: sa.BusBW, B: sb.BusBW, WrongA: sa.Wrong, WrongB: sb.Wrong}
		switch {
		case !inA:
			ch.Only = "b"
		case !inB:
			ch.Only = "a"
		default:
			ch.Percent = percent(sa.BusBW, sb.BusBW)
		}
		out = append(out, ch)
	}
	return out
}

// RenderDiff is the text form of a diff. Copies whose bandwidth moved by less than
// minPercent (in either direction) are counted, not listed; copies measured on one
// side only and copies whose error changed are always listed.
func RenderDiff(d *ReportDiff, minPercent float64) string {
	var b strings.Builder
	if d.Verdict.A == d.Verdict.B {
		fmt.Fprintf(&b, "verdict: %s (unchanged)\n", orDefault(d.Verdict.A, "unknown"))
	} else {
		fmt.Fprintf(&b, "verdict: %s -> %s\n", orDefault(d.Verdict.A, "unknown"), orDefault(d.Verdict.B, "unknown"))
	}
	if len(d.Versions) > 0 {
		b.WriteString("\nversions\n")
		tw := newTab(&b)
		for _, c := range d.Versions {
			fmt.Fprintf(tw, "  %s\t%s\t-> %s\n", c.Field, orDefault(c.A, "-"), orDefault(c.B, "-"))
		}
		tw.Flush()
	}
	findingsList := func(title string, fs []Finding) {
		if len(fs) == 0 {
			return
		}
		fmt.Fprintf(&b, "\n%s (%d)\n", title, len(fs))
		for _, f := range sortedFindings(fs) {
			subj := ""
			if f.Subject != "" {
				subj = " [" + f.Subject + "]"
			}
			fmt.Fprintf(&b, "  %-4s  %s%s: %s\n", strings.ToUpper(f.Status), f.ID, subj, f.Message)
		}
	}
	findingsList("findings added", d.Added)
	findingsList("findings removed", d.Removed)

	var rows []CopyChange
	within := 0
	for _, c := range d.Copies {
		if c.Only != "" || c.ErrorA != c.ErrorB || math.Abs(c.Percent) >= minPercent {
			rows = append(rows, c)
		} else {
			within++
		}
	}
	if len(d.Copies) > 0 {
		fmt.Fprintf(&b, "\ncopies, GB/s (%d compared; %d changed by less than %g%%)\n", len(d.Copies), within, minPercent)
		tw := newTab(&b)
		for _, c := range rows {
			fmt.Fprintf(tw, "  GPU%d->GPU%d %s %s\t%s\t-> %s\t%s\n", c.Src, c.Dst, c.Method, c.Direction,
				copySide(c.A, c.ErrorA, c.Only == "b"), copySide(c.B, c.ErrorB, c.Only == "a"), pctText(c.Percent, c.Only, c.ErrorA != "" || c.ErrorB != ""))
		}
		tw.Flush()
	}
	renderLatencyDiff(&b, d.Latencies, minPercent)
	if len(d.NCCL) > 0 {
		b.WriteString("\nNCCL all-reduce busbw, GB/s\n")
		tw := newTab(&b)
		for _, c := range d.NCCL {
			wrong := ""
			if c.WrongA != c.WrongB {
				wrong = fmt.Sprintf("\twrong %d -> %d", c.WrongA, c.WrongB)
			}
			fmt.Fprintf(tw, "  %s\t%s\t-> %s\t%s%s\n", HumanBytes(c.Bytes), copySide(c.A, "", c.Only == "b"), copySide(c.B, "", c.Only == "a"), pctText(c.Percent, c.Only, false), wrong)
		}
		tw.Flush()
	}
	b.WriteString("\n")
	switch {
	case d.Clean:
		b.WriteString("same verdict, no fail finding added\n")
	case d.Verdict.A != d.Verdict.B:
		fmt.Fprintf(&b, "the verdict changed (%s -> %s)\n", orDefault(d.Verdict.A, "unknown"), orDefault(d.Verdict.B, "unknown"))
	default:
		b.WriteString("a fail finding was added\n")
	}
	return trimLines(b.String())
}

// trimLines drops the spaces tabwriter leaves after an empty last cell.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func copySide(v float64, errText string, missing bool) string {
	switch {
	case missing:
		return "-"
	case errText != "":
		return "error"
	}
	return fmt.Sprintf("%.2f", v)
}

func pctText(p float64, only string, errored bool) string {
	switch {
	case only == "a":
		return "only in A"
	case only == "b":
		return "only in B"
	case errored:
		return ""
	}
	return fmt.Sprintf("%+.1f%%", p)
}
