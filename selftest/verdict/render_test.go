package verdict

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// golden compares got with testdata/NAME.golden; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// faultyReport is the 4-GPU box with several things broken at once, the way a bad
// boot looks: one corrupted pair, one slow pair, a copy over the link rate, ACS on,
// an Xid, NCCL on SHM for one pair, and a downtrained link.
func faultyReport() (*selftest.Report, *Expect) {
	r := healthyReport(4)
	e := FromRecipe(healthyRecipe(4))
	corrupt(findCopy(r, 0, 3, selftest.MethodCE, selftest.DirWrite), 0x0ff00000, 4096)
	findCopy(r, 2, 0, selftest.MethodSM, selftest.DirWrite).GBps = 6.6
	findCopy(r, 1, 2, selftest.MethodCE, selftest.DirRead).GBps = 128.4
	findCopy(r, 2, 3, selftest.MethodCE, selftest.DirBidir).Error = "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
	r.GPUs[3].Upstream[0].ACS = &selftest.ACS{Cap: 0x5f, Ctrl: 0x1d, RequestRedirect: true, CompletionRedirect: true}
	r.GPUs[1].Link.CurrentWidth = 8
	r.GPUs[0].Link.CurrentSpeed = "2.5 GT/s PCIe"
	r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: selftest.KEventXid, BDF: "0000:42:00.0", Code: 31, Line: "NVRM: Xid (PCI:0000:42:00): 31, pid=812, Ch 00000008, intr 00000000. MMU Fault: ENGINE CE3 HUBCLIENT_CE1 faulted @ 0x7f03_00000000."})
	delete(r.NCCL.Env, "NCCL_P2P_LEVEL")
	delete(e.Env, "NCCL_P2P_LEVEL")
	setVia(r, 1, 2, "SHM/direct/direct")
	r.NCCL.Sizes[2].BusBW, r.NCCL.BusBWAtMax = 9.1, 9.1
	return r, e
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name   string
		report func() (*selftest.Report, *Expect)
	}{
		{"healthy-4", func() (*selftest.Report, *Expect) { return healthyReport(4), FromRecipe(healthyRecipe(4)) }},
		{"healthy-2-no-recipe", func() (*selftest.Report, *Expect) { return healthyReport(2), nil }},
		{"faulty-4", faultyReport},
		{"stock-driver-2", func() (*selftest.Report, *Expect) {
			r := healthyReport(2)
			setP2P(r, "CNS")
			no := false
			r.Pairs[0].CanAccessPeer = &no
			r.Copies = r.Copies[:2] // the local copies only: no peer access to time
			r.HighMem = []selftest.HighMem{}
			setVia(r, 0, 1, "SHM/direct/direct")
			e := FromRecipe(healthyRecipe(2))
			e.P2P, e.RequireP2P = P2POff, false
			return r, e
		}},
		// The image has peerboot's 550 series; the box ran a stock nvidia.ko of the same
		// version (p2p.mode_missing names it), which also leaves every pair CNS.
		{"stock-driver-patched-image-2", func() (*selftest.Report, *Expect) {
			r := healthyReport(2)
			setP2P(r, "CNS")
			no := false
			r.Pairs[0].CanAccessPeer = &no
			r.Copies = r.Copies[:2]
			r.HighMem = []selftest.HighMem{}
			setVia(r, 0, 1, "SHM/direct/direct")
			r.Modules[0].File, r.Modules[0].KoVersion = "updates/dkms/nvidia.ko", testDriver
			e := FromRecipe(healthyRecipe(2))
			e.ModeLineChips = []string{"AD102"}
			return r, e
		}},
		{"nccl-stall-static-bar1", func() (*selftest.Report, *Expect) {
			r := healthyReport(4)
			e := FromRecipe(healthyRecipe(4))
			e.P2P = P2PStaticBAR1
			r.NCCL = nil
			r.DeadlineExceeded = selftest.PhaseNCCL
			r.Stall = &selftest.Stall{Phase: selftest.PhaseNCCL, AfterMS: 120000, Cause: "ncclCommInitAll did not return"}
			return r, e
		}},
		{"vm-pass", func() (*selftest.Report, *Expect) { return vmReport(), FromRecipe(&recipe.Recipe{}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, e := tt.report()
			Judge(r, e)
			got := selftest.Render(r)
			if selftest.Render(r) != got {
				t.Fatal("Render is not deterministic")
			}
			golden(t, "render-"+tt.name, got)
		})
	}
}

// The summary's short form is unchanged by Render's shared helpers, and a failed copy's
// cell is marked.
func TestRenderMarksFailedCells(t *testing.T) {
	r, e := faultyReport()
	Judge(r, e)
	out := selftest.Render(r)
	for _, want := range []string{"6.6 NODE!", "128.4 NODE!", "error!", "812.5 loc", "24.1 PHB", "\"!\" = the copy has a fail finding",
		"FAIL  copy.corrupt: GPU0->GPU3 ce write", "transports: 8 connection(s), 2 not P2P"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "  INFO  ") < strings.LastIndex(out, "  WARN  ") {
		t.Error("info findings are not listed last")
	}
}

// RenderWidth fits the console: no line passes the width, an 8-GPU matrix splits into
// blocks instead of wrapping mid-cell, and GPUs are named by model.
func TestRenderWidths(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		for _, width := range []int{80, 160} {
			t.Run(fmt.Sprintf("%dgpu-%d", n, width), func(t *testing.T) {
				r := healthyReport(n)
				if n == 8 {
					// One failed cell, so the "!" mark shows in the compact layout too.
					corrupt(findCopy(r, 5, 6, selftest.MethodCE, selftest.DirWrite), 0x0ffff000, 1024)
				}
				Judge(r, FromRecipe(healthyRecipe(n)))
				got := selftest.RenderWidth(r, width)
				for i, line := range strings.Split(got, "\n") {
					if w := utf8.RuneCountInString(line); w > width {
						t.Errorf("line %d is %d columns, more than %d: %q", i+1, w, width, line)
					}
				}
				if !strings.Contains(got, "RTX 4090 48GB") || strings.Contains(got, "10de:2684") {
					t.Errorf("GPUs are not named by model:\n%s", got)
				}
				golden(t, fmt.Sprintf("render-width-%dgpu-%d", n, width), got)
			})
		}
	}
}
