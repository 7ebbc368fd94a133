package verdict

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/kmsg"
)

func TestHealthyReportsPass(t *testing.T) {
	for _, n := range []int{2, 4} {
		r := healthyReport(n)
		Judge(r, FromRecipe(healthyRecipe(n)))
		if r.Verdict != selftest.Pass {
			t.Errorf("%d GPUs: verdict %s, want pass:\n%s", n, r.Verdict, dump(r.Findings))
		}
		for _, f := range r.Findings {
			if f.Status != selftest.SevInfo {
				t.Errorf("%d GPUs: healthy report has %s %s: %s", n, f.Status, f.ID, f.Message)
			}
		}
	}
}

// ExpectFrom carries every recipe field the rules read.
func TestExpectFrom(t *testing.T) {
	rc := healthyRecipe(4)
	e := FromRecipe(rc)
	if e.GPUs != 4 || e.GPUModel != "RTX 4090" || e.VRAMBytes != testVRAM || e.BAR1Bytes != testBAR1 || len(e.GPUNUMA) != 4 ||
		e.DriverVersion != testDriver || e.P2P != P2PDynamicBAR1 || !e.RequireP2P || e.MinBusBWGBps != 12 ||
		e.Thresholds[selftest.TopoNODE].UnidirGBps != 18 || e.Env["NCCL_P2P_LEVEL"] != "SYS" || e.DriverParams["nvidia"]["NVreg_EnableResizableBar"] != "1" {
		t.Errorf("ExpectFrom lost a field: %+v", e)
	}
	if FromRecipe(nil) != nil {
		t.Error("FromRecipe(nil) is not nil")
	}
	if e.ModeLineChips != nil {
		t.Errorf("a recipe without peerboot's series expects mode lines for %v", e.ModeLineChips)
	}
}

// modeLineChips: which GPUs the image's driver names in a mode line, by recipe.
func TestModeLineChips(t *testing.T) {
	series := []string{"0001-nv-reg-resize-bar1-by-default.patch", "0002-rm-static-bar1-p2p.patch"}
	for _, tt := range []struct {
		name string
		d    recipe.Driver
		want []string
	}{
		{"550 series", recipe.Driver{Version: "550.163.01", P2P: P2PDynamicBAR1, Patches: series}, []string{"AD102"}},
		{"580 series", recipe.Driver{Version: "580.142", P2P: P2PStaticBAR1, Patches: series}, []string{"GA102", "AD102", "GB202"}},
		{"595 series", recipe.Driver{Version: "595.45.04", P2P: P2PDynamicBAR1, Patches: series}, []string{"GA102", "AD102", "GB202"}},
		{"p2p off", recipe.Driver{Version: "595.45.04", P2P: P2POff, Patches: series}, nil},
		{"p2p unset", recipe.Driver{Version: "595.45.04", Patches: series}, nil},
		{"own patches only", recipe.Driver{Version: "595.45.04", P2P: P2PDynamicBAR1, Patches: []string{"./p2p/0001-fork.patch"}}, nil},
		{"no patches", recipe.Driver{Version: "595.45.04", P2P: P2PStaticBAR1}, nil},
		{"535 has no series", recipe.Driver{Version: "535.261.03", P2P: P2PStaticBAR1, Patches: series}, nil},
		{"no version", recipe.Driver{P2P: P2PStaticBAR1, Patches: series}, nil},
	} {
		if got := modeLineChips(tt.d); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The chips modeLineChips assumes per branch are the chips each series' patches log
// for: the IsGA102/IsAD102/IsGB202 tests on the lines the series adds, in every
// driver/patches/<version>/ whose patches write the mode line (and none where no patch
// does), and every recipe in recipes/ with a P2P driver expects the lines.
func TestModeLineChipsMatchSeries(t *testing.T) {
	dirs, err := os.ReadDir("../../driver/patches")
	if err != nil {
		t.Fatal(err)
	}
	isChip := regexp.MustCompile(`Is(GA102|AD102|GB202)\(pGpu\)`)
	seen := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, _ := filepath.Glob(filepath.Join("../../driver/patches", d.Name(), "*.patch"))
		var added strings.Builder
		for _, f := range files {
			for _, l := range strings.Split(readFile(t, f), "\n") {
				if strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "+++") {
					added.WriteString(l + "\n")
				}
			}
		}
		var want []string
		if strings.Contains(added.String(), kmsg.P2PTag) {
			for _, c := range []string{"GA102", "AD102", "GB202"} {
				for _, m := range isChip.FindAllStringSubmatch(added.String(), -1) {
					if m[1] == c {
						want = append(want, c)
						break
					}
				}
			}
			seen++
		}
		got := modeLineChips(recipe.Driver{Version: d.Name(), P2P: P2PDynamicBAR1, Patches: []string{filepath.Base(files[0])}})
		if !slices.Equal(got, want) {
			t.Errorf("driver/patches/%s: the series logs mode lines for %v, modeLineChips says %v", d.Name(), want, got)
		}
	}
	if seen < 3 {
		t.Errorf("%d series write the mode line, want the 550, 580 and 595 ones", seen)
	}
	recipes, _ := filepath.Glob("../../recipes/*.toml")
	p2p := 0
	for _, p := range recipes {
		res, err := recipe.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if rc := &res.Recipe; rc.Driver.P2P != P2POff {
			p2p++
			if len(FromRecipe(rc).ModeLineChips) == 0 {
				t.Errorf("%s: driver.p2p = %s, but the self-test expects no mode line from its driver", p, rc.Driver.P2P)
			}
		}
	}
	if p2p < 4 {
		t.Errorf("%d recipes in recipes/ with a P2P driver, want the 4 platform recipes", p2p)
	}
}

// faultRows is the fault catalogue: one row per fault, each a healthy report with one
// thing broken. docs/selftest-findings.md names the row that covers each finding ID.
type faultRow struct {
	name   string
	gpus   int                                 // 2 or 4
	mutate func(r *selftest.Report, e *Expect) // e is the recipe's expectation; nil it with noRecipe
	id     string
	status string
	msg    string   // a substring of that finding's message
	hint   string   // a substring of that finding's hint
	also   []string // the IDs of the other warn or fail findings the fault makes
	ev     string   // a substring of that finding's evidence
}

var faultRows = []faultRow{
	// p2p.status
	{name: "all pairs CNS with a patched driver", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { setP2P(r, "CNS") },
		id: "p2p.status", status: selftest.SevFail, msg: "unpatched driver: NVML reports CNS for every pair", hint: "driver.p2p"},
	// The recipe already has the patched driver: "build the patched driver" is no step;
	// the driver that ran is not the image's.
	{name: "all pairs CNS: the patched image's driver did not run", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { setP2P(r, "CNS") },
		id: "p2p.status", status: selftest.SevFail, msg: "unpatched driver: NVML reports CNS for every pair", hint: "the nvidia.ko that ran is not the image's"},
	{name: "all pairs CNS with p2p off", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		setP2P(r, "CNS")
		e.P2P, e.RequireP2P = P2POff, false
	}, id: "p2p.status", status: selftest.SevInfo, msg: "not expected"},
	{name: "all pairs CNS with p2p off but require_p2p", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		setP2P(r, "CNS")
		e.P2P = P2POff
	}, id: "p2p.status", status: selftest.SevFail, msg: "CNS for every pair", also: []string{"bar1.size"}},
	{name: "one pair TNS", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { r.Pairs[4].P2PWrite = "TNS" },
		id: "p2p.status", status: selftest.SevFail, msg: "GPU1 (0000:02:00.0)-GPU3 (0000:42:00.0): NVML P2P read OK, write TNS", hint: "topology not supported"},
	{name: "pairs CNS without a recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { setP2P(r, "CNS") },
		id: "p2p.status", status: selftest.SevWarn, msg: "CNS for every pair (1 pair(s))"},
	// p2p.cuda
	{name: "NVML OK but CUDA cannot access peer", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		no := false
		r.Pairs[0].CanAccessPeer = &no
	}, id: "p2p.cuda", status: selftest.SevFail, msg: "cuDeviceCanAccessPeer is false", hint: "capability bit"},
	// bar1.size
	{name: "BAR1 below VRAM on a static-BAR1 driver", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { e.P2P = P2PStaticBAR1 },
		id: "bar1.size", status: selftest.SevFail, msg: "static BAR1 cannot map all of VRAM; the dynamic-BAR1 branch is required", hint: "dynamic-bar1"},
	{name: "BAR1 below VRAM without a recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.HighMem = []selftest.HighMem{} },
		id: "bar1.size", status: selftest.SevWarn, msg: "BAR1 32GiB < VRAM 49140MiB (NVML)"},
	{name: "resizable BAR off", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[1].BAR1Bytes = 256 << 20 },
		id: "bar1.size", status: selftest.SevFail, msg: "GPU1 (0000:02:00.0) BAR1 is 256MiB, recipe platform.bar1 = 32GiB", hint: "NVreg_EnableResizableBar=1"},
	{name: "resizable BAR off and not asked for", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[0].BAR1Bytes = 256 << 20
		e.DriverParams = nil
	}, id: "bar1.size", status: selftest.SevFail, msg: "resizable BAR is not enabled", hint: "the recipe does not set driver.params.nvidia.NVreg_EnableResizableBar"},
	// acs.redirect
	{name: "ACS redirect on a root port", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].Upstream[0].ACS = &selftest.ACS{Cap: 0x5f, Ctrl: 0x1d, RequestRedirect: true, CompletionRedirect: true, EgressControl: false}
	}, id: "acs.redirect", status: selftest.SevWarn, msg: "ACS redirect on at 0000:00:01.2", hint: "pci=disable_acs_redir=0000:00:01.2"},
	{name: "ACS redirect listed by the pair", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		r.Pairs[1].ACSOn = []string{testPorts[0], testPorts[2]}
	}, id: "acs.redirect", status: selftest.SevWarn, hint: "pci=disable_acs_redir=0000:00:01.1;0000:40:01.1"},
	// nccl.transport
	{name: "NCCL SHM on a NODE pair without NCCL_P2P_LEVEL", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		delete(r.NCCL.Env, "NCCL_P2P_LEVEL")
		delete(e.Env, "NCCL_P2P_LEVEL")
		setVia(r, 1, 2, "SHM/direct/direct")
	}, id: "nccl.transport", status: selftest.SevFail, msg: "GPU1 (0000:02:00.0)-GPU2 (0000:41:00.0): NCCL connected 2 channel(s) via SHM/direct/direct", hint: "set NCCL_P2P_LEVEL=SYS"},
	{name: "NCCL ran without the recipe's NCCL_P2P_LEVEL", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		delete(r.NCCL.Env, "NCCL_P2P_LEVEL")
		setVia(r, 1, 2, "SHM/direct/direct")
	}, id: "nccl.transport", status: selftest.SevFail, hint: "NCCL ran without it"},
	{name: "NCCL SHM on a PIX pair", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Pairs[0].Topology, r.Pairs[0].NVMLTopology = selftest.TopoPIX, selftest.TopoPIX
		setVia(r, 0, 1, "SHM/direct/direct")
	}, id: "nccl.transport", status: selftest.SevFail, hint: "p2p.status"},
	{name: "NCCL log names no channel", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { r.NCCL.Transports = []selftest.Transport{} },
		id: "nccl.transport", status: selftest.SevFail, msg: "names no channel connection", hint: "NCCL_DEBUG_SUBSYS"},
	{name: "NCCL over NET without require_p2p", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.RequireP2P = false
		setVia(r, 0, 1, "NET/Socket/0")
	}, id: "nccl.transport", status: selftest.SevWarn, msg: "via NET/Socket/0"},
	// bar1.*
	{name: "BAR1 not given back", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		after := int64(2<<20 + 4<<30)
		r.BAR1[1].UsedAfter = &after
	}, id: "bar1.leak", status: selftest.SevWarn, msg: "GPU1 (0000:02:00.0) holds 4.0GiB more BAR1 after the copies than before (2.0MiB -> 4.0GiB of 32.0GiB)", hint: "did not unmap peer windows"},
	// copy.*
	{name: "corrupted peer write", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		corrupt(findCopy(r, 0, 3, selftest.MethodCE, selftest.DirWrite), 0x0ff00000, 4096)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU0->GPU3 ce write corrupted data: 4096 word(s) differ, first at byte 0xff00000 (want 0x9e3779b1, got 0x00000000)", hint: "already runs the dynamic-BAR1 driver"},
	// On a static-BAR1 image the same corruption asks for the dynamic-BAR1 driver; on
	// the dynamic-BAR1 image (the row above) it must not ask for what it has.
	{name: "corrupted peer write, static BAR1", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.P2P = P2PStaticBAR1
		corrupt(findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite), 0x1000, 1)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU0->GPU1 ce write corrupted data", hint: "use driver.p2p = \"dynamic-bar1\"", also: []string{"bar1.size"}},
	{name: "corrupted SM read", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		corrupt(findCopy(r, 1, 0, selftest.MethodCE, selftest.DirRead), 64, 1)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU1->GPU0 ce read"},
	{name: "copy faster than the link", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite).GBps = 128
	},
		id: "copy.overrate", status: selftest.SevFail, msg: "copies are not landing where they should"},
	{name: "bidir copy faster than twice the link", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { findCopy(r, 0, 1, selftest.MethodCE, selftest.DirBidir).GBps = 70 },
		id: "copy.overrate", status: selftest.SevFail, msg: "above the link's 63.0 GB/s"},
	{name: "slow peer write", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		findCopy(r, 2, 0, selftest.MethodSM, selftest.DirWrite).GBps = 6.6
	},
		id: "copy.bandwidth", status: selftest.SevFail, msg: "GPU2->GPU0 sm write 6.6 GB/s, below the NODE threshold of 18.0 GB/s"},
	{name: "slow bidir", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		findCopy(r, 0, 1, selftest.MethodCE, selftest.DirBidir).GBps = 25.7
	},
		id: "copy.bandwidth", status: selftest.SevFail, msg: "below the PHB threshold of 32.0 GB/s"},
	{name: "corrupted local copy", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		corrupt(findCopy(r, 1, 1, selftest.MethodCE, selftest.DirLocal), 8192, 2)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU1 local ce copy corrupted data", hint: "no peer path involved"},
	{name: "corrupted injected on purpose", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): CorruptOnce test hook: after the ce write copy GPU 0 -> GPU 1, the word at byte offset 100 ...", "")
		c := findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite)
		c.Verified, c.Mismatch = false, &selftest.Mismatch{Offset: 100, Want: 5, Got: ^uint32(5), Words: 1}
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU0->GPU1 ce write", hint: "--inject-corruption inverted on purpose"},
	{name: "real corruption beside an injected one", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): CorruptOnce test hook: after the ce write copy GPU 0 -> GPU 1, the word at byte offset 100 ...", "")
		corrupt(findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite), 100, 1)
		corrupt(findCopy(r, 1, 0, selftest.MethodCE, selftest.DirRead), 64, 1)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU1->GPU0 ce read", hint: "peer data landed in the wrong place"},
	{name: "corrupted SM peer write", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		corrupt(findCopy(r, 1, 0, selftest.MethodSM, selftest.DirWrite), 64, 1)
	}, id: "copy.corrupt", status: selftest.SevFail, msg: "GPU1->GPU0 sm write", hint: "loads and stores through the peer mapping (the path NCCL uses)"},
	{name: "injected corruption not detected", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): CorruptOnce test hook: after the ce write copy GPU 0 -> GPU 1, the word at byte offset 100 ...", "")
	}, id: "test.undetected", status: selftest.SevFail, msg: "no copy reported a mismatch", hint: "broken"},
	{name: "injected corruption not detected, another copy slow", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): CorruptOnce test hook: after the ce write copy GPU 0 -> GPU 1, the word at byte offset 100 ...", "")
		findCopy(r, 1, 0, selftest.MethodCE, selftest.DirWrite).GBps = 6.6
	}, id: "test.undetected", status: selftest.SevFail, msg: "no copy reported a mismatch", hint: "broken", also: []string{"copy.bandwidth"}},
	{name: "unverified copy with verification on", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		findCopy(r, 0, 1, selftest.MethodSM, selftest.DirWrite).Verified = false
	}, id: "copy.unverified", status: selftest.SevFail, msg: "GPU0->GPU1 sm write was not verified though verification is on"},
	{name: "unverified copies with selftest.verify off", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.NoVerify = true
		for k := range r.Copies {
			r.Copies[k].Verified = false
		}
	}, id: "copy.unverified", status: selftest.SevWarn, msg: "selftest.verify = false"},
	{name: "copy error", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		findCopy(r, 0, 1, selftest.MethodSM, selftest.DirWrite).Error = "cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
	}, id: "copy.error", status: selftest.SevFail, msg: "GPU0->GPU1 sm write failed", hint: "unmapped address"},
	// pcie.link
	{name: "GPU downtrained to x8", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[1].Link.CurrentWidth = 8 },
		id: "pcie.link", status: selftest.SevFail, msg: "GPU1 (0000:02:00.0) downtrained: 16.0 GT/s PCIe x8 of x16", hint: "reseat"},
	{name: "root port downtrained", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[0].Upstream = append([]selftest.Bridge{{BDF: "0000:00:03.0", Link: selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 4, MaxWidth: 16}}}, r.GPUs[0].Upstream...)
	}, id: "pcie.link", status: selftest.SevFail, msg: "bridge 0000:00:03.0 (above GPU0 (0000:01:00.0)) downtrained"},
	{name: "slot narrower than the card", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].Link.CurrentWidth = 8
		r.GPUs[1].Upstream[0].Link.MaxWidth, r.GPUs[1].Upstream[0].Link.CurrentWidth = 8, 8
	}, id: "pcie.link", status: selftest.SevWarn, msg: "the port above is only x8 wide"},
	{name: "link at idle speed", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[0].Link.CurrentSpeed = "2.5 GT/s PCIe" },
		id: "pcie.link", status: selftest.SevWarn, msg: "link at 2.5 GT/s PCIe of 16 GT/s", hint: "idle"},
	{name: "link at idle speed, the port's speed unknown", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[0].Link.CurrentSpeed, r.GPUs[0].Upstream[0].Link.MaxSpeed = "8.0 GT/s PCIe", ""
	}, id: "pcie.link", status: selftest.SevWarn, msg: "link at 8.0 GT/s PCIe of 16 GT/s", hint: "idle"},
	{name: "link generation from NVML", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].Link.CurrentSpeed, r.GPUs[1].NVML.LinkGen = "", 3
	}, id: "pcie.link", status: selftest.SevWarn, msg: "GPU1 (0000:02:00.0) link at Gen3 of Gen4 (NVML)", ev: "nvml link_gen=3 max_link_gen=4"},
	// gpu.display
	{name: "display GPU on a static-BAR1 driver", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.P2P = P2PStaticBAR1
		r.GPUs[1].BootVGA = true
	}, id: "gpu.display", status: selftest.SevFail, msg: "GPU1 (0000:02:00.0) drives a display (boot_vga=1)", hint: "headless", also: []string{"bar1.size"}},
	{name: "display GPU from NVML without a recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		on := 1
		r.GPUs[0].NVML.DisplayActive = &on
	}, id: "gpu.display", status: selftest.SevWarn, msg: "nvml display_active=1"},
	// pcie.replay
	{name: "PCIe replays", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[1].NVML.ReplayCounter = 12 },
		id: "pcie.replay", status: selftest.SevWarn, msg: "GPU1 (0000:02:00.0): 12 PCIe replay(s)"},
	// kernel.*
	{name: "Xid 79", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: selftest.KEventXid, BDF: "0000:02:00.0", Code: 79, Line: "NVRM: Xid (PCI:0000:02:00): 79, pid=1234, GPU has fallen off the bus."})
	}, id: "kernel.xid", status: selftest.SevFail, msg: "Xid 79 on GPU1 (0000:02:00.0)", hint: "fell off the bus"},
	{name: "IOMMU fault", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: selftest.KEventIOMMU, BDF: "0000:01:00.0", Line: "AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000e address=0x38000000000 flags=0x0020]"})
	}, id: "kernel.iommu_fault", status: selftest.SevFail, msg: "IOMMU fault on GPU0"},
	{name: "GSP firmware missing", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: selftest.KEventFirmware, Line: "nvidia 0000:01:00.0: Direct firmware load for nvidia/550.163.01/gsp_ga10x.bin failed with error -2"})
	}, id: "kernel.firmware", status: selftest.SevFail, hint: "firmware-nvidia-gsp of driver.version (550.163.01)"},
	{name: "NVRM error", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.KernelEvents = append(r.KernelEvents, selftest.KEvent{Kind: selftest.KEventNVRM, Line: "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:667)"})
	}, id: "kernel.nvrm", status: selftest.SevFail, msg: "NVRM error"},
	// version.mismatch
	{name: "cuInit driver mismatch", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.CUDA.CuInit = &selftest.Status{Name: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", Code: selftest.CUDAErrorSystemMismatch}
	}, id: "version.mismatch", status: selftest.SevFail, msg: "libcuda and the loaded nvidia.ko", also: []string{"cuda.init"}},
	{name: "NVML lib-RM mismatch", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.NVML.Init = &selftest.Status{Name: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", Code: selftest.NVMLLibRMVersionMismat}
	}, id: "version.mismatch", status: selftest.SevFail, msg: "libnvidia-ml and the loaded nvidia.ko", also: []string{"nvml.init"}},
	{name: "NVML driver version differs from the recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.NVML.DriverVersion = "550.54.15" },
		id: "version.mismatch", status: selftest.SevFail, msg: "NVML reports driver 550.54.15, recipe driver.version = 550.163.01"},
	{name: "module version differs from the recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.Modules[0].Version = "550.54.15" },
		id: "version.mismatch", status: selftest.SevFail, msg: "module nvidia is version 550.54.15"},
	{name: "module file version differs though nothing loaded", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Modules[0].Result, r.Modules[0].Errno, r.Modules[0].Version, r.Modules[0].KoVersion = selftest.ModENODEV, 19, "", "550.54.15"
	}, id: "version.mismatch", status: selftest.SevFail, msg: "nvidia.ko in the image is version 550.54.15 (ENODEV (errno 19)), recipe driver.version 550.163.01", also: []string{"driver.nvidia"}},
	{name: "libcuda file version differs from the recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.CUDA.LibraryFile = "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"
	}, id: "version.mismatch", status: selftest.SevFail, msg: "libcuda is /usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03 (version 535.261.03), recipe driver.version 550.163.01"},
	// deadline
	{name: "NCCL stall on a static-BAR1 driver", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		e.P2P = P2PStaticBAR1
		r.NCCL = nil
		r.DeadlineExceeded = selftest.PhaseNCCL
		r.Stall = &selftest.Stall{Phase: selftest.PhaseNCCL, AfterMS: 120000, Cause: "ncclCommInitAll did not return"}
	}, id: "deadline", status: selftest.SevFail, msg: "stalled in nccl after 120.0s", hint: "NCCL init on a card whose BAR1 is smaller than VRAM with a static-BAR1 driver: use the dynamic-BAR1 branch", also: []string{"bar1.size"}},
	{name: "CUDA stall on a dynamic-BAR1 driver", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Stall = &selftest.Stall{Phase: selftest.PhaseCUDA, AfterMS: 900, Cause: "cuMemcpyAsync"}
	}, id: "deadline", status: selftest.SevFail, msg: "stalled in cuda after 900ms: cuMemcpyAsync", hint: "Xid or IOMMU"},
	// nccl.*
	{name: "NCCL wrong data", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { r.NCCL.Sizes[2].Wrong = 1024 },
		id: "nccl.data", status: selftest.SevFail, msg: "all-reduce of 1GiB over 4 ranks: 1024 element(s)"},
	{name: "NCCL busbw low", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { r.NCCL.BusBWAtMax = 3.2 },
		id: "nccl.busbw", status: selftest.SevFail, msg: "3.2 GB/s at 1GiB, below selftest.min_busbw_gbps = 12.0"},
	{name: "NCCL error", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.NCCL.Error = "ncclCommInitAll: unhandled system error (2)" },
		id: "nccl.error", status: selftest.SevFail, msg: "unhandled system error"},
	{name: "NCCL without kernels for the GPU arch", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		for i := range r.CUDA.Devices {
			r.CUDA.Devices[i].Name, r.CUDA.Devices[i].CC = "NVIDIA GeForce RTX 5090", "12.0"
		}
		r.NCCL.Version, r.NCCL.LibraryFile = 22907, "/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7"
		r.NCCL.Error = "ncclCommInitAll(4): unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1): Cuda failure 'no kernel image is available for execution on the device'"
	}, id: "nccl.arch", status: selftest.SevFail, msg: "NCCL 2.29.7 (/usr/lib/x86_64-linux-gnu/libnccl.so.2.29.7) has no kernels that run on RTX 5090 (sm_120)", hint: "NCCL 2.25.1 or later built with CUDA 12.8"},
	{name: "NCCL launch: named symbol not found", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.NCCL.Version = 22203
		r.NCCL.Error = "ncclAllReduce(rank 0, 1048576 B): unhandled cuda error (ncclResult 1): Cuda failure 500 'named symbol not found'"
	}, id: "nccl.arch", status: selftest.SevFail, msg: "NCCL 2.22.3 has no kernels that run on", hint: "stops at sm_90"},
	// highmem.copy
	{name: "above-BAR1 probe error", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.HighMem[0].Error, r.HighMem[0].Verified = "cuMemcpyPeerAsync: CUDA_ERROR_MAP_FAILED (205)", false
	}, id: "highmem.copy", status: selftest.SevFail, msg: "above-BAR1 probe on GPU0 (0000:01:00.0) (peer GPU1 (0000:02:00.0)) failed", hint: "under the dynamic-BAR1 driver (driver.p2p = \"dynamic-bar1\"): its per-allocation windows are not working"},
	{name: "above-BAR1 probe error, static BAR1", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.P2P = P2PStaticBAR1
		r.HighMem[0].Error, r.HighMem[0].Verified = "cuMemcpyPeerAsync: CUDA_ERROR_MAP_FAILED (205)", false
	}, id: "highmem.copy", status: selftest.SevFail, msg: "above-BAR1 probe on GPU0 (0000:01:00.0) (peer GPU1 (0000:02:00.0)) failed", hint: "need per-allocation BAR1 windows: use the dynamic-BAR1 driver", also: []string{"bar1.size"}},
	{name: "above-BAR1 probe corrupt", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.HighMem[1].Mismatch, r.HighMem[1].Verified = &selftest.Mismatch{Offset: 4096, Want: 7, Got: 0, Words: 1 << 20}, false
	}, id: "highmem.copy", status: selftest.SevFail, msg: "corrupted data"},
	{name: "above-BAR1 probe unverified", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.HighMem[1].Verified = false },
		id: "highmem.copy", status: selftest.SevFail, msg: "above-BAR1 probe on GPU1 (0000:02:00.0) (peer GPU0 (0000:01:00.0)) was not verified"},
	// gpus.*, iommu, cuda.ptx
	{name: "GPU missing", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { e.GPUs = 8 },
		id: "gpus.count", status: selftest.SevFail, msg: "found 4 NVIDIA GPU(s) in sysfs, recipe platform.gpus = 8"},
	{name: "other GPU model", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[1].NVML.Name = "NVIDIA GeForce RTX 3090" },
		id: "gpus.model", status: selftest.SevWarn, msg: `GPU1 (0000:02:00.0) is "NVIDIA GeForce RTX 3090"`},
	// A 24 GB RTX 4090 among the recipe's 48 GB cards: same NVML name, half the memory.
	{name: "GPU memory below the recipe's", gpus: 2, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[1].NVML.FBTotal = 24564 << 20 },
		id: "gpus.vram", status: selftest.SevWarn, msg: "GPU1 (0000:02:00.0) has 24564MiB of memory (NVML), recipe platform.vram = 49140MiB", hint: "another model or memory size"},
	// The diagnostic OverrideFbSize (DOMAIN.md: hides VRAM above ~30 GiB so static BAR1
	// fits, never for production) left in the driver's registry dwords.
	{name: "GPU memory hidden by OverrideFbSize", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		for i := range r.GPUs {
			r.GPUs[i].NVML.FBTotal = 30720 << 20
		}
		r.Modules[0].Parameters = map[string]string{"NVreg_RegistryDwords": "RMForceStaticBar1=1;OverrideFbSize=30720"}
	}, id: "gpus.vram", status: selftest.SevWarn, msg: "GPU1 (0000:02:00.0) has 30GiB of memory (NVML)", hint: "OverrideFbSize", ev: "OverrideFbSize=30720"},
	// GPU3 is in sysfs, but nvidia.ko did not bring it up (an RTX 5090 under a 550
	// driver among RTX 4090s, RmInitAdapter failed, vfio-pci holds it): NVML and CUDA
	// list three GPUs, and every phase ran on those three.
	{name: "GPU the driver did not bring up", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		dropGPU(r, 3)
		r.GPUs[3].Device = "0x2b85"
		r.Modules[0].KernelLog = []string{"NVRM: The NVIDIA GPU 0000:42:00.0 (PCI ID: 10de:2b85) installed in this system is not supported by the NVIDIA 550.163.01 driver release."}
	}, id: "gpus.down", status: selftest.SevFail, msg: "GPU3 (0000:42:00.0) is in sysfs (device 0x2b85) but neither CUDA nor NVML knows it", hint: "570 or later", ev: "sysfs 0000:42:00.0 device 0x2b85; CUDA lists 3 device(s), NVML 3; NVRM: The NVIDIA GPU 0000:42:00.0 (PCI ID: 10de:2b85) installed in this system is not supported by the NVIDIA 550.163.01"},
	// The same, run by hand without a recipe: a container given one of its host's
	// GPUs sees every GPU in sysfs, so a warning, not a FAIL.
	{name: "GPU unknown to the libraries without a recipe", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		dropGPU(r, 3)
		r.GPUs[3].BAR1Bytes = 64 << 30 // no bar1.size warning beside it
	},
		id: "gpus.down", status: selftest.SevWarn, msg: "GPU3 (0000:42:00.0) is in sysfs", hint: "container or CUDA_VISIBLE_DEVICES"},
	{name: "GPU on another NUMA node", gpus: 4, mutate: func(r *selftest.Report, e *Expect) { r.GPUs[3].NUMANode = 1 },
		id: "gpus.numa", status: selftest.SevWarn, msg: "GPU3 (0000:42:00.0) is on NUMA node 1"},
	{name: "IOMMU translated", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.IOMMU.Mode, r.IOMMU.Cmdline, r.IOMMU.GroupTypes = "translated", []string{}, []string{"DMA-FQ", "DMA-FQ"}
	}, id: "iommu.mode", status: selftest.SevInfo, msg: "IOMMU translated (ivhd0)"},
	{name: "PTX load failed", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.CUDA.PTX = &selftest.Status{Name: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", Code: 222}
		r.CUDA.PTXLog = "ptxas fatal   : Unsupported .version 7.0\nmore"
	}, id: "cuda.ptx", status: selftest.SevFail, msg: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)", hint: "older than the PTX ISA",
		ev: "(222): ptxas fatal   : Unsupported .version 7.0"},
	{name: "managed memory refused", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Step: selftest.StepSetup, Refused: "cuMemAdvise(SET_ACCESSED_BY, GPU 1): CUDA_ERROR_NOT_SUPPORTED"}}
	}, id: "peermem.refused", status: selftest.SevWarn, msg: "managed memory of GPU0 used by GPU1: the driver declined it", hint: "cudaMallocManaged"},
	{name: "VMM peer mapping refused", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemVMM, Owner: 1, Peer: 0, Bytes: 32 << 20, Step: selftest.StepSetup, Refused: "cuMemSetAccess(GPU 1 read-write, GPU 0 read-write): CUDA_ERROR_INVALID_DEVICE"}}
	}, id: "peermem.refused", status: selftest.SevFail, msg: "vmm memory of GPU1 used by GPU0", hint: "P2P/CUMEM"},
	{name: "VMM local form refused", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemVMM, Owner: 0, Peer: 0, Bytes: 32 << 20, Step: selftest.StepSetup, Refused: "cuMemCreate(32 MiB, pinned on GPU 0): CUDA_ERROR_NOT_SUPPORTED"}}
	}, id: "peermem.refused", status: selftest.SevWarn, msg: "vmm memory of GPU0 (local form)"},
	{name: "managed memory corrupted", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 1, Peer: 0, Bytes: 32 << 20, Step: selftest.StepPeerWrite, Mismatch: &selftest.Mismatch{Offset: 4096, Want: 1, Got: 2, Words: 3}}}
	}, id: "peermem.corrupt", status: selftest.SevFail, msg: "managed memory of GPU1 used by GPU0: 3 word(s) wrong in the peer write, first at byte 0x1000", hint: "landed in the wrong place"},
	{name: "managed memory corrupted on purpose", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): Corrupt test hook: in the managed check GPU 0 -> GPU 1, after the peer's write ...", "")
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Step: selftest.StepPeerWrite, Mismatch: &selftest.Mismatch{Offset: 4096, Want: 1, Got: 2, Words: 1}}}
	}, id: "peermem.corrupt", status: selftest.SevFail, msg: "managed memory of GPU0 used by GPU1", hint: "--inject-corruption inverted on purpose"},
	{name: "managed corruption injected but not detected", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): Corrupt test hook: in the managed check GPU 0 -> GPU 1, after the peer's write ...", "")
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Verified: true}}
	}, id: "test.undetected", status: selftest.SevFail, msg: "no copy reported a mismatch (nor a peer-memory check)"},
	{name: "managed memory MMU fault", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Step: selftest.StepPeerRead, Error: "cuStreamSynchronize on GPU 1: CUDA_ERROR_ILLEGAL_ADDRESS"}}
	}, id: "peermem.error", status: selftest.SevFail, msg: "managed memory of GPU0 used by GPU1 failed in the peer read", hint: "Xid 31"},
	{name: "peer memory not verified", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.PeerMem = []selftest.PeerMem{{Kind: selftest.MemIPC, Owner: 0, Peer: 1, Bytes: 32 << 20}}
	}, id: "peermem.unverified", status: selftest.SevWarn, msg: "ipc memory of GPU0 used by GPU1: not verified"},
	{name: "static and dynamic GPUs in one box", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		for i := range r.GPUs {
			r.GPUs[i].P2PMode, r.GPUs[i].P2PModeLine = selftest.P2PModeDynamic, "NVRM: peerboot-p2p: bar1-mode gpu=0 pci="+r.GPUs[i].BDF+" mode=dynamic why=bar1-below-fb"
		}
		r.GPUs[2].P2PMode, r.GPUs[2].P2PModeLine = selftest.P2PModeStatic, "NVRM: peerboot-p2p: bar1-mode gpu=2 pci="+r.GPUs[2].BDF+" mode=static why=forced"
	}, id: "p2p.mode_mixed", status: selftest.SevFail, msg: "is in dynamic BAR1 mode and GPU2", hint: "decision table"},
	{name: "GPU without BAR1 P2P", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].P2PMode, r.GPUs[1].P2PModeLine = selftest.P2PModeNone, "NVRM: peerboot-p2p: bar1-mode gpu=1 pci="+r.GPUs[1].BDF+" mode=none why=small-bar1"
	}, id: "p2p.mode_none", status: selftest.SevFail, msg: "the driver set up no BAR1 P2P (mode none, small-bar1)", hint: "Resizable BAR"},
	// Without a recipe the mode line is still the one finding that names why a GPU has
	// no BAR1 P2P (its copies fail with "see p2p.status" only): it warns, as the other
	// P2P rules do without a recipe.
	{name: "GPU without BAR1 P2P without a recipe", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].P2PMode, r.GPUs[1].P2PModeLine = selftest.P2PModeNone, "NVRM: peerboot-p2p: bar1-mode gpu=1 pci="+r.GPUs[1].BDF+" mode=none why=small-bar1"
	}, id: "p2p.mode_none", status: selftest.SevWarn, msg: "the driver set up no BAR1 P2P (mode none, small-bar1)", hint: "Resizable BAR"},
	// bar1-below-fb under an image that already has driver.p2p = "dynamic-bar1": the
	// driver that ran has no dynamic BAR1 (patch 0003), so "use dynamic-bar1" is no step.
	{name: "GPU without BAR1 P2P, bar1-below-fb on a dynamic-BAR1 image", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		r.GPUs[1].P2PMode, r.GPUs[1].P2PModeLine = selftest.P2PModeNone, "NVRM: peerboot-p2p: bar1-mode gpu=1 pci="+r.GPUs[1].BDF+" mode=none why=bar1-below-fb"
	}, id: "p2p.mode_none", status: selftest.SevFail, msg: "(mode none, bar1-below-fb)", hint: "the nvidia.ko that ran has no dynamic BAR1"},
	// p2p.mode_missing: the image carries peerboot's 550 series (AD102 lines); the box ran
	// a stock nvidia.ko of the same version (a DKMS build, say), which logs none.
	{name: "stock driver on a patched image", gpus: 2, mutate: func(r *selftest.Report, e *Expect) {
		e.ModeLineChips = []string{"AD102"}
		r.Modules[0].File, r.Modules[0].KoVersion = "updates/dkms/nvidia.ko", testDriver
	}, id: "p2p.mode_missing", status: selftest.SevFail, msg: "no peerboot-p2p mode line for GPU0 (0000:01:00.0) AD102, GPU1 (0000:02:00.0) AD102: the image's nvidia.ko (driver " + testDriver + " with peerboot's P2P series, driver.p2p = dynamic-bar1)", hint: "stock (unpatched) nvidia driver"},
	{name: "mode line lost for one GPU", gpus: 4, mutate: func(r *selftest.Report, e *Expect) {
		e.ModeLineChips = []string{"GA102", "AD102", "GB202"}
		for i := range 3 {
			r.GPUs[i].P2PMode, r.GPUs[i].P2PModeLine = selftest.P2PModeDynamic, "NVRM: peerboot-p2p: bar1-mode gpu=0 pci="+r.GPUs[i].BDF+" mode=dynamic why=bar1-below-fb"
		}
	}, id: "p2p.mode_missing", status: selftest.SevFail, msg: "AD102, though 3 other GPU(s) have one", hint: "kernel log most likely lost these lines"},
}

// Two H200s bridged by NVLink measured 394 GB/s per direction on a Gen5 x16 PCIe path
// (issue 10's run): the PCIe ceiling must not apply to a pair NVML says is NVLinked,
// and must still apply to the same figure without NVLink.
func TestNVLinkPairNotOverrate(t *testing.T) {
	for _, nvlink := range []string{"OK", "NS", ""} {
		r := healthyReport(2)
		r.Pairs[0].P2PNVLink = nvlink
		findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite).GBps = 394.4
		Judge(r, FromRecipe(healthyRecipe(2)))
		got := false
		for _, f := range r.Findings {
			got = got || f.ID == "copy.overrate"
		}
		if got != (nvlink != "OK") {
			t.Errorf("p2p_nvlink %q: copy.overrate found = %v", nvlink, got)
		}
	}
}

// A copy within one GPU is judged as one, whether its record says so by its
// direction (local) or by its source and destination (an older p2pcheck):
// neither is held to the link's rate or the recipe's peer thresholds.
func TestLocalCopyNotJudgedAsPeer(t *testing.T) {
	for _, c := range []struct {
		name     string
		src, dst int
		dir      string
	}{
		{"same GPU, direction write", 1, 1, selftest.DirWrite},
		{"two GPUs, direction local", 0, 1, selftest.DirLocal},
	} {
		r := healthyReport(2)
		cp := findCopy(r, 1, 1, selftest.MethodCE, selftest.DirLocal)
		cp.Src, cp.Dst, cp.Direction = c.src, c.dst, c.dir
		cp.GBps, cp.LinkGBps = 0.5, 1 // far below every threshold, and above the "link"
		Judge(r, FromRecipe(healthyRecipe(2)))
		for _, f := range r.Findings {
			if f.Status != selftest.SevInfo {
				t.Errorf("%s: %s %s: %s", c.name, f.Status, f.ID, f.Message)
			}
		}
		// Corrupted, it is a local copy's corruption: no peer path involved.
		r = healthyReport(2)
		cp = findCopy(r, 1, 1, selftest.MethodCE, selftest.DirLocal)
		cp.Src, cp.Dst, cp.Direction = c.src, c.dst, c.dir
		corrupt(cp, 64, 1)
		Judge(r, FromRecipe(healthyRecipe(2)))
		hint := ""
		for _, f := range r.Findings {
			if f.ID == "copy.corrupt" {
				hint = f.Hint
			}
		}
		if !strings.Contains(hint, "no peer path involved") {
			t.Errorf("%s, corrupted: hint %q, want a local copy's", c.name, hint)
		}
	}
}

// Each bound is inclusive on the good side, as its rule says: a copy exactly
// 5% over its link, exactly at the recipe's minimum rate, an all-reduce exactly at
// min_busbw_gbps, a write exactly at max_latency_us, passes; one step past it does not.
func TestBoundaries(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(r *selftest.Report, e *Expect, past bool)
		id   string
	}{
		{"overrate", func(r *selftest.Report, e *Expect, past bool) {
			c := findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite)
			c.GBps = overrateFactor * c.LinkGBps
			if past {
				c.GBps = math.Nextafter(c.GBps, math.Inf(1))
			}
		}, "copy.overrate"},
		{"bandwidth", func(r *selftest.Report, e *Expect, past bool) {
			c := findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite)
			c.GBps = e.Thresholds[r.PairTopology(0, 1)].UnidirGBps
			if past {
				c.GBps = math.Nextafter(c.GBps, 0)
			}
		}, "copy.bandwidth"},
		{"busbw", func(r *selftest.Report, e *Expect, past bool) {
			r.NCCL.BusBWAtMax = e.MinBusBWGBps
			if past {
				r.NCCL.BusBWAtMax = math.Nextafter(e.MinBusBWGBps, 0)
			}
		}, "nccl.busbw"},
		{"latency", func(r *selftest.Report, e *Expect, past bool) {
			withLatencies(r)
			boundLatency(e, 2)
			latencyOf(r, 0, 1).US = 2
			if past {
				latencyOf(r, 0, 1).US = math.Nextafter(2, 3)
			}
		}, "latency.slow"},
		{"vram", func(r *selftest.Report, e *Expect, past bool) {
			r.GPUs[1].NVML.FBTotal = e.VRAMBytes - e.VRAMBytes/vramSlackDiv
			if past {
				r.GPUs[1].NVML.FBTotal--
			}
		}, "gpus.vram"},
	} {
		for _, past := range []bool{false, true} {
			r := healthyReport(2)
			e := FromRecipe(healthyRecipe(2))
			c.set(r, e, past)
			Judge(r, e)
			got := false
			for _, f := range r.Findings {
				got = got || f.ID == c.id
			}
			if got != past {
				t.Errorf("%s: past the bound %v, %s found %v:\n%s", c.name, past, c.id, got, dump(r.Findings))
			}
		}
	}
}

// noRecipe marks rows judged without a recipe (e == nil).
var noRecipeRows = map[string]bool{"BAR1 below VRAM without a recipe": true, "pairs CNS without a recipe": true, "display GPU from NVML without a recipe": true, "GPU without BAR1 P2P without a recipe": true, "GPU unknown to the libraries without a recipe": true}

func TestFaultCatalogue(t *testing.T) {
	for _, tt := range faultRows {
		t.Run(tt.name, func(t *testing.T) {
			r := healthyReport(tt.gpus)
			e := FromRecipe(healthyRecipe(tt.gpus))
			if noRecipeRows[tt.name] {
				e = nil
			}
			if tt.mutate != nil {
				tt.mutate(r, e)
			}
			Judge(r, e)
			// Every row is a report p2pcheck could write: what report show and serve accept.
			if err := selftest.Validate(r); err != nil {
				t.Errorf("the fixture is no valid report: %v", err)
			}
			var hit *selftest.Finding
			for k := range r.Findings {
				f := &r.Findings[k]
				if f.ID == tt.id && f.Status == tt.status && strings.Contains(f.Message, tt.msg) && strings.Contains(f.Hint, tt.hint) && strings.Contains(f.Evidence, tt.ev) {
					hit = f
					break
				}
			}
			if hit == nil {
				t.Fatalf("no %s %s finding with message ~%q, hint ~%q and evidence ~%q:\n%s", tt.status, tt.id, tt.msg, tt.hint, tt.ev, dump(r.Findings))
			}
			if hit.Status != selftest.SevInfo && (hit.Evidence == "" || hit.Hint == "" || hit.Subject == "") {
				t.Errorf("%s lacks evidence, hint or subject: %+v", tt.id, *hit)
			}
			// One fault, its findings: nothing else warns or fails (a rule that fires
			// on healthy parts of a report is as wrong as one that misses the fault).
			for _, f := range r.Findings {
				if f.Status != selftest.SevInfo && f.ID != tt.id && !slices.Contains(tt.also, f.ID) {
					t.Errorf("EXTRA %s %s: %s", f.Status, f.ID, f.Message)
				}
			}
			wantVerdict := selftest.Pass
			for _, f := range r.Findings {
				if f.Status == selftest.SevFail {
					wantVerdict = selftest.Fail
					if f.Hint == "" {
						t.Errorf("fail finding %s has no hint", f.ID)
					}
				}
			}
			if tt.status == selftest.SevFail && r.Verdict != selftest.Fail || r.Verdict != wantVerdict {
				t.Errorf("verdict %s with a %s %s finding", r.Verdict, tt.status, tt.id)
			}
		})
	}
}

// Every finding ID the rules can produce is in the docs table, and every row named
// there exists.
func TestFindingsDocCoversCatalogue(t *testing.T) {
	doc := readFile(t, "../../docs/selftest-findings.md")
	for _, tt := range faultRows {
		if !strings.Contains(doc, "`"+tt.id+"`") {
			t.Errorf("docs/selftest-findings.md does not list %s", tt.id)
		}
	}
	names := map[string]bool{}
	for _, tt := range faultRows {
		names[tt.name] = true
	}
	used := map[string]bool{}
	for _, part := range strings.Split(doc, "`TestFaultCatalogue/")[1:] {
		name, _, _ := strings.Cut(part, "`")
		used[name] = true
		if !names[name] {
			t.Errorf("docs/selftest-findings.md names row %q, which TestFaultCatalogue lacks", name)
		}
	}
	for name := range names {
		if !used[name] {
			t.Errorf("TestFaultCatalogue row %q is not in docs/selftest-findings.md", name)
		}
	}
	cases := map[string]bool{}
	for _, c := range verdictCases {
		cases[c.name] = true
	}
	for _, part := range strings.Split(doc, "`TestVerdict/")[1:] {
		name, _, _ := strings.Cut(part, "`")
		if !cases[name] {
			t.Errorf("docs/selftest-findings.md names TestVerdict case %q, which does not exist", name)
		}
	}
	// Every row of the finding tables cites a test in its last column.
	rows := 0
	for i, line := range strings.Split(doc, "\n") {
		// Finding rows start with their ID in backticks (lower case); other tables do not.
		if !strings.HasPrefix(line, "| `") || len(line) < 4 || line[3] < 'a' || line[3] > 'z' {
			continue
		}
		rows++
		cells := strings.Split(strings.TrimSuffix(strings.TrimSpace(line), "|"), " | ")
		last := cells[len(cells)-1]
		if len(cells) < 5 || !(strings.Contains(last, "`TestFaultCatalogue/") || strings.Contains(last, "`TestVerdict/") || strings.Contains(last, "`e2e/")) {
			t.Errorf("docs/selftest-findings.md:%d: row cites no test: %s", i+1, line)
		}
	}
	if rows < 30 {
		t.Errorf("only %d finding rows found in the doc", rows)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// corrupt marks copy c the way p2pcheck reports a failed data check.
func corrupt(c *selftest.Copy, offset, words int64) {
	c.Verified = false
	c.Mismatch = &selftest.Mismatch{Offset: offset, Want: 0x9e3779b1, Got: 0, Words: words}
}

func setP2P(r *selftest.Report, letter string) {
	for k := range r.Pairs {
		r.Pairs[k].P2PRead, r.Pairs[k].P2PWrite = letter, letter
	}
}

// setVia makes every channel between ranks a and b go through via.
func setVia(r *selftest.Report, a, b int, via string) {
	found := false
	for k := range r.NCCL.Transports {
		t := &r.NCCL.Transports[k]
		if (t.From == a && t.To == b) || (t.From == b && t.To == a) {
			t.Via, t.P2P, found = via, false, true
		}
	}
	if !found {
		for ch := 0; ch < 2; ch++ {
			r.NCCL.Transports = append(r.NCCL.Transports, selftest.Transport{Channel: ch, From: a, To: b, Via: via})
		}
	}
}

// BAR1 that comes back, or grows by no more than the slack, is no finding; nor is a
// figure that was not read after the copies.
func TestBAR1WithinSlack(t *testing.T) {
	for _, after := range []*int64{nil, ptr(int64(2 << 20)), ptr(int64(2<<20 + bar1LeakSlack)), ptr(int64(1 << 20))} {
		r := healthyReport(2)
		r.BAR1[0].UsedAfter = after
		Judge(r, FromRecipe(healthyRecipe(2)))
		for _, f := range r.Findings {
			if f.ID == "bar1.leak" {
				t.Errorf("used after %v: %s", after, f.Message)
			}
		}
	}
}

// A failed copy's hint follows its CUDA error, named or numbered alone.
func TestCopyErrorHints(t *testing.T) {
	for msg, hint := range map[string]string{
		"cuMemcpyPeerAsync: CUDA_ERROR_MAP_FAILED":                  "broken-P2P-mapping error",
		"cuMemcpyPeerAsync: error (205)":                            "broken-P2P-mapping error",
		"cuCtxEnablePeerAccess: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED": "refused peer access",
		"cuCtxEnablePeerAccess: error (217)":                        "refused peer access",
		"cuCtxEnablePeerAccess: CUDA_ERROR_TOO_MANY_PEERS":          "peer hardware resources are exhausted",
		"cuCtxEnablePeerAccess: error (711)":                        "peer hardware resources are exhausted",
		"cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS":                "touched an unmapped address",
		"cuLaunchKernel: error (700)":                               "touched an unmapped address",
		"cuLaunchKernel: CUDA_ERROR_LAUNCH_TIMEOUT (702)":           "see kernel_events and dmesg",
	} {
		r := healthyReport(2)
		c := findCopy(r, 0, 1, selftest.MethodCE, selftest.DirWrite)
		c.Error, c.Verified = msg, false
		Judge(r, FromRecipe(healthyRecipe(2)))
		found := false
		for _, f := range r.Findings {
			if f.ID == "copy.error" {
				found = true
				if !strings.Contains(f.Hint, hint) {
					t.Errorf("%q: hint %q, want one containing %q", msg, f.Hint, hint)
				}
			}
		}
		if !found {
			t.Errorf("%q: no copy.error finding", msg)
		}
	}
}

// What sysfs or NVML did not say, or said is fine, is no finding: an unread
// BAR1, a BAR1 as large as VRAM, BAR1 use that was high before the copies and
// stayed so, a link width or speed not read, NVML's link generation at its
// maximum or not read.
func TestQuietWhenUnknownOrFine(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(r *selftest.Report, e *Expect)
	}{
		{"BAR1 not read", func(r *selftest.Report, e *Expect) { r.GPUs[0].BAR1Bytes, r.GPUs[0].NVML.BAR1Total = 0, 0 }},
		{"BAR1 as large as VRAM, static BAR1", func(r *selftest.Report, e *Expect) {
			e.P2P = P2PStaticBAR1
			for i := range r.GPUs {
				r.GPUs[i].BAR1Bytes = *r.GPUs[i].VRAMBytes
			}
		}},
		{"BAR1 use high before and after", func(r *selftest.Report, e *Expect) {
			r.BAR1[1].UsedBefore, r.BAR1[1].UsedAfter = 1<<30, ptr(int64(1<<30))
		}},
		{"link width not read", func(r *selftest.Report, e *Expect) { r.GPUs[0].Link.CurrentWidth = 0 }},
		{"link speed not read", func(r *selftest.Report, e *Expect) { r.GPUs[0].Link.CurrentSpeed = "" }},
		{"NVML link generation not read", func(r *selftest.Report, e *Expect) {
			r.GPUs[0].Link.CurrentSpeed, r.GPUs[0].NVML.LinkGen = "", 0
		}},
		// nvidia.ko is judged by its own record, not the first module listed.
		{"a skipped module listed before nvidia", func(r *selftest.Report, e *Expect) {
			r.Modules = append([]selftest.Module{{Name: "ecc", Result: selftest.ModSkipped}}, r.Modules...)
		}},
		{"nvidia listed as another module's dependency too", func(r *selftest.Report, e *Expect) {
			r.Modules = append([]selftest.Module{{Name: "nvidia", RequiredBy: "nvidia-uvm", Result: selftest.ModError, Error: "already loading"}}, r.Modules...)
		}},
		{"NVML link generation at its maximum", func(r *selftest.Report, e *Expect) {
			r.GPUs[1].Link.CurrentSpeed = ""
		}},
		// No source tells GPU1's memory: gpus.vram has nothing to compare.
		{"GPU memory not read", func(r *selftest.Report, e *Expect) {
			r.GPUs[1].NVML.FBTotal, r.GPUs[1].VRAMBytes = 0, nil
			if d := r.DeviceOf(1); d != nil {
				d.MemBytes = 0
			}
		}},
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		c.set(r, e)
		Judge(r, e)
		for _, f := range r.Findings {
			if f.Status != selftest.SevInfo {
				t.Errorf("%s: %s %s: %s", c.name, f.Status, f.ID, f.Message)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// dropGPU makes GPU i of a healthy report one the driver never brought up: sysfs has
// it, NVML and CUDA do not, and no phase measured it.
func dropGPU(r *selftest.Report, i int) {
	r.GPUs[i].NVML, r.GPUs[i].CUDA = nil, nil
	r.CUDA.Devices = slices.DeleteFunc(r.CUDA.Devices, func(d selftest.CUDADevice) bool { return d.Ordinal == i })
	r.Copies = slices.DeleteFunc(r.Copies, func(c selftest.Copy) bool { return c.Src == i || c.Dst == i })
	r.HighMem = slices.DeleteFunc(r.HighMem, func(h selftest.HighMem) bool { return h.GPU == i })
	for k := range r.HighMem {
		if r.HighMem[k].Peer == i {
			r.HighMem[k].Peer = 0
		}
	}
	r.BAR1 = slices.DeleteFunc(r.BAR1, func(u selftest.BAR1Usage) bool { return u.GPU == i })
	for k := range r.Pairs {
		if p := &r.Pairs[k]; p.A == i || p.B == i {
			p.P2PRead, p.P2PWrite, p.CanAccessPeer, p.NVMLTopology = "", "", nil, ""
		}
	}
	r.NCCL.Ranks--
	r.NCCL.Transports = slices.DeleteFunc(r.NCCL.Transports, func(t selftest.Transport) bool { return t.From == i || t.To == i })
}

// bdfInLine finds a GPU's address in a kernel line in the forms the kernel and
// NVRM print it (kmsg's parser), and never another GPU's.
func TestBDFInLine(t *testing.T) {
	for _, c := range []struct {
		line, bdf string
		want      bool
	}{
		{"NVRM: GPU 0000:42:00.0: RmInitAdapter failed!", "0000:42:00.0", true},
		{"NVRM: GPU at PCI:0000:42:00: GPU-uuid", "0000:42:00.0", true},
		{"nvidia 0000:42:00.0: probe with driver nvidia failed with error -1", "0000:42:00.0", true},
		{"NVRM: GPU 0000:41:00.0: RmInitAdapter failed!", "0000:42:00.0", false},
		{"NVRM: loading NVIDIA UNIX Open Kernel Module", "0000:42:00.0", false},
		{"NVRM: loading NVIDIA UNIX Open Kernel Module", "", false},
		{"NVRM: The NVIDIA GPU 0000:42:00.0 (PCI ID: 10de:2b85)", "0000:42:00.0", true},
	} {
		if got := bdfInLine(c.line, c.bdf); got != c.want {
			t.Errorf("bdfInLine(%q, %q) = %v, want %v", c.line, c.bdf, got, c.want)
		}
	}
}
