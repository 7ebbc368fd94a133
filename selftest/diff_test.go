package selftest

import (
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest/examples"
)

// `peerboot report diff A B` exits 0 on Clean and 1 otherwise (cmd/peerboot/report.go),
// and serve's node page flags a changed verdict and an added fail (netboot/view.go).
// Clean is: the verdicts are equal and B has no fail finding A lacked. A warn or info
// added, or a fail removed, is no regression.
func TestDiffVerdictAndClean(t *testing.T) {
	fail := Finding{ID: "copy.corrupt", Status: SevFail, Subject: "GPU0->GPU1 ce write", Message: "3 words differ"}
	warn := Finding{ID: "p2p.slow", Status: SevWarn, Subject: "GPU0->GPU1 ce write", Message: "slow"}
	info := Finding{ID: "platform", Status: SevInfo, Message: "no recipe"}
	for _, tc := range []struct {
		name               string
		verdictA, verdictB string
		a, b               []Finding
		failAdded, clean   bool
		last               string // RenderDiff's closing line
		verdictLine        string // RenderDiff's first line
	}{
		{"same pass", Pass, Pass, []Finding{info}, []Finding{info}, false, true,
			"same verdict, no fail finding added", "verdict: pass (unchanged)"},
		{"pass to fail", Pass, Fail, nil, []Finding{fail}, true, false,
			"the verdict changed (pass -> fail)", "verdict: pass -> fail"},
		// A fixed box is a change too: diff(1) says "different" either way.
		{"fail to pass", Fail, Pass, []Finding{fail}, nil, false, false,
			"the verdict changed (fail -> pass)", "verdict: fail -> pass"},
		{"another fail on a failing box", Fail, Fail, []Finding{fail}, []Finding{fail, {ID: "xid", Status: SevFail, Message: "Xid 79"}}, true, false,
			"a fail finding was added", "verdict: fail (unchanged)"},
		{"a fail removed", Fail, Fail, []Finding{fail, {ID: "xid", Status: SevFail, Message: "Xid 79"}}, []Finding{fail}, false, true,
			"same verdict, no fail finding added", "verdict: fail (unchanged)"},
		{"a warn and an info added", Pass, Pass, nil, []Finding{warn, info}, false, true,
			"same verdict, no fail finding added", "verdict: pass (unchanged)"},
		// The same fail in both is no fail added.
		{"the same fail", Fail, Fail, []Finding{fail}, []Finding{fail}, false, true,
			"same verdict, no fail finding added", "verdict: fail (unchanged)"},
		{"no verdict in A", "", Fail, nil, nil, false, false,
			"the verdict changed (unknown -> fail)", "verdict: unknown -> fail"},
		{"no verdict in B", Pass, "", nil, nil, false, false,
			"the verdict changed (pass -> unknown)", "verdict: pass -> unknown"},
		{"no verdict in either", "", "", nil, nil, false, true,
			"same verdict, no fail finding added", "verdict: unknown (unchanged)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := New(), New()
			a.Verdict, a.Findings = tc.verdictA, tc.a
			b.Verdict, b.Findings = tc.verdictB, tc.b
			d := Diff(a, b)
			if d.Verdict != (Change{Field: "verdict", A: tc.verdictA, B: tc.verdictB}) {
				t.Errorf("Verdict = %+v", d.Verdict)
			}
			if d.FailAdded != tc.failAdded || d.Clean != tc.clean {
				t.Errorf("FailAdded %v, Clean %v; want %v, %v", d.FailAdded, d.Clean, tc.failAdded, tc.clean)
			}
			out := RenderDiff(d, 5)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if lines[0] != tc.verdictLine || lines[len(lines)-1] != tc.last {
				t.Errorf("RenderDiff:\n%s\nwant first line %q, last %q", out, tc.verdictLine, tc.last)
			}
		})
	}
}

// Findings are matched by status, ID and subject (the message when there is no
// subject), as multisets: a finding that appears twice in B and once in A is added
// once. A changed message under the same subject is the same finding (figures in
// messages move from boot to boot); a changed status is a removal and an addition.
func TestDiffFindingsMatching(t *testing.T) {
	f := func(status, id, subject, msg string) Finding {
		return Finding{Status: status, ID: id, Subject: subject, Message: msg}
	}
	slow0 := f(SevWarn, "copy.slow", "GPU0->GPU1 ce write", "12.0 GB/s")
	slow0b := f(SevWarn, "copy.slow", "GPU0->GPU1 ce write", "11.5 GB/s") // same subject, other figure
	slow1 := f(SevWarn, "copy.slow", "GPU1->GPU0 ce write", "12.0 GB/s")
	xidA := f(SevFail, "xid", "", "Xid 79 on 0000:01:00.0")
	xidB := f(SevFail, "xid", "", "Xid 79 on 0000:02:00.0") // no subject: the message tells them apart
	for _, tc := range []struct {
		name           string
		a, b           []Finding
		added, removed []Finding
	}{
		{"none", nil, nil, []Finding{}, []Finding{}},
		{"same subject, new message", []Finding{slow0}, []Finding{slow0b}, []Finding{}, []Finding{}},
		{"other subject", []Finding{slow0}, []Finding{slow1}, []Finding{slow1}, []Finding{slow0}},
		{"no subject, other message", []Finding{xidA}, []Finding{xidB}, []Finding{xidB}, []Finding{xidA}},
		{"status changed", []Finding{slow0}, []Finding{f(SevFail, "copy.slow", slow0.Subject, slow0.Message)},
			[]Finding{f(SevFail, "copy.slow", slow0.Subject, slow0.Message)}, []Finding{slow0}},
		{"id changed", []Finding{slow0}, []Finding{f(SevWarn, "copy.slower", slow0.Subject, slow0.Message)},
			[]Finding{f(SevWarn, "copy.slower", slow0.Subject, slow0.Message)}, []Finding{slow0}},
		{"one more of the same", []Finding{xidA, xidA}, []Finding{xidA, xidA, xidA, slow1}, []Finding{xidA, slow1}, []Finding{}},
		{"one fewer of the same", []Finding{xidA, slow0, xidA}, []Finding{slow0, xidA}, []Finding{}, []Finding{xidA}},
		// Each side keeps its own order.
		{"order kept", []Finding{slow1, xidA, slow0}, []Finding{xidB, slow0b}, []Finding{xidB}, []Finding{slow1, xidA}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			added, removed := diffFindings(tc.a, tc.b)
			if !reflect.DeepEqual(added, tc.added) || !reflect.DeepEqual(removed, tc.removed) {
				t.Errorf("added %+v\nremoved %+v\nwant added %+v\nremoved %+v", added, removed, tc.added, tc.removed)
			}
		})
	}
}

// Versions: every layer a report names, listed when it differs, A's keys first in
// their fixed order, then keys only B has; modules by their running version, and
// only the recipe's own (not dependencies loaded ahead of one).
func TestDiffVersions(t *testing.T) {
	a, b := gpuSample(), gpuSample()
	a.GPUs[0].NVML = &NVMLGPU{Name: "NVIDIA GeForce RTX 4090"}
	a.Modules = append(a.Modules, Module{Name: "nvidia-drm", Version: "550.54"})
	b.Recipe.Digest = "sha256:fedcba9876543210fedcba9876543210"
	b.Kernel.Release = "6.1.1-peerboot"
	b.NVML.DriverVersion = "550.163.01"
	b.CUDA.DriverVersion = 12040
	b.NVML.CUDAVersion = 12040
	b.NCCL = &NCCL{Version: 22803}
	b.Tool = "p2pcheck 1.2"
	for i := range b.GPUs {
		b.GPUs[i].NVML = &NVMLGPU{Name: "NVIDIA GeForce RTX 4090"}
	}
	b.Modules = append(b.Modules,
		Module{Name: "nvidia-peermem", Version: "550.163.01"},
		Module{Name: "ib_core", Version: "1.0", RequiredBy: "nvidia-peermem"}, // a dependency: not a layer of its own
		Module{Name: "nvidia-modeset"})                                        // no version read: nothing to compare
	want := []Change{
		{"recipe digest", "sha256:0123456789ab", "sha256:fedcba987654"},
		{"kernel", "6.1.0-peerboot", "6.1.1-peerboot"},
		{"driver (NVML)", "", "550.163.01"},
		{"CUDA driver API", "12.2", "12.4"},
		{"NVML CUDA version", "", "12.4"},
		{"NCCL", "", "2.28.3"},
		{"tool", "", "p2pcheck 1.2"},
		{"gpus", "1x NVIDIA GeForce RTX 4090, 1x 2204", "2x NVIDIA GeForce RTX 4090"},
		{"module nvidia-drm", "550.54", ""},
		{"module nvidia-peermem", "", "550.163.01"},
	}
	if got := Diff(a, b).Versions; !reflect.DeepEqual(got, want) {
		t.Errorf("Versions:\n got %+v\nwant %+v", got, want)
	}
	if got := Diff(a, a).Versions; len(got) != 0 {
		t.Errorf("a report against itself: %+v", got)
	}
	// No GPU at all reads "none", so a box that lost every GPU shows it.
	c := gpuSample()
	c.GPUs = nil
	c.Copies, c.Pairs, c.BAR1 = nil, nil, nil
	if got, want := Diff(gpuSample(), c).Versions, []Change{{"gpus", "2x 2204", "none"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("GPUs gone: %+v, want %+v", got, want)
	}
}

func TestGPUSummary(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{nil, "none"},
		{[]string{"A100"}, "1x A100"},
		{[]string{"A100", "A100", "A100", "A100"}, "4x A100"},
		// Counted per name, in the order each first appears.
		{[]string{"L4", "A100", "L4"}, "2x L4, 1x A100"},
	} {
		if got := gpuSummary(tc.names); got != tc.want {
			t.Errorf("gpuSummary(%q) = %q, want %q", tc.names, got, tc.want)
		}
	}
}

// Copies are matched by GPU (the index into the report's GPUs, through the CUDA
// ordinal's bus id), method and direction, so a box whose CUDA numbering moved (a GPU
// fell off the bus, another came back) compares the same physical pair.
func TestDiffCopiesMatchGPUsByBusID(t *testing.T) {
	three := func() *Report {
		r := New()
		for _, bdf := range []string{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"} {
			r.GPUs = append(r.GPUs, GPU{BDF: bdf, Device: "0x2204"})
		}
		return r
	}
	a := three()
	a.CUDA.Devices = []CUDADevice{{Ordinal: 0, BDF: "0000:01:00.0"}, {Ordinal: 1, BDF: "0000:02:00.0"}, {Ordinal: 2, BDF: "0000:03:00.0"}}
	a.Copies = []Copy{{Src: 1, Dst: 2, Method: MethodCE, Direction: DirWrite, GBps: 20}}
	a.Latencies = []Latency{{Src: 1, Dst: 2, US: 0.5}}
	b := three()
	// GPU0 is gone from CUDA's list: ordinal 0 is now GPU1, ordinal 1 GPU2.
	b.CUDA.Devices = []CUDADevice{{Ordinal: 0, BDF: "0000:02:00.0"}, {Ordinal: 1, BDF: "0000:03:00.0"}}
	b.Copies = []Copy{{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: 25}}
	b.Latencies = []Latency{{Src: 0, Dst: 1, US: 1}}
	d := Diff(a, b)
	if want := []CopyChange{{Src: 1, Dst: 2, Method: MethodCE, Direction: DirWrite, A: 20, B: 25, Percent: 25}}; !reflect.DeepEqual(d.Copies, want) {
		t.Errorf("Copies:\n got %+v\nwant %+v", d.Copies, want)
	}
	if want := []LatencyChange{{Src: 1, Dst: 2, A: 0.5, B: 1, Percent: 100}}; !reflect.DeepEqual(d.Latencies, want) {
		t.Errorf("Latencies:\n got %+v\nwant %+v", d.Latencies, want)
	}
}

// Every copy of either report is listed once, ce before sm, then local, write, read,
// bidir (an unknown direction last, in report order), then by source and destination.
// A copy that failed on a side, or that one side lacks, has no percentage.
func TestDiffCopies(t *testing.T) {
	c := func(src, dst int, method, dir string, gbps float64, errText string) Copy {
		return Copy{Src: src, Dst: dst, Method: method, Direction: dir, GBps: gbps, Error: errText}
	}
	a, b := New(), New()
	a.Copies = []Copy{
		c(0, 2, MethodCE, DirWrite, 5, ""),
		c(1, 0, MethodSM, DirWrite, 20, ""),
		c(0, 1, MethodCE, DirRead, 10, ""),
		c(0, 1, MethodCE, "sideways", 1, ""),
		c(1, 0, MethodCE, DirWrite, 24, ""),
		c(0, 1, MethodCE, DirWrite, 24.1, ""),
		c(0, 0, MethodCE, DirLocal, 400, ""),
		c(0, 1, MethodCE, "backwards", 1, ""),
		c(1, 1, MethodCE, DirLocal, 0, "CUDA_ERROR_LAUNCH_FAILED"),
	}
	b.Copies = []Copy{
		c(1, 0, MethodCE, DirBidir, 40, ""),
		c(0, 1, MethodCE, DirWrite, 20, ""),
		c(1, 0, MethodCE, DirWrite, 24.5, ""),
		c(0, 0, MethodCE, DirLocal, 0, ""), // measured as 0: no figure to compare
		c(1, 0, MethodSM, DirWrite, 0, "CUDA_ERROR_ILLEGAL_ADDRESS"),
		c(0, 1, MethodCE, "sideways", 1, ""),
		c(1, 1, MethodCE, DirLocal, 380, ""),
		c(0, 1, MethodCE, "backwards", 2, ""),
	}
	want := []CopyChange{
		{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, A: 400, B: 0},
		{Src: 1, Dst: 1, Method: MethodCE, Direction: DirLocal, A: 0, B: 380, ErrorA: "CUDA_ERROR_LAUNCH_FAILED"},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, A: 24.1, B: 20, Percent: -17},
		{Src: 0, Dst: 2, Method: MethodCE, Direction: DirWrite, A: 5, Only: "a"},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, A: 24, B: 24.5, Percent: 2.1},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirRead, A: 10, Only: "a"},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirBidir, B: 40, Only: "b"},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: "sideways", A: 1, B: 1, Percent: 0},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: "backwards", A: 1, B: 2, Percent: 100},
		{Src: 1, Dst: 0, Method: MethodSM, Direction: DirWrite, A: 20, B: 0, ErrorB: "CUDA_ERROR_ILLEGAL_ADDRESS"},
	}
	if got := Diff(a, b).Copies; !reflect.DeepEqual(got, want) {
		t.Errorf("Copies:\n got %+v\nwant %+v", got, want)
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct{ a, b, want float64 }{
		{24.1, 20, -17},
		{20, 21, 5},
		{3, 4, 33.3}, // one decimal
		{3, 2, -33.3},
		{400, 1, -99.8},
		{10, 10, 0},
		{0, 10, 0}, // a side without a figure: no percentage, not +Inf
		{10, 0, 0},
		{-1, 10, 0},
		{10, -1, 0},
	} {
		if got := percent(tc.a, tc.b); got != tc.want {
			t.Errorf("percent(%g, %g) = %g, want %g", tc.a, tc.b, got, tc.want)
		}
	}
}

// NCCL sizes are compared by byte count, smallest first, with the elements each got
// wrong; a report without the NCCL phase has every size of the other "only".
func TestDiffNCCL(t *testing.T) {
	a, b := New(), New()
	a.NCCL = &NCCL{Sizes: []NCCLSize{{Bytes: 64 << 20, BusBW: 20}, {Bytes: 1 << 20, BusBW: 10}}}
	b.NCCL = &NCCL{Sizes: []NCCLSize{{Bytes: 1 << 30, BusBW: 22}, {Bytes: 64 << 20, BusBW: 21, Wrong: 5}}}
	want := []NCCLChange{
		{Bytes: 1 << 20, A: 10, Only: "a"},
		{Bytes: 64 << 20, A: 20, B: 21, Percent: 5, WrongB: 5},
		{Bytes: 1 << 30, B: 22, Only: "b"},
	}
	if got := Diff(a, b).NCCL; !reflect.DeepEqual(got, want) {
		t.Errorf("NCCL:\n got %+v\nwant %+v", got, want)
	}
	want = []NCCLChange{{Bytes: 1 << 20, A: 10, Only: "a"}, {Bytes: 64 << 20, A: 20, Only: "a"}}
	if got := Diff(a, New()).NCCL; !reflect.DeepEqual(got, want) {
		t.Errorf("NCCL against a report without it:\n got %+v\nwant %+v", got, want)
	}
	want = []NCCLChange{{Bytes: 1 << 20, B: 10, Only: "b"}, {Bytes: 64 << 20, B: 20, Only: "b"}}
	if got := Diff(New(), a).NCCL; !reflect.DeepEqual(got, want) {
		t.Errorf("NCCL from a report without it:\n got %+v\nwant %+v", got, want)
	}
}

// The text `peerboot report diff` prints: every section of a diff that has them all,
// copies and latencies under the --min-change threshold counted, not listed.
func TestRenderDiff(t *testing.T) {
	a, b := gpuSample(), gpuSample()
	b.Kernel.Release = "6.1.1-peerboot"
	b.Tool = "p2pcheck 1.2"
	b.Findings = []Finding{
		{ID: "p2p.slow", Status: SevWarn, Message: "ce write below 80% of the link"},
		{ID: "driver.nvidia", Status: SevInfo, Subject: "nvidia", Message: "another message"}, // matched: not listed
		{ID: "copy.corrupt", Status: SevFail, Subject: "GPU0->GPU1 sm write", Message: "3 words differ"},
	}
	b.Verdict = Fail
	a.Copies = []Copy{
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: 24.1},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 24.0},
		{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, GBps: 400},
		{Src: 0, Dst: 1, Method: MethodSM, Direction: DirWrite, GBps: 20},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirRead, GBps: 10},
	}
	b.Copies = []Copy{
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: 20},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 24.5}, // +2.1 %: counted
		{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, GBps: 400},  // counted
		{Src: 0, Dst: 1, Method: MethodSM, Direction: DirWrite, Error: "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirBidir, GBps: 40},
	}
	a.Latencies = []Latency{{Src: 0, Dst: 0, US: 2}, {Src: 0, Dst: 1, US: 0.5}, {Src: 1, Dst: 0, US: 0.5}}
	b.Latencies = []Latency{{Src: 0, Dst: 0, US: 2}, {Src: 0, Dst: 1, US: 14}, {Src: 1, Dst: 0, US: 0.5, Mismatch: &Mismatch{Words: 1}}, {Src: 1, Dst: 1, US: 2.1}}
	a.NCCL = &NCCL{Sizes: []NCCLSize{{Bytes: 1 << 20, BusBW: 10}, {Bytes: 64 << 20, BusBW: 20}}}
	b.NCCL = &NCCL{Sizes: []NCCLSize{{Bytes: 64 << 20, BusBW: 21, Wrong: 5}, {Bytes: 1 << 30, BusBW: 22}}}
	want := `verdict: pass -> fail

versions
  kernel  6.1.0-peerboot  -> 6.1.1-peerboot
  tool    -               -> p2pcheck 1.2

findings added (2)
  FAIL  copy.corrupt [GPU0->GPU1 sm write]: 3 words differ
  WARN  p2p.slow: ce write below 80% of the link

findings removed (1)
  INFO  platform [recipe]: no recipe: platform unknown

copies, GB/s (6 compared; 2 changed by less than 5%)
  GPU0->GPU1 ce write  24.10  -> 20.00  -17.0%
  GPU0->GPU1 ce read   10.00  -> -      only in A
  GPU1->GPU0 ce bidir  -      -> 40.00  only in B
  GPU0->GPU1 sm write  20.00  -> error

latency, µs (4 compared; 1 changed by less than 5%)
  GPU1->GPU1  -     -> 2.10     only in B
  GPU0->GPU1  0.50  -> 14.00    +2700.0%
  GPU1->GPU0  0.50  -> corrupt

NCCL all-reduce busbw, GB/s
  1MiB   10.00  -> -      only in A
  64MiB  20.00  -> 21.00  +5.0%  wrong 0 -> 5
  1GiB   -      -> 22.00  only in B

the verdict changed (pass -> fail)
`
	if got := RenderDiff(Diff(a, b), 5); got != want {
		t.Errorf("RenderDiff:\n%s\nwant:\n%s", got, want)
	}
	// A report against itself: every copy and latency counted as unchanged, the NCCL
	// sizes at +0.0 %, no versions or findings.
	if got, want := RenderDiff(Diff(a, a), 5), "verdict: pass (unchanged)\n\ncopies, GB/s (5 compared; 5 changed by less than 5%)\n\n"+
		"latency, µs (3 compared; 3 changed by less than 5%)\n\nNCCL all-reduce busbw, GB/s\n  1MiB   10.00  -> 10.00  +0.0%\n  64MiB  20.00  -> 20.00  +0.0%\n\n"+
		"same verdict, no fail finding added\n"; got != want {
		t.Errorf("RenderDiff(a, a):\n%q\nwant\n%q", got, want)
	}
	// Nothing measured on either side: no copy, latency or NCCL heading at all.
	if got, want := RenderDiff(Diff(New(), New()), 5), "verdict: fail (unchanged)\n\nsame verdict, no fail finding added\n"; got != want {
		t.Errorf("RenderDiff of empty reports: %q, want %q", got, want)
	}
}

// --min-change: a copy or latency whose figure moved by exactly the threshold is
// listed, either way; one just under it is counted. A copy whose error changed is
// listed whatever its figures.
func TestRenderDiffThreshold(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   float64
		errA   string
		errB   string
		min    float64
		listed bool
	}{
		{"up by the threshold", 20, 21, "", "", 5, true},
		{"down by the threshold", 20, 19, "", "", 5, true},
		{"up by less", 20, 20.9, "", "", 5, false},
		{"down by less", 20, 19.1, "", "", 5, false},
		{"threshold 0 lists all", 20, 20, "", "", 0, true},
		{"same error", 0, 0, "CUDA_ERROR_X", "CUDA_ERROR_X", 5, false},
		{"error changed", 0, 0, "CUDA_ERROR_X", "CUDA_ERROR_Y", 5, true},
		{"error gone", 0, 20, "CUDA_ERROR_X", "", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := New(), New()
			a.Copies = []Copy{{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: tc.a, Error: tc.errA}}
			b.Copies = []Copy{{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: tc.b, Error: tc.errB}}
			lat := func(us float64, errText string) []Latency {
				return []Latency{{Src: 0, Dst: 1, US: us, Error: errText}}
			}
			a.Latencies, b.Latencies = lat(tc.a, tc.errA), lat(tc.b, tc.errB)
			out := RenderDiff(Diff(a, b), tc.min)
			counted := "1"
			if tc.listed {
				counted = "0"
			}
			for _, want := range []string{
				"copies, GB/s (1 compared; " + counted + " changed by less than",
				"latency, µs (1 compared; " + counted + " changed by less than",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
			if got := strings.Contains(out, "GPU0->GPU1 ce write"); got != tc.listed {
				t.Errorf("copy listed %v, want %v:\n%s", got, tc.listed, out)
			}
			if got := strings.Contains(out, "  GPU0->GPU1  "); got != tc.listed {
				t.Errorf("latency listed %v, want %v:\n%s", got, tc.listed, out)
			}
		})
	}
}

// The cells of a copy or latency row: a side that lacks it "-", one that failed
// "error" (a latency's corrupt write "corrupt"), and no percentage for either.
func TestDiffCells(t *testing.T) {
	for _, tc := range []struct {
		v       float64
		errText string
		missing bool
		copy    string
		latency string
	}{
		{1.234, "", false, "1.23", "1.23"},
		{1.234, "", true, "-", "-"},
		{1.234, "CUDA_ERROR_X", true, "-", "-"},
		{1.234, "CUDA_ERROR_X", false, "error", "error"},
		{1.234, "corrupt", false, "error", "corrupt"},
	} {
		if got := copySide(tc.v, tc.errText, tc.missing); got != tc.copy {
			t.Errorf("copySide(%g, %q, %v) = %q, want %q", tc.v, tc.errText, tc.missing, got, tc.copy)
		}
		if got := latencySide(tc.v, tc.errText, tc.missing); got != tc.latency {
			t.Errorf("latencySide(%g, %q, %v) = %q, want %q", tc.v, tc.errText, tc.missing, got, tc.latency)
		}
	}
	for _, tc := range []struct {
		p       float64
		only    string
		errored bool
		want    string
	}{
		{-17, "", false, "-17.0%"},
		{2.1, "", false, "+2.1%"},
		{0, "", false, "+0.0%"},
		{0, "a", false, "only in A"},
		{0, "b", true, "only in B"},
		{5, "", true, ""},
	} {
		if got := pctText(tc.p, tc.only, tc.errored); got != tc.want {
			t.Errorf("pctText(%g, %q, %v) = %q, want %q", tc.p, tc.only, tc.errored, got, tc.want)
		}
	}
}

// FuzzDiff: any two reports Decode accepts compare without a panic, the verdict
// rule is the documented one, every copy of either side is listed once, and a
// report compared with itself is clean, with nothing added, removed or changed.
func FuzzDiff(f *testing.F) {
	pass, _ := examples.Report("pass")
	fail, _ := examples.Report("fail")
	good, _ := Encode(gpuSample())
	full, _ := Encode(fullSample())
	f.Add(pass, fail)
	f.Add(fail, pass)
	f.Add(good, full)
	f.Add(full, []byte(`{"schema":2,"verdict":"pass"}`))
	f.Fuzz(func(t *testing.T, ja, jb []byte) {
		a, err := Decode(ja)
		if err != nil {
			return
		}
		b, err := Decode(jb)
		if err != nil {
			return
		}
		d := Diff(a, b)
		if d.Clean != (a.Verdict == b.Verdict && !d.FailAdded) {
			t.Fatalf("Clean %v with verdicts %q, %q and FailAdded %v", d.Clean, a.Verdict, b.Verdict, d.FailAdded)
		}
		keys := map[copyKey]bool{}
		for _, r := range []*Report{a, b} {
			for _, c := range r.Copies {
				keys[copyKey{r.GPUIndex(c.Src), r.GPUIndex(c.Dst), c.Method, c.Direction}] = true
			}
		}
		if len(d.Copies) != len(keys) {
			t.Fatalf("%d copies compared, the reports hold %d", len(d.Copies), len(keys))
		}
		_ = RenderDiff(d, 5)
		self := Diff(a, a)
		if !self.Clean || len(self.Added)+len(self.Removed)+len(self.Versions) > 0 {
			t.Fatalf("a report against itself: %+v", self)
		}
		for _, c := range self.Copies {
			if c.Only != "" || c.A != c.B || c.Percent != 0 {
				t.Fatalf("a copy against itself: %+v", c)
			}
		}
	})
}
