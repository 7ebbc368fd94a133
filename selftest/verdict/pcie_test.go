package verdict

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// want is one finding a pcie rule must make: its status and substrings of its
// subject, message, evidence and hint ("" matches anything; one ending in $ must end
// the finding's text).
type want struct {
	status, subject, msg, ev, hint string
}

func match(got, want string) bool {
	if w, ok := strings.CutSuffix(want, "$"); ok {
		return strings.HasSuffix(got, w)
	}
	return strings.Contains(got, want)
}

// pcieEdge is a healthy report with one thing set at a rule's edge, and every finding
// of that rule's ID the verdict must then hold, in order (none: the rule stays quiet).
type pcieEdge struct {
	name     string
	gpus     int
	noRecipe bool
	mutate   func(r *selftest.Report, e *Expect)
	id       string
	want     []want
}

func runPCIeEdges(t *testing.T, cases []pcieEdge) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := healthyReport(tt.gpus)
			e := FromRecipe(healthyRecipe(tt.gpus))
			if tt.noRecipe {
				e = nil
			}
			tt.mutate(r, e)
			Judge(r, e)
			var got []selftest.Finding
			for _, f := range r.Findings {
				if f.ID == tt.id {
					got = append(got, f)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("%d %s finding(s), want %d:\n%s", len(got), tt.id, len(tt.want), dump(r.Findings))
			}
			for k, w := range tt.want {
				f := got[k]
				if f.Status != w.status || !match(f.Subject, w.subject) || !match(f.Message, w.msg) ||
					!match(f.Evidence, w.ev) || !match(f.Hint, w.hint) {
					t.Errorf("finding %d: %s %q: %s [%s] hint %q\nwant %s %q: ~%q [~%q] hint ~%q",
						k, f.Status, f.Subject, f.Message, f.Evidence, f.Hint, w.status, w.subject, w.msg, w.ev, w.hint)
				}
			}
		})
	}
}

// TestBAR1Edges: bar1.size at each of its bounds. BAR1 equal to the recipe's or to
// VRAM is enough; a size nobody read is no finding; below VRAM, what P2P mode the
// image runs and whether the above-BAR1 probe passed decide how bad it is.
func TestBAR1Edges(t *testing.T) {
	probe := func(r *selftest.Report, gpu, peer int, verified bool, errText string, mm *selftest.Mismatch) {
		r.HighMem = []selftest.HighMem{{GPU: gpu, Peer: peer, BAR1Bytes: testBAR1, VRAMBytes: testVRAM, Verified: verified, Error: errText, Mismatch: mm}}
	}
	below := want{selftest.SevWarn, "GPU1", "GPU1 (0000:02:00.0) BAR1 32GiB < VRAM 49140MiB (NVML): static BAR1 cannot map all of VRAM",
		"0000:02:00.0 resource1 32GiB, VRAM 49140MiB (NVML), driver.p2p=unknown", "dynamic-bar1"}
	runPCIeEdges(t, []pcieEdge{
		{name: "BAR1 unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].BAR1Bytes, r.GPUs[1].NVML.BAR1Total = 0, 0
		}, id: "bar1.size"},
		{name: "BAR1 equal to VRAM on a static-BAR1 driver", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P = P2PStaticBAR1
			for i := range r.GPUs {
				r.GPUs[i].BAR1Bytes = testVRAM
				r.GPUs[i].NVML.BAR1Total = testVRAM
			}
		}, id: "bar1.size"},
		{name: "BAR1 one byte below the recipe's", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.BAR1Bytes = testBAR1 + 1
		}, id: "bar1.size", want: []want{
			{selftest.SevFail, "GPU0", "resizable BAR is not enabled", "0000:01:00.0 resource1 32GiB", "NVreg_EnableResizableBar=1"},
			{selftest.SevFail, "GPU1", "resizable BAR is not enabled", "", ""}}},
		{name: "BAR1 below VRAM, P2P off", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P, e.RequireP2P = P2POff, false
		}, id: "bar1.size", want: []want{
			{selftest.SevInfo, "GPU0", "P2P is off in this image, so it does not matter", "driver.p2p=off", ""},
			{selftest.SevInfo, "GPU1", "P2P is off in this image", "", ""}}},
		{name: "BAR1 below VRAM, P2P off but required", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P = P2POff
		}, id: "bar1.size", want: []want{
			{selftest.SevFail, "GPU0", "the dynamic-BAR1 branch is required", "driver.p2p=off", "dynamic-bar1"},
			{selftest.SevFail, "GPU1", "the dynamic-BAR1 branch is required", "", ""}}},
		// Without a recipe the probe decides, per GPU: one that passed (peer 0 is a
		// peer like any other) is information; one that failed in any way leaves the warning.
		{name: "probe passed with peer 0", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 1, 0, true, "", nil)
		}, id: "bar1.size", want: []want{
			{selftest.SevWarn, "GPU0", "static BAR1 cannot map all of VRAM", "", ""},
			{selftest.SevInfo, "GPU1", "the above-BAR1 probe passed, so the driver maps peers beyond BAR1", "", ""}}},
		{name: "probe of another GPU", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 0, 1, true, "", nil)
		}, id: "bar1.size", want: []want{{selftest.SevInfo, "GPU0", "probe passed", "", ""}, below}},
		{name: "probe not verified", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 1, 0, false, "", nil)
		}, id: "bar1.size", want: []want{{selftest.SevWarn, "GPU0", "", "", ""}, below}},
		{name: "probe with an error", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 1, 0, true, "cuMemcpyPeer: CUDA_ERROR_ILLEGAL_ADDRESS", nil)
		}, id: "bar1.size", want: []want{{selftest.SevWarn, "GPU0", "", "", ""}, below}},
		{name: "probe with a mismatch", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 1, 0, true, "", &selftest.Mismatch{Offset: 64, Want: 1, Got: 2, Words: 1})
		}, id: "bar1.size", want: []want{{selftest.SevWarn, "GPU0", "", "", ""}, below}},
		{name: "probe without a peer", gpus: 2, noRecipe: true, mutate: func(r *selftest.Report, e *Expect) {
			probe(r, 1, -1, true, "", nil)
		}, id: "bar1.size", want: []want{{selftest.SevWarn, "GPU0", "", "", ""}, below}},
	})
}

// TestBAR1LeakEdges: bar1.leak says how much more BAR1 is held after the copies,
// from a byte past the slack on.
func TestBAR1LeakEdges(t *testing.T) {
	runPCIeEdges(t, []pcieEdge{
		{name: "one byte past the slack", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.BAR1[0].UsedAfter = ptr(r.BAR1[0].UsedBefore + bar1LeakSlack + 1)
		}, id: "bar1.leak", want: []want{{selftest.SevWarn, "GPU0", "GPU0 (0000:01:00.0) holds 64.0MiB more BAR1", "used before=2097152 after=69206017 total=34359738368 slack=67108864", "reboot"}}},
		{name: "1 GiB held before, 2 GiB after", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.BAR1[1].UsedBefore, r.BAR1[1].UsedAfter = 1<<30, ptr(int64(2<<30))
		}, id: "bar1.leak", want: []want{{selftest.SevWarn, "GPU1", "holds 1.0GiB more BAR1 after the copies than before (1.0GiB -> 2.0GiB of 32.0GiB)", "", ""}}},
	})
}

// TestLinkEdges: pcie.link at each of its bounds. Widths and speeds nobody read are
// no finding; a link is judged against the port above it when that port's width is
// known, and one port shared by two GPUs is reported once.
func TestLinkEdges(t *testing.T) {
	runPCIeEdges(t, []pcieEdge{
		{name: "current width unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentWidth = 0
		}, id: "pcie.link"},
		{name: "current speed unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed = "Unknown"
		}, id: "pcie.link"},
		{name: "sysfs speed missing, NVML generation unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed, r.GPUs[1].NVML.LinkGen = "", 0
		}, id: "pcie.link"},
		{name: "sysfs speed missing, NVML maximum unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed, r.GPUs[1].NVML.MaxLinkGen = "", 0
		}, id: "pcie.link"},
		{name: "sysfs speed missing, NVML at its maximum", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed = ""
		}, id: "pcie.link"},
		{name: "sysfs speed missing, NVML Gen1 of Gen4", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed, r.GPUs[1].NVML.LinkGen = "", 1
		}, id: "pcie.link", want: []want{{selftest.SevWarn, "GPU1", "link at Gen1 of Gen4 (NVML)", "link_gen=1 max_link_gen=4", "idle"}}},
		{name: "GPU narrow with no port above", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream = []selftest.Bridge{}
			r.GPUs[1].Link.CurrentWidth = 8
		}, id: "pcie.link", want: []want{{selftest.SevWarn, "GPU1", "0000:02:00.0 trained at x8 of x16", "0000:02:00.0 current 16.0 GT/s PCIe x8, max 16.0 GT/s PCIe x16", "reseat"}}},
		{name: "GPU narrow, the port's width unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream[0].Link.MaxWidth = 0
			r.GPUs[1].Link.CurrentWidth = 8
		}, id: "pcie.link", want: []want{{selftest.SevWarn, "GPU1", "trained at x8 of x16", "", ""}}},
		{name: "GPU narrower than its narrow port", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream[0].Link.MaxWidth = 8
			r.GPUs[1].Link.CurrentWidth = 4
		}, id: "pcie.link", want: []want{{selftest.SevFail, "GPU1", "GPU1 (0000:02:00.0) downtrained: 16.0 GT/s PCIe x4 of x16", "", "reseat"}}},
		// A bridge's partner is the link below it; with that one's width unread, a
		// bridge trained narrower than its own maximum is downtrained.
		{name: "bridge narrow, the link below unread", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			l := gen4x16()
			l.CurrentWidth = 4
			r.GPUs[0].Upstream = append([]selftest.Bridge{{BDF: "0000:00:03.0", Link: l}}, r.GPUs[0].Upstream...)
			r.GPUs[0].Upstream[1].Link.MaxWidth = 0
		}, id: "pcie.link", want: []want{{selftest.SevFail, "bridge 0000:00:03.0", "bridge 0000:00:03.0 (above GPU0 (0000:01:00.0)) downtrained", "", ""}}},
		{name: "bridge shared by two GPUs", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			l := gen4x16()
			l.CurrentWidth = 4
			for i := range r.GPUs {
				r.GPUs[i].Upstream = append([]selftest.Bridge{{BDF: "0000:00:03.0", Link: l}}, r.GPUs[i].Upstream...)
			}
		}, id: "pcie.link", want: []want{{selftest.SevFail, "bridge 0000:00:03.0", "(above GPU0 (0000:01:00.0)) downtrained", "", ""}}},
		{name: "the port's speed lower than the card's", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream[0].Link.MaxSpeed = "8.0 GT/s PCIe"
			r.GPUs[1].Upstream[0].Link.CurrentSpeed = "8.0 GT/s PCIe"
			r.GPUs[1].Link.CurrentSpeed = "8.0 GT/s PCIe"
		}, id: "pcie.link"},
		{name: "card at its maximum in a faster slot", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream[0].Link.MaxSpeed = "32.0 GT/s PCIe"
		}, id: "pcie.link"},
	})
}

// TestDisplayEdges: each sign of a display GPU, alone, makes gpu.display, at the
// severity the image's P2P mode gives it; signs that say "off" make none.
func TestDisplayEdges(t *testing.T) {
	on, off := 1, 0
	runPCIeEdges(t, []pcieEdge{
		{name: "NVML display mode alone", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[0].NVML.DisplayMode = &on
		}, id: "gpu.display", want: []want{{selftest.SevInfo, "GPU0", "GPU0 (0000:01:00.0) drives a display (nvml display_mode=1)", "nvml display_mode=1", "headless"}}},
		{name: "every sign, P2P off", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P, e.RequireP2P = P2POff, false
			r.GPUs[1].BootVGA = true
			r.GPUs[1].NVML.DisplayMode, r.GPUs[1].NVML.DisplayActive = &on, &on
		}, id: "gpu.display", want: []want{{selftest.SevInfo, "GPU1", "(boot_vga=1, nvml display_mode=1, nvml display_active=1)", "boot_vga=1 nvml display_mode=1 nvml display_active=1", ""}}},
		{name: "NVML says off", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[0].NVML.DisplayMode, r.GPUs[0].NVML.DisplayActive = &off, &off
		}, id: "gpu.display"},
		{name: "recipe without a P2P mode", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P = ""
			r.GPUs[0].BootVGA = true
		}, id: "gpu.display", want: []want{{selftest.SevWarn, "GPU0", "boot_vga=1", "", ""}}},
	})
}

// TestReplayEdges: one replay is a finding; none, or a counter NVML does not
// support (-1), is not.
func TestReplayEdges(t *testing.T) {
	runPCIeEdges(t, []pcieEdge{
		{name: "one replay", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[0].NVML.ReplayCounter = 1 },
			id: "pcie.replay", want: []want{{selftest.SevWarn, "GPU0", "GPU0 (0000:01:00.0): 1 PCIe replay(s)", "nvmlDeviceGetPcieReplayCounter=1", "reseat"}}},
		{name: "counter not supported", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[0].NVML.ReplayCounter = -1 },
			id: "pcie.replay"},
	})
}

// TestIOMMUEdges: iommu.mode states what is known, and stays quiet when nothing is
// or there are no GPUs to route.
func TestIOMMUEdges(t *testing.T) {
	runPCIeEdges(t, []pcieEdge{
		{name: "healthy passthrough", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {},
			id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU passthrough (ivhd0)", "cmdline: iommu=pt; GPU group types: identity, identity", ""}}},
		{name: "nothing known", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.IOMMU = selftest.IOMMU{} },
			id: "iommu.mode"},
		{name: "no GPUs", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs, r.Pairs, r.Copies, r.HighMem, r.BAR1 = nil, nil, nil, nil, nil
		}, id: "iommu.mode"},
		{name: "active alone", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.IOMMU = selftest.IOMMU{Active: true} },
			id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU mode unknown", "cmdline: none", ""}}},
		{name: "units alone", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.IOMMU = selftest.IOMMU{Units: []string{"dmar0", "dmar1"}} },
			id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU mode unknown (dmar0, dmar1)", "cmdline: none", ""}}},
		{name: "command line alone", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.IOMMU = selftest.IOMMU{Cmdline: []string{"intel_iommu=off"}} },
			id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU mode unknown$", "cmdline: intel_iommu=off$", ""}}},
		{name: "mode alone", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.IOMMU = selftest.IOMMU{Mode: "off"} },
			id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU off$", "cmdline: none", ""}}},
		{name: "translated", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.IOMMU.Mode, r.IOMMU.GroupTypes = "translated", []string{"DMA", "DMA"}
		}, id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU translated", "GPU group types: DMA, DMA", "try iommu=pt"}}},
		{name: "mixed", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.IOMMU.Mode, r.IOMMU.GroupTypes = "mixed", []string{"DMA", "identity"}
		}, id: "iommu.mode", want: []want{{selftest.SevInfo, "iommu", "IOMMU mixed", "", "try iommu=pt"}}},
	})
}

// TestACSEdges: acs.redirect names each redirecting port on a pair's path once,
// whether the pair lists it or the port's registers show it, and names a listed
// port it has no registers for by its address alone.
func TestACSEdges(t *testing.T) {
	rr := func() *selftest.ACS { return &selftest.ACS{Cap: 0x5f, Ctrl: 0x05, RequestRedirect: true} }
	runPCIeEdges(t, []pcieEdge{
		{name: "listed and redirecting", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[0].Upstream[0].ACS = rr()
			r.Pairs[0].ACSOn = []string{testPorts[0]}
		}, id: "acs.redirect", want: []want{{selftest.SevWarn, "GPU0-GPU1", "ACS redirect on at 0000:00:01.1; peer", "0000:00:01.1 ctrl=0x0005 RR", "pci=disable_acs_redir=0000:00:01.1"}}},
		{name: "listed, no registers known", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.Pairs[0].ACSOn = []string{"0000:00:07.0"}
		}, id: "acs.redirect", want: []want{{selftest.SevWarn, "GPU0-GPU1", "at 0000:00:07.0;", "0000:00:07.0", "disable_acs_redir=0000:00:07.0"}}},
		{name: "port without ACS listed", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Upstream[0].ACS = nil
			r.Pairs[0].ACSOn = []string{testPorts[1]}
		}, id: "acs.redirect", want: []want{{selftest.SevWarn, "GPU0-GPU1", "at 0000:00:01.2;", "0000:00:01.2", ""}}},
		{name: "redirecting port off the path", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[0].Upstream[0].ACS = rr()
			r.Pairs[0].Path = []string{testPorts[1]}
		}, id: "acs.redirect"},
		{name: "two redirecting ports", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.GPUs[0].Upstream[0].ACS = rr()
			r.GPUs[1].Upstream[0].ACS = &selftest.ACS{Cap: 0x7f, Ctrl: 0x20, EgressControl: true}
		}, id: "acs.redirect", want: []want{{selftest.SevWarn, "GPU0-GPU1", "at 0000:00:01.1, 0000:00:01.2;",
			"0000:00:01.1 ctrl=0x0005 RR; 0000:00:01.2 ctrl=0x0020 EC", "disable_acs_redir=0000:00:01.1;0000:00:01.2"}}},
	})
}

// TestP2PStatusEdges: p2p.status and p2p.cuda. The unpatched-driver finding needs
// every asked pair CNS both ways; any other pair not OK both ways is its own finding,
// hinted by the letter that is not OK; pairs NVML was not asked about count nowhere.
func TestP2PStatusEdges(t *testing.T) {
	no := false
	runPCIeEdges(t, []pcieEdge{
		{name: "CNS one way only", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PRead = "CNS" },
			id: "p2p.status", want: []want{{selftest.SevFail, "GPU0-GPU1", "GPU0 (0000:01:00.0)-GPU1 (0000:02:00.0): NVML P2P read CNS, write OK", "GPU0-GPU1 r=CNS w=OK", "chipset not supported"}}},
		{name: "CNS read, write unasked", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PRead, r.Pairs[0].P2PWrite = "CNS", "" },
			id: "p2p.status", want: []want{{selftest.SevFail, "GPU0-GPU1", "NVML P2P read CNS, write ?", "r=CNS w=?", "chipset not supported"}}},
		{name: "read unasked, write GNS", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PRead, r.Pairs[0].P2PWrite = "", "GNS" },
			id: "p2p.status", want: []want{{selftest.SevFail, "GPU0-GPU1", "read ?, write GNS", "", "GPU not supported"}}},
		{name: "DRK", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PWrite = "DRK" },
			id: "p2p.status", want: []want{{selftest.SevFail, "GPU0-GPU1", "write DRK", "", "registry key"}}},
		{name: "unknown letter", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PRead = "U" },
			id: "p2p.status", want: []want{{selftest.SevFail, "GPU0-GPU1", "read U", "", "NVML could not tell"}}},
		{name: "no pair asked", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].P2PRead, r.Pairs[0].P2PWrite = "", "" },
			id: "p2p.status"},
		{name: "one pair CNS, one unasked", gpus: 3, mutate: func(r *selftest.Report, e *Expect) {
			setP2P(r, "")
			r.Pairs[0].P2PRead, r.Pairs[0].P2PWrite = "CNS", "CNS"
		}, id: "p2p.status", want: []want{{selftest.SevFail, "all pairs", "NVML reports CNS for every pair (1 pair(s))", "GPU0-GPU1 r=CNS w=CNS", "stock driver"}}},
		{name: "P2P off, one pair TNS", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			e.P2P, e.RequireP2P = P2POff, false
			r.Pairs[0].P2PWrite = "TNS"
		}, id: "p2p.status", want: []want{{selftest.SevInfo, "GPU0-GPU1", "write TNS; P2P is off in this image, so it is not expected", "", "topology not supported"}}},
		// Evidence lists four pairs and counts the rest.
		{name: "every pair CNS", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { setP2P(r, "CNS") },
			id: "p2p.status", want: []want{{selftest.SevFail, "all pairs", "(6 pair(s))",
				"GPU0-GPU1 r=CNS w=CNS; GPU0-GPU2 r=CNS w=CNS; GPU0-GPU3 r=CNS w=CNS; GPU1-GPU2 r=CNS w=CNS; ... 2 more", "driver.p2p"}}},
	})
	runPCIeEdges(t, []pcieEdge{
		{name: "CUDA not asked", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[0].CanAccessPeer = nil }, id: "p2p.cuda"},
		{name: "CUDA false, NVML write not OK", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.Pairs[0].CanAccessPeer, r.Pairs[0].P2PWrite = &no, "TNS"
		}, id: "p2p.cuda"},
		{name: "CUDA false, NVML read not OK", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
			r.Pairs[0].CanAccessPeer, r.Pairs[0].P2PRead = &no, "TNS"
		}, id: "p2p.cuda"},
	})
}

// TestNVLinked: the pair is found from either end.
func TestNVLinked(t *testing.T) {
	r := healthyReport(3)
	r.Pairs[1].P2PNVLink = "OK" // GPU0-GPU2
	for _, c := range []struct {
		a, b int
		want bool
	}{{0, 2, true}, {2, 0, true}, {0, 1, false}, {1, 0, false}, {0, 5, false}} {
		if got := nvlinked(r, c.a, c.b); got != c.want {
			t.Errorf("nvlinked(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
