package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// bar1 checks each GPU's BAR1 aperture: resizable BAR must have grown it to the recipe's
// size, and a BAR1 smaller than VRAM needs the dynamic-BAR1 driver.
func (j *judge) bar1() {
	mode := j.p2pMode()
	for i, g := range j.r.GPUs {
		bar1, vram, src := j.bar1VRAM(i)
		if bar1 <= 0 {
			continue
		}
		subject := fmt.Sprintf("GPU%d", i)
		ev := fmt.Sprintf("%s resource1 %s", g.BDF, selftest.HumanBytes(bar1))
		if j.e != nil && j.e.BAR1Bytes > 0 && bar1 < j.e.BAR1Bytes {
			hint := "enable 'Above 4G decoding' and 'Re-Size BAR support' in the BIOS and load nvidia with NVreg_EnableResizableBar=1"
			if j.e.DriverParams["nvidia"]["NVreg_EnableResizableBar"] != "1" {
				hint = "the recipe does not set driver.params.nvidia.NVreg_EnableResizableBar = \"1\": set it, and enable 'Above 4G decoding' and 'Re-Size BAR support' in the BIOS"
				ev += ", driver.params.nvidia.NVreg_EnableResizableBar unset"
			}
			j.add(selftest.SevFail, "bar1.size", subject, fmt.Sprintf("%s BAR1 is %s, recipe platform.bar1 = %s: resizable BAR is not enabled", j.gpuLabel(i), selftest.HumanBytes(bar1), selftest.HumanBytes(j.e.BAR1Bytes)),
				ev, hint)
			continue
		}
		if vram <= 0 || bar1 >= vram || mode == P2PDynamicBAR1 {
			continue
		}
		msg := fmt.Sprintf("%s BAR1 %s < VRAM %s (%s): static BAR1 cannot map all of VRAM; the dynamic-BAR1 branch is required", j.gpuLabel(i), selftest.HumanBytes(bar1), selftest.HumanBytes(vram), src)
		ev += fmt.Sprintf(", VRAM %s (%s), driver.p2p=%s", selftest.HumanBytes(vram), src, orDefault(mode, "unknown"))
		hint := "build with a dynamic-BAR1 driver branch and set driver.p2p = \"dynamic-bar1\""
		switch mode {
		case P2PStaticBAR1:
			j.add(selftest.SevFail, "bar1.size", subject, msg, ev, hint)
		case P2POff:
			if j.e.RequireP2P {
				j.add(selftest.SevFail, "bar1.size", subject, msg, ev, hint)
			} else {
				j.add(selftest.SevInfo, "bar1.size", subject, fmt.Sprintf("%s BAR1 %s < VRAM %s (%s); P2P is off in this image, so it does not matter", j.gpuLabel(i), selftest.HumanBytes(bar1), selftest.HumanBytes(vram), src), ev, "")
			}
		default:
			if j.highMemVerified(i) {
				j.add(selftest.SevInfo, "bar1.size", subject, fmt.Sprintf("%s BAR1 %s < VRAM %s (%s); the above-BAR1 probe passed, so the driver maps peers beyond BAR1", j.gpuLabel(i), selftest.HumanBytes(bar1), selftest.HumanBytes(vram), src), ev, "")
				continue
			}
			j.add(selftest.SevWarn, "bar1.size", subject, msg, ev, hint)
		}
	}
}

// bar1LeakSlack is how much more BAR1 may be in use after the copies than before them
// before it counts as not given back: the driver maps a few MiB of its own (NVML shows
// 1-5 MiB used on an idle card) and may keep a small pool; one peer window of a 256 MiB
// copy buffer is well above it.
const bar1LeakSlack = 64 << 20

// bar1Leak compares NVML's BAR1 used before the copies with the figure after them, when
// every CUDA context is closed: BAR1 still held then is budget the driver did not give
// back, which the next workload's peer mappings lack. The figures alone are shown in
// the report (report show's BAR1 table) and judged nowhere else: how much BAR1 a box
// needs depends on the workload, not on the self-test.
func (j *judge) bar1Leak() {
	for _, u := range j.r.BAR1 {
		if u.UsedAfter == nil || *u.UsedAfter-u.UsedBefore <= bar1LeakSlack {
			continue
		}
		grew := *u.UsedAfter - u.UsedBefore
		j.add(selftest.SevWarn, "bar1.leak", fmt.Sprintf("GPU%d", u.GPU),
			fmt.Sprintf("%s holds %s more BAR1 after the copies than before (%s -> %s of %s) with every context closed", j.gpuLabel(u.GPU),
				selftest.HumanBytesAny(grew), selftest.HumanBytesAny(u.UsedBefore), selftest.HumanBytesAny(*u.UsedAfter), selftest.HumanBytesAny(u.Total)),
			fmt.Sprintf("nvmlDeviceGetBAR1MemoryInfo used before=%d after=%d total=%d slack=%d", u.UsedBefore, *u.UsedAfter, u.Total, int64(bar1LeakSlack)),
			"the driver did not unmap peer windows when their allocations were freed: later peer mappings get less BAR1 (a dynamic-BAR1 series must free each window); reboot to reclaim it and check the patch series' free path")
	}
}

// highMemVerified says whether the above-BAR1 probe on GPU index i passed.
func (j *judge) highMemVerified(i int) bool {
	for _, h := range j.r.HighMem {
		if j.r.GPUIndex(h.GPU) == i && h.Verified && h.Error == "" && h.Mismatch == nil && h.Peer >= 0 {
			return true
		}
	}
	return false
}

// links checks the link of every GPU and of every bridge above it. A link trains to
// the lesser of its two ends' maxima, so the port above a GPU is taken into account:
// below that, the link is downtrained (fail); at it but below the card's own maximum,
// the slot is narrower than the card (warn). Speed below the maximum only warns: links
// drop to 2.5 GT/s at idle, and DCGM checks the generation only in P0.
func (j *judge) links() {
	seen := map[string]bool{}
	for i, g := range j.r.GPUs {
		var partner *selftest.Link
		if n := len(g.Upstream); n > 0 {
			partner = &g.Upstream[n-1].Link
		}
		j.link(fmt.Sprintf("GPU%d", i), j.gpuLabel(i), g.BDF, g.Link, partner, true)
		if g.NVML != nil && g.Link.CurrentSpeed == "" && g.NVML.MaxLinkGen > 0 && g.NVML.LinkGen > 0 && g.NVML.LinkGen < g.NVML.MaxLinkGen {
			j.add(selftest.SevWarn, "pcie.link", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s link at Gen%d of Gen%d (NVML)", j.gpuLabel(i), g.NVML.LinkGen, g.NVML.MaxLinkGen),
				fmt.Sprintf("nvml link_gen=%d max_link_gen=%d", g.NVML.LinkGen, g.NVML.MaxLinkGen), "links drop to a lower generation at idle; if it stays there under load, check the BIOS slot setting and the riser")
		}
		for k := 0; k+1 < len(g.Upstream); k++ {
			b := g.Upstream[k]
			if seen[b.BDF] {
				continue
			}
			seen[b.BDF] = true
			next := g.Upstream[k+1].Link
			j.link("bridge "+b.BDF, fmt.Sprintf("bridge %s (above %s)", b.BDF, j.gpuLabel(i)), b.BDF, b.Link, &next, false)
		}
	}
}

func (j *judge) link(subject, name, bdf string, l selftest.Link, partner *selftest.Link, gpu bool) {
	ev := fmt.Sprintf("%s current %s x%d, max %s x%d", bdf, orDefault(l.CurrentSpeed, "?"), l.CurrentWidth, orDefault(l.MaxSpeed, "?"), l.MaxWidth)
	if l.MaxWidth > 0 && l.CurrentWidth > 0 && l.CurrentWidth < l.MaxWidth {
		switch {
		case (partner == nil || partner.MaxWidth == 0) && gpu:
			// Without the port above we cannot tell a narrow slot from a downtrained link.
			j.add(selftest.SevWarn, "pcie.link", subject, fmt.Sprintf("%s trained at x%d of x%d", bdf, l.CurrentWidth, l.MaxWidth), ev, "reseat the card or riser; a narrow link caps peer bandwidth")
		case partner != nil && partner.MaxWidth > 0 && l.CurrentWidth >= partner.MaxWidth:
			j.add(selftest.SevWarn, "pcie.link", subject, fmt.Sprintf("%s runs at x%d of x%d: the port above is only x%d wide", name, l.CurrentWidth, l.MaxWidth, partner.MaxWidth),
				ev+fmt.Sprintf("; port above max x%d", partner.MaxWidth), "a narrow slot caps peer bandwidth: move the card to a x16 slot or check the BIOS bifurcation setting")
		default:
			j.add(selftest.SevFail, "pcie.link", subject, fmt.Sprintf("%s downtrained: %s x%d of x%d", name, orDefault(l.CurrentSpeed, "?"), l.CurrentWidth, l.MaxWidth),
				ev, "reseat the card, riser or cable; a link that trains narrower than both ends support is a signal-integrity fault")
		}
	}
	cur, maxs := pcie.LinkGTps(l.CurrentSpeed), pcie.LinkGTps(l.MaxSpeed)
	if partner != nil {
		if p := pcie.LinkGTps(partner.MaxSpeed); p > 0 && p < maxs {
			maxs = p
		}
	}
	if cur > 0 && maxs > 0 && cur < maxs {
		j.add(selftest.SevWarn, "pcie.link", subject, fmt.Sprintf("%s link at %s of %g GT/s", name, l.CurrentSpeed, maxs),
			ev, "links drop to a lower speed at idle (DCGM checks only in P0); if it stays there under load, check the BIOS slot generation setting and the riser")
	}
}

// display names the GPUs that drive a display: sysfs boot_vga (the firmware's console
// card) or NVML's display mode / display active. The P2P forks' static BAR1 mapping
// is lost on such a card, so with driver.p2p = "static-bar1" it fails; without a
// recipe it warns; with the dynamic-BAR1 driver or P2P off it is information.
func (j *judge) display() {
	for i, g := range j.r.GPUs {
		var ev []string
		if g.BootVGA {
			ev = append(ev, "boot_vga=1")
		}
		if n := g.NVML; n != nil {
			if n.DisplayMode != nil && *n.DisplayMode == 1 {
				ev = append(ev, "nvml display_mode=1")
			}
			if n.DisplayActive != nil && *n.DisplayActive == 1 {
				ev = append(ev, "nvml display_active=1")
			}
		}
		if len(ev) == 0 {
			continue
		}
		sev := selftest.SevWarn
		switch j.p2pMode() {
		case P2PStaticBAR1:
			sev = selftest.SevFail
		case P2PDynamicBAR1, P2POff:
			sev = selftest.SevInfo
		}
		j.add(sev, "gpu.display", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s drives a display (%s): the P2P forks do not give a display GPU its static BAR1 mapping", j.gpuLabel(i), strings.Join(ev, ", ")),
			strings.Join(ev, " "), "drive the display from the board's VGA or another card (BIOS primary display), or run this GPU headless; with driver.p2p = \"static-bar1\" a display GPU cannot take part in P2P")
	}
}

// replays warns on PCIe replays NVML counted: link errors the hardware retried.
func (j *judge) replays() {
	for i, g := range j.r.GPUs {
		if g.NVML != nil && g.NVML.ReplayCounter > 0 {
			j.add(selftest.SevWarn, "pcie.replay", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s: %d PCIe replay(s)", j.gpuLabel(i), g.NVML.ReplayCounter),
				fmt.Sprintf("nvmlDeviceGetPcieReplayCounter=%d", g.NVML.ReplayCounter), "replays are link errors being retried: reseat the card or riser, or set the slot to a lower generation in the BIOS")
		}
	}
}

// iommu states the IOMMU mode; peer traffic through a translating IOMMU works with the
// dynamic-BAR1 driver (it maps the window), so this is information, not a verdict.
func (j *judge) iommu() {
	io := &j.r.IOMMU
	if len(j.r.GPUs) == 0 || (io.Mode == "" && !io.Active && len(io.Units) == 0 && len(io.Cmdline) == 0) {
		return
	}
	msg := "IOMMU " + orDefault(io.Mode, "mode unknown")
	if len(io.Units) > 0 {
		msg += " (" + strings.Join(io.Units, ", ") + ")"
	}
	ev := "cmdline: " + orDefault(strings.Join(io.Cmdline, " "), "none")
	if len(io.GroupTypes) > 0 {
		ev += "; GPU group types: " + strings.Join(io.GroupTypes, ", ")
	}
	hint := ""
	if io.Mode == "translated" || io.Mode == "mixed" {
		hint = "peer traffic goes through IOMMU translation; if kernel.iommu_fault appears, try iommu=pt"
	}
	j.add(selftest.SevInfo, "iommu.mode", "iommu", msg, ev, hint)
}

// acs warns on ACS redirect bits on a pair's path: peer requests then go up to the root
// complex. Seed 000's Platform A ran P2P fine through the IOMMU that way, so it is
// reported, not failed; the measured copies decide.
func (j *judge) acs() {
	r := j.r
	bridges := map[string]*selftest.Bridge{}
	for gi := range r.GPUs {
		for k := range r.GPUs[gi].Upstream {
			b := &r.GPUs[gi].Upstream[k]
			bridges[b.BDF] = b
		}
	}
	for _, p := range r.Pairs {
		on := append([]string{}, p.ACSOn...)
		for _, bdf := range p.Path {
			if b := bridges[bdf]; b != nil && b.ACS.Redirects() && !contains(on, bdf) {
				on = append(on, bdf)
			}
		}
		if len(on) == 0 {
			continue
		}
		var ev []string
		for _, bdf := range on {
			if b := bridges[bdf]; b != nil && b.ACS != nil {
				ev = append(ev, fmt.Sprintf("%s ctrl=%#04x %s", bdf, b.ACS.Ctrl, b.ACS.Bits()))
			} else {
				ev = append(ev, bdf)
			}
		}
		j.add(selftest.SevWarn, "acs.redirect", pairSubject(p.A, p.B), fmt.Sprintf("%s-%s: ACS redirect on at %s; peer traffic goes up to the root complex", j.gpuLabel(p.A), j.gpuLabel(p.B), strings.Join(on, ", ")),
			strings.Join(ev, "; "), "P2P can still work through the IOMMU; to route it directly boot with pci=disable_acs_redir="+strings.Join(on, ";"))
	}
}

// p2pLetterHint says what to do about one NVML P2P status letter.
func p2pLetterHint(s string) string {
	switch s {
	case "CNS":
		return "chipset not supported is the stock driver's answer on GeForce: build the patched driver (driver.p2p = \"static-bar1\" or \"dynamic-bar1\")"
	case "TNS":
		return "topology not supported: the path crosses something the driver refuses; check acs.redirect and the IOMMU"
	case "GNS":
		return "GPU not supported: this driver's P2P patch does not cover the card"
	case "DRK":
		return "disabled by a registry key: check NVreg_RegistryDwords in driver.params"
	}
	return "NVML could not tell: check kernel_log for driver errors"
}

// p2pStatus checks NVML's P2P read/write status, which is also NCCL's P2P gate, and
// compares it with CUDA's cuDeviceCanAccessPeer.
func (j *judge) p2pStatus() {
	r := j.r
	sev := j.p2pSeverity()
	asked, cns := 0, 0
	var bad []selftest.Pair
	for _, p := range r.Pairs {
		if p.P2PRead == "" && p.P2PWrite == "" {
			continue
		}
		asked++
		if p.P2PRead == "CNS" && p.P2PWrite == "CNS" {
			cns++
		}
		if p.P2PRead != "OK" || p.P2PWrite != "OK" {
			bad = append(bad, p)
		}
	}
	switch {
	case asked > 0 && cns == asked:
		msg := fmt.Sprintf("unpatched driver: NVML reports CNS for every pair (%d pair(s))", asked)
		if sev == selftest.SevInfo {
			msg += "; P2P is off in this image (driver.p2p = \"off\"), so it is not expected"
		}
		hint := "the stock driver reports CNS on GeForce: build the patched driver (driver.p2p = \"static-bar1\" or \"dynamic-bar1\", e.g. a patched platform recipe)"
		if m := j.p2pMode(); m == P2PStaticBAR1 || m == P2PDynamicBAR1 {
			hint = fmt.Sprintf("the recipe already builds the patched driver (driver.p2p = %q), yet NVML answers as the stock driver does: the nvidia.ko that ran is not the image's (a distribution or DKMS nvidia package, an image built from another recipe) or its patches lack the P2P unlock; boot the image built from this recipe and compare modules[].ko_version and file with driver.version (p2p.mode_missing names the driver that ran where the series logs mode lines)", m)
		}
		j.add(sev, "p2p.status", "all pairs", msg, p2pEvidence(bad), hint)
	default:
		for _, p := range bad {
			letter := p.P2PRead
			if letter == "OK" || letter == "" {
				letter = p.P2PWrite
			}
			msg := fmt.Sprintf("%s-%s: NVML P2P read %s, write %s", j.gpuLabel(p.A), j.gpuLabel(p.B), orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?"))
			if sev == selftest.SevInfo {
				msg += "; P2P is off in this image, so it is not expected"
			}
			j.add(sev, "p2p.status", pairSubject(p.A, p.B), msg, p2pEvidence([]selftest.Pair{p}), p2pLetterHint(letter))
		}
	}
	for _, p := range r.Pairs {
		if p.P2PRead == "OK" && p.P2PWrite == "OK" && p.CanAccessPeer != nil && !*p.CanAccessPeer {
			j.add(selftest.SevFail, "p2p.cuda", pairSubject(p.A, p.B), fmt.Sprintf("%s-%s: NVML says P2P OK but cuDeviceCanAccessPeer is false", j.gpuLabel(p.A), j.gpuLabel(p.B)),
				fmt.Sprintf("nvml read=%s write=%s, cuDeviceCanAccessPeer=0", p.P2PRead, p.P2PWrite),
				"the driver's P2P capability bit is off: on cards whose BAR1 is smaller than VRAM the static-BAR1 patch leaves it false (use driver.p2p = \"dynamic-bar1\"); else check the patch series")
		}
	}
}

func p2pEvidence(ps []selftest.Pair) string {
	var s []string
	for k, p := range ps {
		if k == 4 {
			s = append(s, fmt.Sprintf("... %d more", len(ps)-k))
			break
		}
		s = append(s, fmt.Sprintf("GPU%d-GPU%d r=%s w=%s", p.A, p.B, orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?")))
	}
	return strings.Join(s, "; ")
}

// nvlinked reports whether NVML says GPUs a and b talk P2P over NVLink.
func nvlinked(r *selftest.Report, a, b int) bool {
	if a > b {
		a, b = b, a
	}
	for _, p := range r.Pairs {
		if p.A == a && p.B == b {
			return p.P2PNVLink == "OK"
		}
	}
	return false
}
