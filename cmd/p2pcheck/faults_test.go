package main

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

// The fault catalogue (docs/selftest-findings.md): each fault is injected into a
// sysfs fixture tree (real config-space bytes, from pcietest) or into the FAKE
// backend's answers, the real p2pcheck binary runs every phase as a child process,
// and the verdict must name it with the right finding. Nothing here touches a GPU;
// the same phases on real GPUs are what scripts/device/ runs.

const vram48G = 49140 << 20

type faultCase struct {
	name   string
	layout func() pcietest.Layout
	recipe string // testdata file; "" runs without --recipe
	// mutate changes the healthy answers; nil keeps them.
	mutate   func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result)
	layoutFx func(l *pcietest.Layout) // changes the box before it is built
	args     []string
	want     []string // "status id" findings that must be present
	msg      []string // substrings of some finding's message
	pass     bool     // the verdict
	check    func(t *testing.T, r *selftest.Report)
	ko       string // version of an nvidia.ko written under the root's lib/modules; "" none
	// bootVGA is the GPU whose sysfs boot_vga is 1 (0 is GPU 0; the zero value);
	// -1 none. Set only in the display cases.
	bootVGA int
	// modResult is the init's outcome for nvidia [loaded].
	modResult string
	// stockDriver leaves out the mode lines the patched driver logged at boot (the
	// kernel log's backlog): the box runs an nvidia.ko without peerboot's series.
	stockDriver bool
}

// modeLine is the line peerboot's series logs for GPU i at BAR1 setup
// (driver/patches/README.md, "The mode line"), with the /dev/kmsg prefix of record seq.
func modeLine(seq, i int, bdf, mode, why string) string {
	return fmt.Sprintf("6,%d,%d,-;NVRM: peerboot-p2p: bar1-mode gpu=%d pci=%s chip=AD102 bar1_mib=32768 fb_mib=49140 mode=%s why=%s", seq, 4000000+seq, i, bdf, mode, why)
}

// bootModeLines are the mode lines a patched driver logged before the self-test ran
// (the init loaded it, the GPUs were set up): static where BAR1 holds the memory, else
// dynamic, as driver/patches/README.md's decision table says for an AD102.
func bootModeLines(pre *pcie.Result, vram int64) string {
	var b strings.Builder
	for i, g := range pre.GPUs {
		mode, why := "dynamic", "bar1-below-fb"
		if g.BAR1Bytes >= vram {
			mode, why = "static", "auto"
		}
		b.WriteString(modeLine(100+i, i, g.BDF, mode, why) + "\n")
	}
	return b.String()
}

func faultCases() []faultCase {
	cases := []faultCase{
		{name: "healthy-xeon", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml", pass: true, check: allVerified},
		{name: "healthy-epyc", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true, check: allVerified},
		// Run by hand without a recipe: p2pcheck's own defaults (verification on) apply.
		{name: "healthy-epyc-no-recipe", layout: pcietest.EPYC4GPU, pass: true, check: allVerified},
		{
			name: "unpatched-driver-all-cns", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				for i := range s.NVML.Pairs {
					s.NVML.Pairs[i].Read, s.NVML.Pairs[i].Write = 1, 1 // NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
				}
				n := len(pre.GPUs)
				s.Box.CanAccess = make([][]bool, n) // cuDeviceCanAccessPeer answers 0 everywhere
				for i := range n {
					s.Box.CanAccess[i] = make([]bool, n)
				}
				s.Box.NCCLLog = nil
				for r := range n {
					s.Box.NCCLLog = append(s.Box.NCCLLog, fmt.Sprintf("node:77:78 [%d] NCCL INFO Channel 00/0 : %d[%d] -> %d[%d] via SHM/direct/direct", r, r, r, (r+1)%n, (r+1)%n))
				}
			},
			want: []string{"fail p2p.status"},
		},
		{
			name: "bar1-below-vram-static-driver-nccl-stall", layout: pcietest.Xeon8GPU, recipe: "xeon-static24.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) { s.Hang = selftest.PhaseNCCL },
			args:   []string{"--deadline", "20s"},
			want:   []string{"fail bar1.size", "fail deadline"},
		},
		{
			name: "acs-redirect-on", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml",
			layoutFx: func(l *pcietest.Layout) {
				for i := range l.Bridges {
					if l.Bridges[i].Type == pcietest.SwitchDown {
						l.Bridges[i].ACSCtrl |= pcietest.ACSRR | pcietest.ACSCR
						return
					}
				}
			},
			want: []string{"warn acs.redirect"},
			pass: true, // seed 000: P2P can work through the IOMMU with redirect on; measured results decide
		},
		{
			name: "nccl-uses-shm", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.NCCLLog = gpufake.DefaultNCCLLog(4)
				s.Box.NCCLLog[2] = "node:77:78 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct"
			},
			want: []string{"fail nccl.transport"}, msg: []string{"NCCL connected 1 channel(s) via SHM/direct/direct"},
		},
		{
			name: "nccl-cumem-is-p2p", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.NCCLLog = gpufake.DefaultNCCLLog(4)
				for i, l := range s.Box.NCCLLog {
					s.Box.NCCLLog[i] = strings.Replace(l, "P2P/direct pointer", "P2P/CUMEM/read", 1)
				}
			},
			pass: true,
		},
		{
			name: "nccl-over-net", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.NCCLLog = gpufake.DefaultNCCLLog(4)
				s.Box.NCCLLog[0] = "node:77:78 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0"
			},
			want: []string{"fail nccl.transport"}, msg: []string{"via NET/Socket/0"},
		},
		{
			name: "corrupted-peer-copy", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 4096}}
			},
			want: []string{"fail copy.corrupt"}, msg: []string{"GPU0->GPU1 ce write corrupted data: 1 word(s) differ, first at byte 0x1000"},
		},
		{
			name: "short-local-copy", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultShort, Copy: "2->2", Method: "sm"}}
			},
			want: []string{"fail copy.corrupt"}, msg: []string{"GPU2 local sm copy corrupted data: 2048 word(s) differ, first at byte 0x2000"},
		},
		{
			name: "inject-corruption", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", args: []string{"--inject-corruption"},
			want: []string{"fail copy.corrupt", "info test.injected"},
		},
		{
			name: "peer-enable-map-failed", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuCtxEnablePeerAccess", Code: 205}}
			},
			want: []string{"fail copy.error"}, msg: []string{"CUDA_ERROR_MAP_FAILED"},
		},
		{
			name: "above-bar1-window-misses", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultWindow, GPU: 3, Window: pre.GPUs[3].BAR1Bytes}}
			},
			want: []string{"fail highmem.copy"}, msg: []string{"above-BAR1 probe on GPU3"},
		},
		{
			name: "nccl-wrong-sum", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultSum, Rank: 1, Elem: 0, Count: 5}}
			},
			want: []string{"fail nccl.data"}, msg: []string{"5 element(s)"},
		},
		{
			name: "verify-off-in-recipe", layout: pcietest.EPYC4GPU, recipe: "epyc-noverify.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "sm"}}
			},
			want: []string{"warn copy.unverified"}, pass: true,
			check: func(t *testing.T, r *selftest.Report) {
				for _, c := range r.Copies {
					if c.Verified || c.Mismatch != nil {
						t.Errorf("selftest.verify = false, yet %s verified %v mismatch %+v", copyName(c), c.Verified, c.Mismatch)
					}
				}
			},
		},
		{
			name: "bandwidth-above-link", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) { s.Box.PairGBps[0][1] = 128 },
			want:   []string{"fail copy.overrate"}, msg: []string{"GPU0->GPU1 ce write measured 128.0 GB/s"},
		},
		{
			name: "display-gpu-static-bar1", layout: pcietest.Xeon8GPU, recipe: "xeon-static24.toml", bootVGA: 0,
			want: []string{"fail gpu.display"}, msg: []string{"GPU0 (0000:1a:00.0) drives a display (boot_vga=1)"},
		},
		{
			name: "display-gpu-dynamic-bar1", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", bootVGA: -1,
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.NVML.GPUs[2].DisplayMode, s.NVML.GPUs[2].Display = 1, 1 // NVML_FEATURE_ENABLED
			},
			want: []string{"info gpu.display"}, msg: []string{"nvml display_mode=1, nvml display_active=1"}, pass: true,
		},
		{
			name: "downtrained-link-gen4-x8", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml",
			layoutFx: func(l *pcietest.Layout) {
				if err := l.Train(l.GPUs[2].BDF, 4, 8); err != nil {
					panic(err)
				}
			},
			want: []string{"fail pcie.link"},
		},
		{
			name: "iommu-fault-and-xid", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = []string{
					"3,2210,91234567,-;AMD-Vi: Event logged [IO_PAGE_FAULT device=" + pre.GPUs[1].BDF + " domain=0x000e address=0x3ffffe000 flags=0x0020]",
					"4,2211,91234600,-;NVRM: Xid (PCI:" + pre.GPUs[1].BDF[:10] + "): 79, pid=1234, name=p2pcheck, GPU has fallen off the bus.",
				}
			},
			want: []string{"fail kernel.iommu_fault", "fail kernel.xid"}, msg: []string{"IOMMU fault on GPU1", "Xid 79 on GPU1"},
		},
		{
			name: "missing-gsp-firmware", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = []string{"3,1001,5123456,-;nvidia " + pre.GPUs[0].BDF + ": Direct firmware load for nvidia/550.163.01/gsp_ga10x.bin failed with error -2"}
			},
			want: []string{"fail kernel.firmware"},
		},
		{
			// The issue-21 case: nvidia.ko failed with ENODEV, so nothing reports a driver
			// version except the .ko file itself.
			name: "ko-version-differs-module-enodev", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", ko: "550.54.15",
			modResult: selftest.ModENODEV,
			want:      []string{"fail version.mismatch"}, msg: []string{"nvidia.ko in the image is version 550.54.15"},
			check: func(t *testing.T, r *selftest.Report) {
				if r.Recipe.DriverVersion != "550.163.01" || len(r.Modules) != 1 || r.Modules[0].KoVersion != "550.54.15" || r.Modules[0].File != "updates/dkms/nvidia.ko" {
					t.Errorf("recipe %+v modules %+v", r.Recipe, r.Modules)
				}
			},
		},
		{
			name: "libcuda-not-module-version", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuInit", Code: 803}}
				s.NVML.Init = 18 // NVML_ERROR_LIB_RM_VERSION_MISMATCH
			},
			want: []string{"fail version.mismatch"},
		},
	}
	cases = append(cases, peerMemCases()...)
	cases = append(cases, faultCase{
		// NVML's BAR1 used grows by 2 GiB on GPU 3 over the copies and stays: a leak
		// warns, the verdict stands, and every GPU has its before and after figures.
		name: "bar1-leak", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
		mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
			for i := range s.NVML.GPUs {
				s.NVML.GPUs[i].BAR1Used = 5 << 20
			}
			leaked := uint64(5<<20 + 2<<30)
			s.NVML.GPUs[3].BAR1UsedAfter = &leaked
		},
		want: []string{"warn bar1.leak"},
		msg:  []string{"GPU3 (0000:61:00.0) holds 2.0GiB more BAR1 after the copies than before (5.0MiB -> 2.0GiB of 32.0GiB)"},
		check: func(t *testing.T, r *selftest.Report) {
			if len(r.BAR1) != 4 {
				t.Fatalf("bar1 %+v, want 4 GPUs", r.BAR1)
			}
			for i, u := range r.BAR1 {
				want := int64(5 << 20)
				if i == 3 {
					want += 2 << 30
				}
				if u.GPU != i || u.Total != 32<<30 || u.UsedBefore != 5<<20 || u.UsedAfter == nil || *u.UsedAfter != want {
					t.Errorf("bar1[%d] = %+v (after %v), want GPU %d, 5MiB before, %d after", i, u, u.UsedAfter, i, want)
				}
			}
			if !strings.Contains(selftest.Render(r), "BAR1 (NVML: used before the copies") {
				t.Error("report show lacks the BAR1 table")
			}
		},
	})
	for _, phase := range []string{selftest.PhasePrecheck, selftest.PhaseNVML, selftest.PhaseCUDA, selftest.PhaseNCCL, selftest.PhasePeerMem, selftest.PhaseBAR1} {
		cases = append(cases, faultCase{
			name: "hang-in-" + phase, layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) { s.Hang = phase },
			args:   []string{"--deadline", "10s"},
			want:   []string{"fail deadline"},
		})
	}
	return cases
}

func TestFaultCatalogue(t *testing.T) {
	for _, tc := range faultCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, code := runFault(t, tc)
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Status+" "+f.ID)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("finding %q missing; got %v", w, got)
				}
			}
			for _, m := range tc.msg {
				if !strings.Contains(strings.Join(all(r), "\n"), m) {
					t.Errorf("no finding says %q:\n%s", m, strings.Join(all(r), "\n"))
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
			if tc.pass != (r.Verdict == selftest.Pass) || tc.pass != (code == exitPass) {
				t.Errorf("verdict %s exit %d, want pass=%v; findings:\n%s", r.Verdict, code, tc.pass, strings.Join(failing(r), "\n"))
			}
			if strings.HasPrefix(tc.name, "hang-in-") {
				phase := strings.TrimPrefix(tc.name, "hang-in-")
				if r.Stall == nil || r.Stall.Phase != phase || r.DeadlineExceeded != phase {
					t.Errorf("stall %+v, want phase %s", r.Stall, phase)
				}
			}
		})
	}
}

// Every e2e case is cited in docs/selftest-findings.md, and every e2e name cited there
// is a case.
func TestFindingsDocCoversE2E(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "selftest-findings.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := map[string]bool{}
	for _, tc := range faultCases() {
		names[tc.name] = true
		if !strings.Contains(doc, "`e2e/"+tc.name+"`") {
			t.Errorf("e2e case %q is not cited in docs/selftest-findings.md", tc.name)
		}
	}
	for _, part := range strings.Split(doc, "`e2e/")[1:] {
		name, _, _ := strings.Cut(part, "`")
		if !names[name] {
			t.Errorf("docs/selftest-findings.md cites e2e/%s, which TestFaultCatalogue (cmd/p2pcheck) lacks", name)
		}
	}
}

func all(r *selftest.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Status+" "+f.ID+": "+f.Message)
	}
	return out
}

// allVerified: every copy of a healthy FAKE box ran, on the real engine, and was
// checked on the (FAKE) GPU; the NCCL transports came from parsing its log.
func allVerified(t *testing.T, r *selftest.Report) {
	if len(r.Copies) == 0 || len(r.HighMem) == 0 {
		t.Errorf("%d copies, %d above-BAR1 probes", len(r.Copies), len(r.HighMem))
	}
	for _, c := range r.Copies {
		if !c.Verified || c.Mismatch != nil || c.Error != "" {
			t.Errorf("%s: verified %v mismatch %+v error %q", copyName(c), c.Verified, c.Mismatch, c.Error)
		}
	}
	// The peermem phase: every form between every ordered pair, each verified.
	// managed and vmm on every ordered pair, the two cross-process forms on a ring.
	if n := len(r.GPUs); len(r.PeerMem) != 2*n*(n-1)+2*n {
		t.Errorf("%d peer-memory checks, want 2 forms x %d ordered pairs + 2 forms x %d ring pairs", len(r.PeerMem), n*(n-1), n)
	}
	for _, m := range r.PeerMem {
		if !m.Verified || m.Owner == m.Peer || m.Refused != "" || m.Error != "" {
			t.Errorf("%s %d->%d: %+v", m.Kind, m.Owner, m.Peer, m)
		}
		// The ipc form's peer side ran in a second process (--phase peermem-import).
		if m.Kind == selftest.MemIPC && !strings.Contains(strings.Join(m.Calls, "; "), "importer: cuMemImportFromShareableHandle(POSIX fd) in process") {
			t.Errorf("ipc %d->%d did not import in a second process: %q", m.Owner, m.Peer, m.Calls)
		}
		if m.Kind == selftest.MemCUDAIPC && !strings.Contains(strings.Join(m.Calls, "; "), fmt.Sprintf("importer: cuIpcOpenMemHandle(LAZY_ENABLE_PEER_ACCESS) on GPU %d in process", m.Peer)) {
			t.Errorf("cudaipc %d->%d did not open the handle in a second process: %q", m.Owner, m.Peer, m.Calls)
		}
	}
	if !strings.Contains(r.CUDA.Library, "FAKE") || r.NCCL == nil || !strings.Contains(r.NCCL.Library, "FAKE") {
		t.Errorf("the report does not name the FAKE libraries: cuda %q", r.CUDA.Library)
	}
	if r.NCCL == nil || len(r.NCCL.Transports) != 2*len(r.GPUs) || len(r.NCCL.Sizes) == 0 {
		t.Errorf("nccl %+v", r.NCCL)
	}
}

func copyName(c selftest.Copy) string {
	return fmt.Sprintf("GPU%d->GPU%d %s %s", c.Src, c.Dst, c.Method, c.Direction)
}

func failing(r *selftest.Report) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Status != selftest.SevInfo {
			out = append(out, "  "+f.Status+" "+f.ID+": "+f.Message)
		}
	}
	return out
}

// runFault builds the box, scans it the way the precheck will (so the FAKE answers
// name the same GPUs and pairs), writes the scenario and runs p2pcheck on it.
func runFault(t *testing.T, tc faultCase) (*selftest.Report, int) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	l := tc.layout()
	if tc.layoutFx != nil {
		tc.layoutFx(&l)
	}
	if err := pcietest.Build(root, l); err != nil {
		t.Fatal(err)
	}
	if tc.ko != "" {
		// testdata/nvidia-<version>.ko: an ELF object with only a .modinfo section,
		// written by selftest's TestWriteKoFixture.
		ko, err := os.ReadFile(filepath.Join("testdata", "nvidia-"+tc.ko+".ko"))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(root, "lib", "modules", selftest.ReadKernel(filepath.Join(root, "proc")).Release, "updates", "dkms")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "nvidia.ko"), ko, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if strings.HasPrefix(tc.name, "display-") && tc.bootVGA >= 0 {
		bdf := l.GPUs[tc.bootVGA].BDF
		if err := os.WriteFile(filepath.Join(root, "sys", "bus", "pci", "devices", bdf, "boot_vga"), []byte("1\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	pre, err := pcie.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	s := healthyScenario(t, pre, vram48G)
	if tc.mutate != nil {
		tc.mutate(t, s, pre)
	}
	kmsgPath := filepath.Join(t.TempDir(), "kmsg")
	backlog := "6,1,1,-;boot noise before the run: NVRM: Xid (PCI:0000:01:00): 13, ignored\n"
	if !tc.stockDriver {
		backlog += bootModeLines(pre, vram48G)
	}
	if err := os.WriteFile(kmsgPath, []byte(backlog), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--fake", writeScenario(t, s), "--root", root, "--kmsg", kmsgPath,
		"--modules-json", modulesFile(t, cmp.Or(tc.modResult, selftest.ModLoaded), 0),
		// Small copies and all-reduces: the FAKE GPUs are host memory and Go loops.
		"--copy-size", "16KiB", "--nccl-max", "64KiB",
	}, tc.args...)
	if tc.recipe != "" {
		args = append(args, "--recipe", filepath.Join("testdata", tc.recipe))
	}
	start := time.Now()
	r, code, stderr := runCheck(t, nil, args...)
	t.Logf("%s: exit %d in %s", s, code, time.Since(start).Round(time.Millisecond))
	if testing.Verbose() && stderr != "" {
		t.Logf("stderr:\n%s", stderr)
	}
	return r, code
}

// peerMemCases are issue 27's FAKE cases: managed memory refused (warn), corrupted
// (fail) and faulting with an Xid 31 (fail), VMM peer copies verified, a VMM peer
// mapping refused under a P2P recipe (fail), the corruption hook in the managed check,
// and the driver's per-GPU mode lines with a mixed pair (fail) and a GPU with none.
func peerMemCases() []faultCase {
	modeLines := func(pre *pcie.Result, modes ...string) []string {
		var out []string
		for i, g := range pre.GPUs {
			why := map[string]string{"static": "forced", "dynamic": "bar1-below-fb", "none": "small-bar1"}[modes[i]]
			out = append(out, modeLine(900+i, i, g.BDF, modes[i], why))
		}
		return out
	}
	return []faultCase{
		{
			name: "managed-memory-refused", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuMemAdvise", Code: 801}}
			},
			want: []string{"warn peermem.refused"}, msg: []string{"managed memory of GPU0 used by GPU1: the driver declined it: cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0): CUDA_ERROR_NOT_SUPPORTED"},
		},
		{
			name: "managed-memory-corrupt", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultLost, GPU: 2, Mem: gpufake.MemManaged, Offset: 512, Bytes: 4}}
			},
			want: []string{"fail peermem.corrupt"}, msg: []string{"managed memory of GPU2 used by GPU0: 1 word(s) wrong in the peer write, first at byte 0x200"},
		},
		{
			name: "managed-memory-mmu-fault-xid31", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultMMU, GPU: 1, Mem: gpufake.MemManaged}}
				s.Kmsg = []string{"4,3001,95000000,-;NVRM: Xid (PCI:" + pre.GPUs[0].BDF[:10] + "): 31, pid=4242, name=p2pcheck, Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"}
			},
			want: []string{"fail peermem.error", "fail kernel.xid"}, msg: []string{"managed memory of GPU1 used by GPU0 failed in the peer read", "Xid 31 on GPU0"},
		},
		{
			name: "vmm-peer-copies-verified", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml", pass: true,
			check: func(t *testing.T, r *selftest.Report) {
				allVerified(t, r)
				vmm := 0
				for _, m := range r.PeerMem {
					if m.Kind == selftest.MemVMM && m.Verified && strings.Contains(strings.Join(m.Calls, "; "), fmt.Sprintf("cuMemSetAccess(GPU %d read-write, GPU %d read-write)", m.Owner, m.Peer)) {
						vmm++
					}
				}
				if vmm != 56 {
					t.Errorf("%d verified VMM peer checks, want 8 x 7", vmm)
				}
				if !strings.Contains(selftest.Render(r), "Peer memory (managed, VMM, shared by fd or IPC handle)") {
					t.Error("report show lacks the peer-memory table")
				}
			},
		},
		{
			name: "vmm-peer-access-refused", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuMemSetAccess", Code: 217}}
			},
			want: []string{"fail peermem.refused"}, msg: []string{"vmm memory of GPU0 used by GPU1: the driver declined it: cuMemSetAccess(GPU 0 read-write, GPU 1 read-write): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"},
		},
		{
			// The importing process's writes into GPU2's exported memory do not land.
			name: "ipc-second-process-writes-lost", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultLost, GPU: 2, Mem: gpufake.MemVMM, Offset: 1024, Bytes: 4}}
			},
			want: []string{"fail peermem.corrupt"}, msg: []string{"ipc memory of GPU2 used by GPU3: 1 word(s) wrong in the peer write, first at byte 0x400"},
		},
		{
			// cuIpcOpenMemHandle in the second process fails to map the peer's memory.
			name: "cudaipc-open-map-failed", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Box.Faults = []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuIpcOpenMemHandle_v2", Code: 205}}
			},
			want: []string{"fail peermem.refused"}, msg: []string{"cudaipc memory of GPU0 used by GPU1: the driver declined it: in the importing process: cuIpcOpenMemHandle(LAZY_ENABLE_PEER_ACCESS) on GPU 1 in process"},
		},
		{
			name: "inject-corruption-managed", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", args: []string{"--inject-corruption=managed"},
			want: []string{"fail peermem.corrupt", "info test.injected"},
			// The owner's check of the peer's write catches it (the peer copy after it would too).
			msg: []string{"in the managed check GPU 0 -> GPU 1, after the peer's write", "managed memory of GPU0 used by GPU1: 1 word(s) wrong in the peer write"},
			check: func(t *testing.T, r *selftest.Report) {
				for _, c := range r.Copies {
					if c.Mismatch != nil {
						t.Errorf("=managed corrupted a copy: %+v", c)
					}
				}
			},
		},
		{
			name: "mixed-mode-pair", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = modeLines(pre, "static", "static", "static", "dynamic")
			},
			want: []string{"fail p2p.mode_mixed"}, msg: []string{"GPU2 (0000:41:00.0) is in static BAR1 mode and GPU3 (0000:61:00.0) in dynamic"},
			check: func(t *testing.T, r *selftest.Report) {
				mixed := 0
				for _, f := range r.Findings {
					if f.ID == "p2p.mode_mixed" {
						mixed++
					}
				}
				if mixed != 3 || r.GPUs[0].P2PMode != "static" || r.GPUs[3].P2PMode != "dynamic" || !strings.Contains(r.GPUs[3].P2PModeLine, "why=bar1-below-fb") {
					t.Errorf("%d mixed pairs (want 3: GPU3 with each other), modes %q %q", mixed, r.GPUs[0].P2PMode, r.GPUs[3].P2PMode)
				}
				if !strings.Contains(selftest.Render(r), "P2P mode (the driver's peerboot-p2p line)") {
					t.Error("report show lacks the mode table")
				}
			},
		},
		{
			name: "same-mode-all-dynamic", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = modeLines(pre, "dynamic", "dynamic", "dynamic", "dynamic")
			},
			check: func(t *testing.T, r *selftest.Report) {
				for i, g := range r.GPUs {
					if g.P2PMode != selftest.P2PModeDynamic {
						t.Errorf("GPU%d mode %q", i, g.P2PMode)
					}
				}
			},
		},
		{
			name: "mode-none-small-bar1", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = modeLines(pre, "dynamic", "none", "dynamic", "dynamic")
			},
			want: []string{"fail p2p.mode_none"}, msg: []string{"GPU1 (0000:21:00.0): the driver set up no BAR1 P2P (mode none, small-bar1)"},
		},
		{
			// The same line when p2pcheck runs by hand without --recipe: a warning that
			// names the driver's reason (the FAKE's copies still work).
			name: "mode-none-small-bar1-no-recipe", layout: pcietest.EPYC4GPU,
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = modeLines(pre, "dynamic", "none", "dynamic", "dynamic")
			},
			want: []string{"warn p2p.mode_none"}, msg: []string{"GPU1 (0000:21:00.0): the driver set up no BAR1 P2P (mode none, small-bar1)"},
			pass: true,
		},
		{
			// A 24 GB RTX 4090 among the recipe's 48 GB cards: the same name and device id,
			// half the memory (NVML and CUDA agree). It works, so it only warns.
			name: "gpu-memory-below-recipe", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.NVML.GPUs[1].FBTotal, s.Box.GPUs[1].MemBytes = 24564<<20, 24564<<20
			},
			want: []string{"warn gpus.vram"}, msg: []string{"GPU1 (0000:21:00.0) has 24564MiB of memory (NVML), recipe platform.vram = 49140MiB"},
			pass: true,
		},
		{
			// GPU3 is on the bus, but nvidia.ko never brought it up (a card the branch does
			// not support, RmInitAdapter failed): the FAKE libcuda and NVML list three GPUs,
			// and every phase passes on those three.
			name: "gpu-not-brought-up", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				gone := s.NVML.GPUs[3].BDF
				s.Box.GPUs, s.NVML.GPUs = s.Box.GPUs[:3], s.NVML.GPUs[:3]
				s.NVML.Pairs = slices.DeleteFunc(s.NVML.Pairs, func(p gpufake.FakeNVMLPair) bool { return p.A == gone || p.B == gone })
			},
			want: []string{"fail gpus.down"}, msg: []string{"GPU3 (0000:61:00.0) is in sysfs (device "},
		},
		{
			// The image carries peerboot's 550 series, the box ran a stock nvidia.ko of the
			// same version: everything else answers as on a patched box (an NVML that says
			// OK, peer copies that work: a box whose BIOS and board allow P2P), but no GPU
			// has a mode line, and the verdict must say so with the version that ran.
			name: "stock-driver-no-mode-lines", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", stockDriver: true, ko: "550.163.01",
			want: []string{"fail p2p.mode_missing"},
			msg:  []string{"no peerboot-p2p mode line for GPU0 (0000:01:00.0) AD102, GPU1 (0000:21:00.0) AD102, GPU2 (0000:41:00.0) AD102, GPU3 (0000:61:00.0) AD102: the image's nvidia.ko (driver 550.163.01 with peerboot's P2P series, driver.p2p = dynamic-bar1)"},
			check: func(t *testing.T, r *selftest.Report) {
				for _, f := range r.Findings {
					if f.ID == "p2p.mode_missing" && (!strings.Contains(f.Evidence, "version=550.163.01") || !strings.Contains(f.Hint, "stock (unpatched)")) {
						t.Errorf("the finding does not name the driver that ran or what to do: %+v", f)
					}
				}
				for i, g := range r.GPUs {
					if g.P2PMode != "" {
						t.Errorf("GPU%d has mode %q from a driver that logged none", i, g.P2PMode)
					}
				}
			},
		},
		{
			// One GPU's line is gone (a ring buffer that overflowed): the finding says the
			// log lost it rather than blaming the driver.
			name: "mode-line-lost-one-gpu", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", stockDriver: true,
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Kmsg = modeLines(pre, "dynamic", "dynamic", "dynamic", "dynamic")[1:]
			},
			want: []string{"fail p2p.mode_missing"}, msg: []string{"no peerboot-p2p mode line for GPU0 (0000:01:00.0) AD102, though 3 other GPU(s) have one"},
		},
	}
}
