package selftest

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peerboot/peerboot/selftest/examples"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/NAME.golden (-update rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./selftest -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// example is one of the reports the binary ships (peerboot report show example:NAME).
func example(t *testing.T, name string) *Report {
	t.Helper()
	b, err := examples.Report(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The shipped examples are selftest/verdict's healthy-4 and faulty-4 fixtures,
// judged; what an operator reads for them on an 80-column console is verdict's
// reviewed goldens of those fixtures, byte for byte. Rendered from this package, so
// that the console view's own code is held by its own package's tests.
func TestRenderExamplesAsVerdictGoldens(t *testing.T) {
	for _, c := range []struct{ example, golden string }{
		{"pass", "render-healthy-4"},
		{"fail", "render-faulty-4"},
	} {
		t.Run(c.example, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join("verdict", "testdata", c.golden+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			if got := Render(example(t, c.example)); got != string(want) {
				t.Errorf("Render(example %s) differs from verdict/testdata/%s.golden:\n--- got\n%s--- want\n%s", c.example, c.golden, got, want)
			}
		})
	}
}

// The examples at other widths and in the boot console's short form: a wide
// console keeps the pair class in each cell and the upstream path in the GPU
// table; the narrowest layout splits the matrices into column blocks; no line is
// wider than asked (but for the narrowest, which lets words run long).
func TestRenderExamplesWidths(t *testing.T) {
	for _, name := range []string{"pass", "fail"} {
		r := example(t, name)
		for _, width := range []int{160, 100, 40} {
			t.Run(name+"-"+strconv.Itoa(width), func(t *testing.T) {
				got := RenderWidth(r, width)
				if width > minWidth {
					for i, line := range strings.Split(got, "\n") {
						if w := utf8.RuneCountInString(line); w > width {
							t.Errorf("line %d is %d columns, more than %d: %q", i+1, w, width, line)
						}
					}
				}
				golden(t, "render-"+name+"-"+strconv.Itoa(width), got)
			})
		}
		t.Run(name+"-below-min", func(t *testing.T) {
			if RenderWidth(r, 10) != RenderWidth(r, minWidth) {
				t.Error("a width below the narrowest layout is not laid out as the narrowest")
			}
		})
		t.Run(name+"-summary", func(t *testing.T) {
			golden(t, "summary-"+name, Summary(r))
		})
	}
}

// oddReport is a 2-GPU report with something unusual in every section the console
// view prints: CUDA lists GPU1 as ordinal 0 (the ordinals are mapped through the
// bus ids), a module failed with an errno the view names and one it does not, a
// dependency, NVML failed to load, an NCCL older than 2.9 that failed before any
// size, an IOMMU of unknown mode, a pair whose P2P NVML refused and CUDA denied, a
// copy method the view does not know, peer memory and above-BAR1 probes in each
// state, BAR1 that grew and shrank, a finding of an unknown severity and a stall.
func oddReport() *Report {
	r := New()
	r.Verdict = Fail
	r.Recipe = RecipeRef{Name: "odd", Digest: "sha256:0123"}
	r.StartedAt = "2026-12-06T10:00:00Z"
	r.Kernel = Kernel{Release: "6.12.9", Cmdline: ""}
	r.Modules = []Module{
		{Name: "nvidia", Result: ModError, Errno: 8, Error: "exec format error"},
		{Name: "nvidia-peermem", Result: ModError, Errno: 999},
		{Name: "ecc", RequiredBy: "nvidia", Result: ModError, Errno: 2},
		{Name: "nvidia-uvm", Version: "550.1", Result: "loaded"},
		{Name: "nvidia-drm", Result: ModError},
	}
	vram := int64(24 << 30)
	no := false
	r.GPUs = []GPU{
		{BDF: "0000:01:00.0", Vendor: "0x10de", Device: "0x2684", NUMANode: 1, BAR1Bytes: 256 << 20, VRAMBytes: &vram,
			Link:     Link{CurrentSpeed: "8.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16},
			Upstream: []Bridge{{BDF: "0000:00:01.0", Link: Link{CurrentSpeed: "16.0 GT/s PCIe", CurrentWidth: 16}, ACS: &ACS{EgressControl: true}}},
			P2PMode:  P2PModeNone, P2PModeLine: "peerboot-p2p: bar1-mode=none why=bar1-too-small gpu=0000:01:00.0"},
		{BDF: "0000:02:00.0", Vendor: "0x10de", Device: "0x2684", NUMANode: -1,
			Link: Link{CurrentSpeed: "", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 4},
			NVML: &NVMLGPU{Name: "NVIDIA RTX 6000 Ada", BAR1Total: 64 << 30, FBTotal: 48 << 30}, P2PMode: P2PModeDynamic},
	}
	r.CUDA = CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &Status{Name: "CUDA_SUCCESS"}, DriverVersion: 12020,
		Devices: []CUDADevice{{Ordinal: 0, BDF: "0000:02:00.0", Name: "ignored: NVML names it"}, {Ordinal: 1, BDF: "0000:01:00.0", Name: "CUDA's name", MemBytes: 1}}}
	r.NVML = NVML{Library: "libnvidia-ml.so.1", Error: "libnvidia-ml.so.1: cannot open shared object file"}
	r.Pairs = []Pair{{A: 0, B: 1, NVMLTopology: "SYS", P2PRead: "CNS", CanAccessPeer: &no}}
	r.IOMMU = IOMMU{Active: true, Cmdline: []string{"intel_iommu=on", "iommu=pt"}}
	r.Copies = []Copy{
		// Ordinal 0 is GPU1, ordinal 1 GPU0.
		{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, GBps: 801.25},
		{Src: 1, Dst: 1, Method: MethodCE, Direction: DirLocal, Error: "cuMemcpyAsync: CUDA_ERROR_UNKNOWN (999)"},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 11.96},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirBidir, GBps: 20.04},
		{Src: 1, Dst: 0, Method: "dma", Direction: DirWrite, GBps: 3.05},
		// An ordinal beyond the GPUs sysfs listed still gets its row.
		{Src: 2, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 1},
		{Src: 0, Dst: 3, Method: MethodCE, Direction: DirWrite, GBps: 2},
		// A copy of one GPU with a named direction is that matrix's diagonal.
		{Src: 1, Dst: 1, Method: "dma", Direction: DirWrite, GBps: 700},
		// A "local" copy between two GPUs opens no matrix of its own.
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirLocal, GBps: 5},
		// A direction the view does not know, of a method it knows: a matrix after
		// the known ones.
		{Src: 1, Dst: 0, Method: MethodSM, Direction: "pull", GBps: 7.5},
	}
	r.PeerMem = []PeerMem{
		{Kind: MemManaged, Owner: 0, Peer: 1, Bytes: 64 << 20, Verified: true},
		{Kind: MemVMM, Owner: 0, Peer: 1, Bytes: 2 << 20, Step: StepSetup, Refused: "cuMemSetAccess: CUDA_ERROR_NOT_SUPPORTED (801)"},
		{Kind: MemIPC, Owner: 1, Peer: 0, Bytes: 2 << 20, Step: StepPeerCopy, Error: "cuMemcpyAsync: CUDA_ERROR_LAUNCH_FAILED (719)"},
		{Kind: MemCUDAIPC, Owner: 1, Peer: 0, Bytes: 3 << 20, Step: StepPeerWrite, Mismatch: &Mismatch{Offset: 0x40, Words: 2}},
		{Kind: MemManaged, Owner: 1, Peer: 1, Bytes: 4096},
	}
	r.HighMem = []HighMem{
		{GPU: 0, Peer: -1, BAR1Bytes: 256 << 20, VRAMBytes: 48 << 30, BallastMiB: 100, Error: "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (2)", Guarantee: "virtual placement only"},
		{GPU: 1, Peer: 0, BAR1Bytes: 256 << 20, VRAMBytes: 24 << 30, BufferVA: "0x7f00", Mismatch: &Mismatch{Offset: 0x100, Words: 1}},
		{GPU: 1, Peer: 0},
	}
	before, after, grew := int64(5<<20), int64(3<<20), int64(2<<30+1<<29)
	r.BAR1 = []BAR1Usage{{GPU: 0, Total: 256 << 20, UsedBefore: before, UsedAfter: &after}, {GPU: 1, Total: 64 << 30, UsedBefore: before, UsedAfter: &grew}, {GPU: 2, Total: 1000, UsedBefore: 512}}
	r.NCCL = &NCCL{Library: "libnccl.so.2", Version: 2708, Ranks: 2, Error: "ncclCommInitAll: unhandled system error (2)", Env: map[string]string{"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "INFO"}}
	r.KernelEvents = []KEvent{{Kind: KEventIOMMU, Line: "DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr 0x1000"}}
	r.Findings = []Finding{
		{ID: "z.info", Status: SevInfo, Message: "informational", Evidence: "not shown for info", Hint: "shown for info"},
		{ID: "y.odd", Status: "note", Message: "a severity the view does not know", Evidence: "shown"},
		{ID: "x.warn", Status: SevWarn, Message: "a warning"},
		{ID: "copy.error", Status: SevFail, Message: "failed", Subject: "GPU0->GPU1 ce write"},
		{ID: "copy.slow", Status: SevWarn, Message: "a warning marks no cell", Subject: "GPU1->GPU0 ce bidir"},
		{ID: "w.fail", Status: SevFail, Message: "no subject"},
	}
	r.Durations = []Duration{{Phase: PhaseModules, MS: 999}, {Phase: PhaseCUDA, MS: 1000}, {Phase: PhaseNCCL, MS: 61250}}
	r.Stall = &Stall{Phase: PhaseNCCL, AfterMS: 120000, Cause: "ncclCommInitAll did not return"}
	r.DeadlineExceeded = PhaseNCCL
	return r
}

// The console view of the odd report and its variants, held by goldens: every
// section's words for each state, the ordinals mapped to GPU indexes, the severity
// order of the findings.
func TestRenderOddReports(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width int
		edit  func(r *Report)
	}{
		{"odd", 80, func(r *Report) {}},
		{"odd-wide", 200, func(r *Report) {}},
		{"bare", 80, func(r *Report) { *r = *New(); r.Verdict = "" }},
		// Only local copies: no matrix to draw, the copies listed instead.
		{"local-copies-only", 80, func(r *Report) {
			r.Copies = r.Copies[:2]
			r.Stall = nil
			r.Durations = nil
		}},
		// A stall without the details, and no durations: the phase alone.
		{"deadline-only", 80, func(r *Report) {
			r.Stall, r.Durations = nil, nil
			r.NCCL.Error, r.NCCL.Version, r.NCCL.Library = "", 0, ""
			r.NCCL.Sizes = []NCCLSize{{Bytes: 1 << 20, TimeUS: 55.55, AlgBW: 18.875, BusBW: 18.875, Wrong: 3}}
			r.NCCL.Transports = []Transport{{From: 0, To: 1, Via: "SHM/direct/direct"}, {From: 1, To: 0, Via: "P2P/direct pointer", P2P: true}, {From: 1, To: 1, Via: "self"}, {From: 0, To: 1, Via: "SHM/direct/direct"}}
			r.NCCL.BusBWAtMax = 18.875
			r.NCCL.LogFile = "/run/nccl.log"
			r.NCCL.Env = nil
			r.IOMMU = IOMMU{Mode: "translated", Units: []string{"dmar0", "dmar1"}}
			r.CUDA.PTX = &Status{Name: "CUDA_ERROR_INVALID_PTX", Code: 218}
			r.Tool = "p2pcheck 1.2"
			r.StartedAt = ""
		}},
		// No pairs listed: no topology matrix. NVML refusing P2P writes only.
		{"no-pairs", 80, func(r *Report) { r.Pairs = nil }},
		{"p2p-write", 80, func(r *Report) { r.Pairs[0].P2PRead, r.Pairs[0].P2PWrite = "OK", "GNS" }},
		// A stall with no cause given.
		{"stall-no-cause", 80, func(r *Report) {
			r.Stall.Cause = ""
			r.Durations = nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := oddReport()
			tc.edit(r)
			golden(t, "render-"+tc.name, RenderWidth(r, tc.width))
			if tc.name == "odd" || tc.name == "bare" {
				golden(t, "summary-"+tc.name, Summary(r))
			}
		})
	}
}

// A link in one cell: speed without " PCIe" and with "GT/s" joined, the width when
// known; now and at most in one cell when they agree, both where they differ.
func TestLinkText(t *testing.T) {
	for _, tc := range []struct {
		speed string
		width int
		want  string
	}{
		{"16.0 GT/s PCIe", 16, "16.0GT/s x16"},
		{" 8.0 GT/s PCIe ", 1, "8.0GT/s x1"},
		{"2.5 GT/s", 0, "2.5GT/s"},
		{"", 4, "? x4"},
		{"", 0, "?"},
		{"Unknown", -1, "Unknown"},
	} {
		if got := linkText(tc.speed, tc.width); got != tc.want {
			t.Errorf("linkText(%q, %d) = %q, want %q", tc.speed, tc.width, got, tc.want)
		}
	}
	for _, tc := range []struct {
		l    Link
		want string
	}{
		{Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}, "16.0GT/s x16"},
		{Link{CurrentSpeed: "2.5 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}, "2.5/16.0GT/s x16"},
		{Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 8, MaxWidth: 16}, "16.0GT/s x8/16"},
		{Link{CurrentSpeed: "16.0 GT/s", MaxSpeed: "", CurrentWidth: 8}, "16.0/?GT/s x8"},
		{Link{CurrentWidth: 0, MaxWidth: 16}, "?GT/s"},
		{Link{CurrentSpeed: "8.0 GT/s PCIe", MaxSpeed: "8.0 GT/s PCIe", CurrentWidth: 4, MaxWidth: 4}, "8.0GT/s x4"},
	} {
		if got := linkNowMax(tc.l); got != tc.want {
			t.Errorf("linkNowMax(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

// blockWidth is the widest line of the section that starts with title in a rendered
// report, its table lines only (those of upstream paths and legends left out).
func blockWidth(t *testing.T, out, title string) int {
	t.Helper()
	i := strings.Index(out, "\n"+title)
	if i < 0 {
		t.Fatalf("no %q in:\n%s", title, out)
	}
	block, _, _ := strings.Cut(out[i+1:], "\n\n")
	w := 0
	for _, line := range strings.Split(block, "\n")[1:] {
		if strings.HasPrefix(line, "      upstream:") || strings.HasPrefix(line, "  legend:") || strings.HasPrefix(line, "          ") {
			continue
		}
		w = max(w, utf8.RuneCountInString(line))
	}
	return w
}

// The console view picks the widest layout that fits, to the column: the GPU table
// keeps its upstream column, then its two link columns, while they fit; a copy
// matrix keeps each pair's class in its cells while it fits; and from the classic
// 80 columns up no line is wider than asked (below, section titles, which do not
// wrap, may be).
func TestRenderWidestLayoutThatFits(t *testing.T) {
	r := example(t, "fail")
	wide := RenderWidth(r, 400)
	withUpstream := blockWidth(t, wide, "GPUs")
	twoLinks := blockWidth(t, RenderWidth(r, withUpstream-1), "GPUs")
	narrow := blockWidth(t, RenderWidth(r, twoLinks-1), "GPUs")
	withClass := blockWidth(t, wide, "Copies ce read")
	if !(narrow < twoLinks && twoLinks < withUpstream) || withClass <= minWidth || withClass > withUpstream {
		t.Fatalf("layout widths %d, %d, %d; matrix %d", narrow, twoLinks, withUpstream, withClass)
	}
	for width := minWidth; width <= withUpstream+1; width++ {
		out := RenderWidth(r, width)
		for i, line := range strings.Split(out, "\n") {
			if w := utf8.RuneCountInString(line); w > width && width >= DefaultWidth {
				t.Fatalf("width %d: line %d is %d columns: %q", width, i+1, w, line)
			}
		}
		if got, want := strings.Contains(out, "  UPSTREAM\n"), width >= withUpstream; got != want {
			t.Errorf("width %d: upstream column %v, want %v (it needs %d)", width, got, want, withUpstream)
		}
		if got, want := strings.Contains(out, "LINK NOW/MAX"), width < twoLinks; got != want {
			t.Errorf("width %d: one link column %v, want %v (two need %d)", width, got, want, twoLinks)
		}
		if got, want := strings.Contains(out, "128.4 NODE!"), width >= withClass; got != want {
			t.Errorf("width %d: pair classes in the cells %v, want %v (they need %d)", width, got, want, withClass)
		}
	}
}

// Render takes any report, validated or not: a copy between ordinals Validate would
// refuse (negative) is left out of the matrices, not a panic.
func TestRenderNegativeOrdinals(t *testing.T) {
	for _, c := range []Copy{
		{Src: -1, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 9.5},
		{Src: 0, Dst: -1, Method: MethodCE, Direction: DirWrite, GBps: 9.5},
	} {
		r := oddReport()
		r.Copies = append(r.Copies, c)
		if got, want := RenderWidth(r, 80), RenderWidth(oddReport(), 80); got != want {
			t.Errorf("a copy %d->%d changed the view:\n%s", c.Src, c.Dst, got)
		}
	}
}

// A copy from an ordinal past every GPU and destination listed still gets its
// row and column: the matrix is as large as the largest ordinal either way.
func TestRenderCopyFromPastTheGPUs(t *testing.T) {
	r := &Report{
		GPUs:   []GPU{{BDF: "0000:01:00.0"}, {BDF: "0000:02:00.0"}},
		Copies: []Copy{{Src: 3, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 12.3}},
	}
	out := RenderWidth(r, 100)
	if !strings.Contains(out, "Copies ce write, GB/s") || !strings.Contains(out, "\n  GPU3  12.3 ?  -     -     -\n") {
		t.Errorf("the copy 3->0 is not in a 4-GPU matrix:\n%s", out)
	}
}
