package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
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
	recipe string // testdata file
	// mutate changes the healthy answers; nil keeps them.
	mutate   func(t *testing.T, s *fakeScenario, pre *pcie.Result)
	layoutFx func(l *pcietest.Layout) // changes the box before it is built
	args     []string
	want     []string // "status id" findings that must be present
	pass     bool     // the verdict
}

func TestFaultCatalogue(t *testing.T) {
	cases := []faultCase{
		{name: "healthy-xeon", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml", pass: true},
		{name: "healthy-epyc", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true},
		{
			name: "unpatched-driver-all-cns", layout: pcietest.Xeon8GPU, recipe: "xeon-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) {
				for i := range s.NVML.Pairs {
					s.NVML.Pairs[i].Read, s.NVML.Pairs[i].Write = "CNS", "CNS"
				}
				for i := range s.CUDA.CanAccess {
					for j := range s.CUDA.CanAccess[i] {
						s.CUDA.CanAccess[i][j] = false
					}
				}
				var local []selftest.Copy
				for _, c := range s.CUDA.Copies {
					if c.Src == c.Dst {
						local = append(local, c)
					}
				}
				s.CUDA.Copies = local
				s.CUDA.HighMem = nil
				s.NCCL.Transports = []selftest.Transport{{From: 0, To: 1, Via: "SHM/direct/direct"}}
			},
			want: []string{"fail p2p.status"},
		},
		{
			name: "bar1-below-vram-static-driver-nccl-stall", layout: pcietest.Xeon8GPU, recipe: "xeon-static24.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) { s.Hang = selftest.PhaseNCCL },
			args:   []string{"--deadline", "6s"},
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
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) {
				s.NCCL.Transports[1].Via, s.NCCL.Transports[1].P2P = "SHM/direct/direct", false
			},
			want: []string{"fail nccl.transport"},
		},
		{
			name: "corrupted-peer-copy", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) {
				c := copyOf(t, s, selftest.MethodCE, selftest.DirWrite, true)
				c.Mismatch = &selftest.Mismatch{Offset: 4096, Want: 0x9e3779b1, Got: 0, Words: 1024}
			},
			want: []string{"fail copy.corrupt"},
		},
		{
			name: "bandwidth-above-link", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) {
				c := copyOf(t, s, selftest.MethodCE, selftest.DirWrite, true)
				c.GBps, c.Samples = 128, []float64{128, 128, 128}
			},
			want: []string{"fail copy.overrate"},
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
			mutate: func(t *testing.T, s *fakeScenario, pre *pcie.Result) {
				s.Kmsg = []string{
					"3,2210,91234567,-;AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x3ffffe000 flags=0x0020]",
					"4,2211,91234600,-;NVRM: Xid (PCI:" + pre.GPUs[1].BDF[:10] + "): 79, pid=1234, name=p2pcheck, GPU has fallen off the bus.",
				}
			},
			want: []string{"fail kernel.iommu_fault", "fail kernel.xid"},
		},
		{
			name: "missing-gsp-firmware", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, pre *pcie.Result) {
				s.Kmsg = []string{"3,1001,5123456,-;nvidia " + pre.GPUs[0].BDF + ": Direct firmware load for nvidia/550.163.01/gsp_ga10x.bin failed with error -2"}
			},
			want: []string{"fail kernel.firmware"},
		},
		{
			name: "libcuda-not-module-version", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) {
				s.CUDA.CUDA.CuInit = &selftest.Status{Name: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", Code: 803}
				s.CUDA.CUDA.Devices, s.CUDA.Copies, s.CUDA.HighMem, s.CUDA.CanAccess = nil, nil, nil, nil
				s.NVML.NVML.Init = &selftest.Status{Name: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", Code: 18}
			},
			want: []string{"fail version.mismatch"},
		},
	}
	for _, phase := range []string{selftest.PhasePrecheck, selftest.PhaseNVML, selftest.PhaseCUDA, selftest.PhaseNCCL} {
		cases = append(cases, faultCase{
			name: "hang-in-" + phase, layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			mutate: func(t *testing.T, s *fakeScenario, _ *pcie.Result) { s.Hang = phase },
			args:   []string{"--deadline", "5s"},
			want:   []string{"fail deadline"},
		})
	}
	for _, tc := range cases {
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
	pre, err := pcie.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	s := healthyScenario(t, pre, vram48G)
	if tc.mutate != nil {
		tc.mutate(t, s, pre)
	}
	kmsgPath := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(kmsgPath, []byte("6,1,1,-;boot noise before the run: NVRM: Xid (PCI:0000:01:00): 13, ignored\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{
		"--fake", writeScenario(t, s), "--root", root, "--kmsg", kmsgPath,
		"--recipe", filepath.Join("testdata", tc.recipe), "--modules-json", modulesFile(t, selftest.ModLoaded, 0),
	}, tc.args...)
	start := time.Now()
	r, code, stderr := runCheck(t, nil, args...)
	t.Logf("%s: exit %d in %s", s, code, time.Since(start).Round(time.Millisecond))
	if testing.Verbose() && stderr != "" {
		t.Logf("stderr:\n%s", stderr)
	}
	return r, code
}
