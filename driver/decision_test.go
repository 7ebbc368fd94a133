package driver

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The BAR1 mode rule of patches/README.md ("The decision") as a small model,
// and tests that hold each series' patch text to it: a series that stops
// forcing static BAR1 on a GPU whose BAR1 holds its client-visible FB (the
// RTX 5090 case), adds a term to the rule the model does not know, or maps a
// dynamic window without a page-size flag fails here, without a GPU.

const (
	kib = uint64(1) << 10
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

// bar1GPU is what the rule looks at, in bytes.
type bar1GPU struct {
	fbAddrSpace uint64 // Ram.fbAddrSpaceSizeMb << 20: what NVIDIA's AUTO rule counts
	clientFB    uint64 // memmgrGetClientFbAddrSpaceSize: what the static window maps (580/595)
	usableFB    uint64 // Ram.fbUsableMemSize: what 550's kbusIsBar1P2PCapable_GH100 counts
	bar1        uint64 // kbusGetPciBarSize(BAR1)
	console     uint64 // console BAR1 mapping preserved at offset 0 (0 when headless)
	mailbox     uint64 // mailbox BAR1 space (0 while BAR1 P2P is the type: no mailbox is reserved)
	userd       uint64 // USERD size × channels in the system (AUTO's and the forced rule's reservation)
}

func alignUp(v, a uint64) uint64   { return (v + a - 1) / a * a }
func alignDown(v, a uint64) uint64 { return v / a * a }

// bar1VA is BAR1's mappable length as kbusInitBar1_GM107 stashes it
// (mappableLength = apertureLength − 1 − 4 KiB: the last small page is
// never handed out, the host-overfetch WAR).
func (g bar1GPU) bar1VA() uint64 { return g.bar1 - 1 - 4*kib }

// The terms of the forced rule, keyed by the C expression each one is in
// _kbusPeerbootForceStaticBar1_GM107. modelRequired adds them up; the test
// of the patch text evaluates the C expression through this same table, so
// a term in the C that is not here fails, and a term missing there changes
// its decisions.
var forcedTerms = map[string]func(g bar1GPU) uint64{
	"windowStart": func(g bar1GPU) uint64 { return alignUp(g.console+g.mailbox, 512*mib) },
	"windowSize":  func(g bar1GPU) uint64 { return alignDown(g.clientFB, 2*mib) },
	"((NvU64)userdSize * kfifoGetMaxChannelsInSystem(pGpu, pKernelFifo))": func(g bar1GPU) uint64 { return g.userd },
	"(16 * RM_PAGE_SIZE)": func(bar1GPU) uint64 { return 64 * kib }, // MMIO priv, then doorbell
}

// modelForced: the series' rule (580/595) where AUTO refused.
func modelForced(g bar1GPU) bool {
	required := forcedTerms["windowStart"](g) + forcedTerms["windowSize"](g) + g.userd + 64*kib + 64*kib
	return alignDown(g.bar1VA(), 2*mib) >= required
}

// modelAuto: NVIDIA's AUTO rule, kbusIsStaticBar1Supported_TU102 (580.142,
// 595.45.04): whole FB address space + USERD + MMIO priv + doorbell +
// console + mailbox + padding to 512 MiB when console or mailbox exists.
func modelAuto(g bar1GPU) bool {
	required := alignUp(g.fbAddrSpace, 2*mib) + g.userd + 64*kib + 64*kib + g.console + g.mailbox
	if g.console != 0 || g.mailbox != 0 {
		required += 512*mib - (g.console+g.mailbox)%(512*mib)
	}
	return alignDown(g.bar1VA(), 2*mib) >= required
}

// model550: kbusIsBar1P2PCapable_GH100 as 550.163.01 binds it for AD102
// (bar1VASize = eheap rangeHi + 1: BAR1 less the 4 KiB WAR page).
func model550(g bar1GPU) bool {
	va := g.bar1 - 4*kib
	return va >= 128*kib && va-128*kib >= alignUp(g.usableFB, 2*mib)
}

// modelMode is the decision of patches/README.md for a GPU of one of the
// series' chips with BAR1 P2P the type in effect, RMForceStaticBar1 unset
// and the dynamic patch (0003) in the series.
func modelMode(branch string, g bar1GPU) (mode, why string) {
	if branch == "550.163.01" {
		if model550(g) {
			return "static", "auto"
		}
	} else {
		if modelAuto(g) {
			return "static", "auto"
		}
		if modelForced(g) {
			return "static", "forced"
		}
	}
	if g.bar1 < gib {
		return "none", "small-bar1"
	}
	return "dynamic", "bar1-below-fb"
}

// Boards of the decision table. FB address space and usable FB are
// nominal; the client-visible FB is the address space less RM's reserved
// region at the top, taken as 300 MiB here (the real figure is in the mode
// line's fb_mib); USERD as 2048 channels × 512 B.
func board(vram, bar1, console uint64) bar1GPU {
	return bar1GPU{
		fbAddrSpace: vram, clientFB: vram - 300*mib, usableFB: vram - 500*mib,
		bar1: bar1, console: console, userd: 2048 * 512,
	}
}

func TestBar1ModeDecisionTable(t *testing.T) {
	cases := []struct {
		name   string
		g      bar1GPU
		branch string
		mode   string
		why    string
	}{
		{"RTX 4090 24 GB, 32 GiB BAR1", board(24*gib, 32*gib, 0), "550.163.01", "static", "auto"},
		{"RTX 4090 24 GB, 32 GiB BAR1", board(24*gib, 32*gib, 0), "595.45.04", "static", "auto"},
		{"RTX 4090 24 GB holding the console", board(24*gib, 32*gib, 8*mib), "580.142", "static", "auto"},
		{"RTX 4090 48 GB, 32 GiB BAR1", board(48*gib, 32*gib, 0), "550.163.01", "dynamic", "bar1-below-fb"},
		{"RTX 4090 48 GB, 32 GiB BAR1", board(48*gib, 32*gib, 0), "595.45.04", "dynamic", "bar1-below-fb"},
		{"RTX 4090, ReBAR off", board(24*gib, 256*mib, 0), "580.142", "none", "small-bar1"},
		{"RTX 3090, 32 GiB BAR1", board(24*gib, 32*gib, 0), "580.142", "static", "auto"},
		{"RTX 3090, BAR1 capped at 16 GiB", board(24*gib, 16*gib, 0), "595.45.04", "dynamic", "bar1-below-fb"},
		{"RTX 5090, 32 GiB BAR1", board(32*gib, 32*gib, 0), "580.142", "static", "forced"},
		{"RTX 5090, 32 GiB BAR1", board(32*gib, 32*gib, 0), "595.45.04", "static", "forced"},
		{"RTX 5090 holding the console", board(32*gib, 32*gib, 8*mib), "595.45.04", "dynamic", "bar1-below-fb"},
		{"RTX PRO 6000, 128 GiB BAR1", board(96*gib, 128*gib, 0), "595.45.04", "static", "auto"},
	}
	for _, c := range cases {
		mode, why := modelMode(c.branch, c.g)
		if mode != c.mode || why != c.why {
			t.Errorf("%s on %s: model says %s (%s), the decision table says %s (%s)", c.name, c.branch, mode, why, c.mode, c.why)
		}
	}
}

// The property the issue asks for: on 580/595, a GPU whose BAR1 holds its
// client-visible FB at the window's start plus RM's reservations is static,
// whatever AUTO says; one whose client FB exceeds BAR1 never is; and the
// forced rule only widens AUTO (never refuses what AUTO takes).
func TestBar1ModeCoversFBMeansStatic(t *testing.T) {
	for _, bar1 := range []uint64{256 * mib, gib, 8 * gib, 16 * gib, 32 * gib, 64 * gib} {
		for fb := uint64(4 * gib); fb <= 96*gib; fb += 512 * mib {
			for _, console := range []uint64{0, 8 * mib, 600 * mib} {
				for _, reserved := range []uint64{2 * mib, 300 * mib, 1200 * mib} {
					g := bar1GPU{fbAddrSpace: fb, clientFB: fb - reserved, bar1: bar1, console: console, userd: 2048 * 512}
					mode, _ := modelMode("595.45.04", g)
					fits := alignUp(console, 512*mib)+alignDown(g.clientFB, 2*mib)+g.userd+128*kib <= alignDown(g.bar1VA(), 2*mib)
					if fits && mode != "static" {
						t.Fatalf("%+v: BAR1 holds the client FB and the reservations, mode %s", g, mode)
					}
					if g.clientFB > bar1 && mode == "static" {
						t.Fatalf("%+v: client FB larger than BAR1, mode static", g)
					}
					if modelAuto(g) && !modelForced(g) {
						t.Fatalf("%+v: AUTO takes it, the forced rule would not", g)
					}
				}
			}
		}
	}
}

// patchLines returns, per file, the lines a patch adds ("+" lines), and the
// lines it removes.
func patchLines(data string) (added, removed map[string][]string) {
	added, removed = map[string][]string{}, map[string][]string{}
	file := ""
	for _, l := range strings.Split(data, "\n") {
		switch {
		case strings.HasPrefix(l, "diff --git a/"):
			f := strings.Fields(l)
			file = strings.TrimPrefix(f[len(f)-1], "b/")
		case strings.HasPrefix(l, "+++ "), strings.HasPrefix(l, "--- "):
		case file != "" && strings.HasPrefix(l, "+"):
			added[file] = append(added[file], l[1:])
		case file != "" && strings.HasPrefix(l, "-"):
			removed[file] = append(removed[file], l[1:])
		}
	}
	return added, removed
}

func readPatch(t *testing.T, version, prefix string) string {
	t.Helper()
	dir := PatchDir(version)
	for _, name := range readSeries(t, dir) {
		if strings.HasPrefix(name, prefix) {
			b, err := Patches.ReadFile(path.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("%s has no patch %s*", dir, prefix)
	return ""
}

// cFunction returns the body of the C function name among lines (from its
// name at the start of a line to the first "}" at the start of a line).
func cFunction(lines []string, name string) string {
	for i, l := range lines {
		if l == name {
			for j := i; j < len(lines); j++ {
				if lines[j] == "}" {
					return strings.Join(lines[i:j+1], "\n")
				}
			}
		}
	}
	return ""
}

var cComment = regexp.MustCompile(`//[^\n]*`)

// cAssignment returns the right-hand side of "lhs = ...;" in body, comments
// and runs of white space reduced to one space.
func cAssignment(body, lhs string) string {
	m := regexp.MustCompile(`(?s)\n\s*` + regexp.QuoteMeta(lhs) + `\s*=\s*(.*?);`).FindStringSubmatch(cComment.ReplaceAllString(body, ""))
	if m == nil {
		return ""
	}
	return strings.Join(strings.Fields(m[1]), " ")
}

// splitSum splits a C sum at its top-level "+".
func splitSum(expr string) []string {
	var terms []string
	depth, start := 0, 0
	for i, r := range expr {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case '+':
			if depth == 0 {
				terms = append(terms, strings.TrimSpace(expr[start:i]))
				start = i + 1
			}
		}
	}
	return append(terms, strings.TrimSpace(expr[start:]))
}

// The 580/595 series force static BAR1 by the model's rule: the helper's
// terms are exactly the model's (evaluated through forcedTerms over a sweep
// of GPUs, its decisions equal modelForced's), its guards keep
// RMForceStaticBar1 and AUTO's other refusals, and kbusInitBar1_GM107 takes
// its answer where AUTO said NOT_SUPPORTED.
func TestSeriesForceStaticBar1(t *testing.T) {
	const gm107 = "src/nvidia/src/kernel/gpu/bus/arch/maxwell/kern_bus_gm107.c"
	for _, version := range []string{"580.142", "595.45.04"} {
		t.Run(version, func(t *testing.T) {
			added, removed := patchLines(readPatch(t, version, "0002-"))
			body := cFunction(added[gm107], "_kbusPeerbootForceStaticBar1_GM107")
			if body == "" {
				t.Fatalf("0002 adds no _kbusPeerbootForceStaticBar1_GM107 to %s: the series no longer forces static BAR1 where AUTO refuses (RTX 5090)", gm107)
			}
			want := map[string]string{
				"bar1VASizeAligned": "RM_ALIGN_DOWN(pKernelBus->bar1[gfid].mappableLength, RM_PAGE_SIZE_2M)",
				"windowSize":        "RM_ALIGN_DOWN(memmgrGetClientFbAddrSpaceSize(pGpu, pMemoryManager), RM_PAGE_SIZE_2M)",
				"windowStart":       "NV_ALIGN_UP(consoleSize + mailboxSize, RM_PAGE_SIZE_512M)",
			}
			for lhs, rhs := range want {
				if got := cAssignment(body, lhs); got != rhs {
					t.Errorf("%s = %q, the model has %q", lhs, got, rhs)
				}
			}
			terms := splitSum(cAssignment(body, "required"))
			for _, term := range terms {
				if forcedTerms[term] == nil {
					t.Errorf("required has the term %q, which the model (forcedTerms) does not know", term)
				}
			}
			for _, g := range sweepGPUs() {
				var required uint64
				for _, term := range terms {
					if f := forcedTerms[term]; f != nil {
						required += f(g)
					}
				}
				if c := alignDown(g.bar1VA(), 2*mib) >= required; c != modelForced(g) {
					t.Fatalf("for %+v the series' rule says static=%v, the model %v", g, c, modelForced(g))
				}
			}
			for _, guard := range []string{
				"return (bar1VASizeAligned >= required) ? NV_TRUE : NV_FALSE;",
				"(pKernelBus->staticBar1ForceType != NV_REG_STR_RM_FORCE_STATIC_BAR1_AUTO)",
				"hypervisorIsVgxHyper() || gpuIsCCFeatureEnabled(pGpu)",
				"!kbusIsBar1P2PTypeSelected(pGpu)",
			} {
				if !strings.Contains(body, guard) {
					t.Errorf("_kbusPeerbootForceStaticBar1_GM107 lacks %q", guard)
				}
			}
			// The call site: AUTO's NOT_SUPPORTED no longer means "not static".
			call := strings.Join(added[gm107], "\n")
			if !strings.Contains(call, "bPeerbootStaticForced = _kbusPeerbootForceStaticBar1_GM107(pGpu, pKernelBus, gfid,") ||
				!strings.Contains(call, "bStaticBar1Supported  = bPeerbootStaticForced;") ||
				!containsLine(removed[gm107], "        bStaticBar1Supported = NV_FALSE;") {
				t.Errorf("kbusInitBar1_GM107's NOT_SUPPORTED branch does not take the forced rule's answer")
			}
		})
	}
}

func containsLine(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}

func sweepGPUs() []bar1GPU {
	var gs []bar1GPU
	for _, bar1 := range []uint64{256 * mib, 16 * gib, 32 * gib, 64 * gib} {
		for fb := uint64(8 * gib); fb <= 64*gib; fb += 256 * mib {
			for _, console := range []uint64{0, 8 * mib} {
				for _, reserved := range []uint64{2 * mib, 6 * mib, 300 * mib} {
					gs = append(gs, bar1GPU{fbAddrSpace: fb, clientFB: fb - reserved, bar1: bar1, console: console, userd: 2048 * 512})
				}
			}
		}
	}
	return gs
}

// Every dynamic window is mapped with an explicit page size on 580/595
// (kbusMapFbAperture* in the series' nv_gpu_ops.c code carries
// pageSizeFlag, and _nvGpuOpsDynBar1PageSizeFlag returns a flag for each of
// RM's GPU page sizes). 550 has no such flag (BUS_MAP_FB_FLAGS_PAGE_SIZE_*
// came with 565's kbusConvertBusMapFlagsToDmaFlags): there
// dmaAllocMapping_GM107 maps NVOS46_FLAGS_PAGE_SIZE_DEFAULT at the memdesc's
// own page size, unconditionally; that premise is checked in the pinned
// tree instead.
func TestSeriesDynamicWindowPageSize(t *testing.T) {
	const gpuOps = "src/nvidia/src/kernel/rmapi/nv_gpu_ops.c"
	mapCall := regexp.MustCompile(`(?s)kbusMapFbAperture(Single|_HAL)\((.*?)\);`)
	for _, version := range []string{"580.142", "595.45.04"} {
		t.Run(version, func(t *testing.T) {
			added, _ := patchLines(readPatch(t, version, "0003-"))
			code := cComment.ReplaceAllString(strings.Join(added[gpuOps], "\n"), "")
			calls := mapCall.FindAllStringSubmatch(code, -1)
			if len(calls) == 0 {
				t.Fatalf("0003 maps no dynamic window (no kbusMapFbAperture call in %s)", gpuOps)
			}
			for _, c := range calls {
				if !strings.Contains(c[2], "pageSizeFlag") && !strings.Contains(c[2], "BUS_MAP_FB_FLAGS_PAGE_SIZE_") {
					t.Errorf("a dynamic window is mapped without a BUS_MAP_FB_FLAGS_PAGE_SIZE flag: kbusMapFbAperture%s(%s)", c[1], strings.Join(strings.Fields(c[2]), " "))
				}
			}
			body := cFunction(added[gpuOps], "_nvGpuOpsDynBar1PageSizeFlag")
			for size, flag := range map[string]string{
				"RM_PAGE_SIZE": "BUS_MAP_FB_FLAGS_PAGE_SIZE_4K", "RM_PAGE_SIZE_64K": "BUS_MAP_FB_FLAGS_PAGE_SIZE_64K",
				"RM_PAGE_SIZE_HUGE": "BUS_MAP_FB_FLAGS_PAGE_SIZE_2M", "RM_PAGE_SIZE_512M": "BUS_MAP_FB_FLAGS_PAGE_SIZE_512M",
			} {
				if !regexp.MustCompile(`case ` + size + `:\s*return ` + flag + `;`).MatchString(body) {
					t.Errorf("_nvGpuOpsDynBar1PageSizeFlag does not map %s to %s", size, flag)
				}
			}
			if !strings.Contains(code, "if (pageSizeFlag == 0)") {
				t.Errorf("a page size without a flag is not refused")
			}
		})
	}
	t.Run("550.163.01", func(t *testing.T) {
		const (
			flags = "src/nvidia/generated/g_kern_bus_nvoc.h"
			dma   = "src/nvidia/src/kernel/gpu/mem_mgr/arch/maxwell/virt_mem_allocator_gm107.c"
		)
		tree := pinnedTree(t, "https://github.com/NVIDIA/open-gpu-kernel-modules.git", "23e9e7621487fe632040a370249f690a456967dd", flags, dma)
		h, err := os.ReadFile(filepath.Join(tree, flags))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(h), "BUS_MAP_FB_FLAGS_PAGE_SIZE_") {
			t.Fatalf("550.163.01 has BUS_MAP_FB_FLAGS_PAGE_SIZE_* after all: its 0003 must pass one like 580/595")
		}
		d, err := os.ReadFile(filepath.Join(tree, dma))
		if err != nil {
			t.Fatal(err)
		}
		def := "case NVOS46_FLAGS_PAGE_SIZE_BOTH:\n            pLocals->pageSize = memdescGetPageSize(pLocals->pTempMemDesc, addressTranslation);"
		if !strings.Contains(string(d), def) {
			t.Fatalf("550.163.01's dmaAllocMapping_GM107 no longer maps the default page size at the memdesc's: %s", fmt.Sprintf("%q not found", def))
		}
	})
}

// The mode line every series prints has the keys, in order, of the example
// line in patches/README.md, which the self-test's parser follows.
func TestModeLineMatchesReadme(t *testing.T) {
	readme, err := Patches.ReadFile("patches/README.md")
	if err != nil {
		t.Fatal(err)
	}
	example := regexp.MustCompile(`(?m)^\s+NVRM: peerboot-p2p: bar1-mode (.*)$`).FindSubmatch(readme)
	if example == nil {
		t.Fatal("patches/README.md has no example mode line")
	}
	keys := func(fields string) []string {
		var ks []string
		for _, f := range strings.Fields(fields) {
			k, _, ok := strings.Cut(f, "=")
			if !ok {
				t.Fatalf("%q is not key=value", f)
			}
			ks = append(ks, k)
		}
		return ks
	}
	want := strings.Join(keys(string(example[1])), " ")
	format := regexp.MustCompile(`"peerboot-p2p: bar1-mode ([^"\\]*)(\\n)?"`)
	for _, version := range []string{"550.163.01", "580.142", "595.45.04"} {
		added, _ := patchLines(readPatch(t, version, "0002-"))
		found := 0
		for _, l := range added["src/nvidia/src/kernel/gpu/bus/arch/maxwell/kern_bus_gm107.c"] {
			m := format.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			found++
			got := keys(m[1])
			if strings.Join(got[:min(len(got), 7)], " ") != want {
				t.Errorf("%s prints keys %q, patches/README.md's line has %q", version, got, want)
			}
		}
		if found == 0 {
			t.Errorf("%s prints no peerboot-p2p: bar1-mode line", version)
		}
	}
}

// The decision table in patches/README.md says what the model says: every
// cell that names a mode, for every BAR1 size a row gives.
func TestReadmeDecisionTableFollowsModel(t *testing.T) {
	readme, err := Patches.ReadFile("patches/README.md")
	if err != nil {
		t.Fatal(err)
	}
	cell := regexp.MustCompile("^(static|dynamic|none) \\(`([a-z0-9-]+)`\\)")
	size := regexp.MustCompile(`^([0-9]+)(?:–([0-9]+))? (GiB|MiB)$`)
	sizes := func(s string) []uint64 {
		m := size.FindStringSubmatch(s)
		if m == nil {
			return nil
		}
		unit := gib
		if m[3] == "MiB" {
			unit = mib
		}
		var out []uint64
		for _, n := range m[1:3] {
			if n != "" {
				v, _ := strconv.ParseUint(n, 10, 64)
				out = append(out, v*unit)
			}
		}
		return out
	}
	checked := 0
	for _, line := range strings.Split(string(readme), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 8 || !regexp.MustCompile(`^ (GA102|AD102|GB202) $`).MatchString(f[1]) {
			continue
		}
		name, vramText, bar1Text := strings.TrimSpace(f[2]), strings.TrimSpace(f[3]), strings.TrimSpace(f[4])
		vram := []uint64{24 * gib} // "—": any VRAM; the row is about BAR1
		if vramText != "—" {
			vram = sizes(vramText)
		}
		bar1s := sizes(bar1Text)
		if len(vram) != 1 || len(bar1s) == 0 {
			t.Errorf("decision table row %q: cannot read VRAM %q / BAR1 %q", name, vramText, bar1Text)
			continue
		}
		var console uint64
		if strings.Contains(name, "console") {
			console = 8 * mib
		}
		for col, branches := range map[int][]string{5: {"550.163.01"}, 6: {"580.142", "595.45.04"}} {
			m := cell.FindStringSubmatch(strings.TrimSpace(f[col]))
			if m == nil {
				continue // no series for this chip on this branch
			}
			for _, b := range branches {
				for _, bar1 := range bar1s {
					mode, why := modelMode(b, board(vram[0], bar1, console))
					if mode != m[1] || why != m[2] {
						t.Errorf("patches/README.md: %s, BAR1 %d MiB on %s says %s (%s), the model %s (%s)", name, bar1>>20, b, m[1], m[2], mode, why)
					}
					checked++
				}
			}
		}
	}
	if checked < 15 {
		t.Fatalf("read only %d cells of the decision table in patches/README.md", checked)
	}
}
