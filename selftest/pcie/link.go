package pcie

import (
	"math"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// speedNames are the kernel's link speed strings by register code (pci_speed_string).
var speedNames = [...]string{
	1: "2.5 GT/s PCIe",
	2: "5.0 GT/s PCIe",
	3: "8.0 GT/s PCIe",
	4: "16.0 GT/s PCIe",
	5: "32.0 GT/s PCIe",
	6: "64.0 GT/s PCIe",
}

// SpeedName is the sysfs spelling of a link speed register code (1..6), so a config
// space reading can be compared with current_link_speed; "Unknown" otherwise.
func SpeedName(code int) string {
	if code < 1 || code >= len(speedNames) {
		return "Unknown"
	}
	return speedNames[code]
}

// LinkGTps reads the transfer rate out of a sysfs link speed: "16.0 GT/s PCIe" -> 16.
// Older kernels wrote "8 GT/s" or "5 GT/s"; those parse too. Anything else ("Unknown",
// "") is 0.
func LinkGTps(speed string) float64 {
	f := strings.Fields(speed)
	if len(f) < 2 || !strings.HasPrefix(f[1], "GT/s") {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// TheoreticalGBps is a link's payload rate per direction in GB/s (1e9 B/s) after line
// encoding: 8b/10b below 8 GT/s, 128b/130b from 8 GT/s. 64 GT/s (FLIT mode) is counted
// as 128b/130b too, a little high, which is the safe side for an upper bound. Gen4 x16
// is 31.51. It is 0 when the speed or width is unknown.
func TheoreticalGBps(speed string, width int) float64 {
	gt := LinkGTps(speed)
	if gt <= 0 || width <= 0 {
		return 0
	}
	enc := 128.0 / 130.0
	if gt < 8 {
		enc = 8.0 / 10.0
	}
	return gt * float64(width) * enc / 8
}

// linkGBps is the most one link can carry, for a ceiling on measured copies. Speed is
// the larger of current and max: GeForce cards drop to 2.5 GT/s when idle, so the
// current speed read at pre-check time is no ceiling for a copy that runs at full
// speed. Width is the trained (current) width, which does not change with load; a
// link trained narrower really is capped by it.
func linkGBps(l selftest.Link) float64 {
	speed := l.MaxSpeed
	if LinkGTps(l.CurrentSpeed) > LinkGTps(speed) {
		speed = l.CurrentSpeed
	}
	width := l.CurrentWidth
	if width <= 0 {
		width = l.MaxWidth
	}
	return TheoreticalGBps(speed, width)
}

// PathLinkGBps is the theoretical per-direction rate of the narrowest link between GPUs
// a and b (indexes into r.GPUs): the minimum over both GPUs' own links and the bridges
// on the pair's Path (see linkGBps for which speed and width count). Links that read
// unknown are left out, which can only raise the figure; it is 0 when no link on the
// path is known or there is no such pair. Links beyond the PCIe tree (UPI, xGMI,
// Infinity Fabric) are not in sysfs and not counted.
func PathLinkGBps(r *Result, a, b int) float64 {
	if r == nil || a == b || a < 0 || b < 0 || a >= len(r.GPUs) || b >= len(r.GPUs) {
		return 0
	}
	if a > b {
		a, b = b, a
	}
	var pair *selftest.Pair
	for i := range r.Pairs {
		if r.Pairs[i].A == a && r.Pairs[i].B == b {
			pair = &r.Pairs[i]
			break
		}
	}
	if pair == nil {
		return 0
	}
	links := []selftest.Link{r.GPUs[a].Link, r.GPUs[b].Link}
	onPath := map[string]bool{}
	for _, bdf := range pair.Path {
		onPath[bdf] = true
	}
	for _, g := range []selftest.GPU{r.GPUs[a], r.GPUs[b]} {
		for _, br := range g.Upstream {
			if onPath[br.BDF] {
				links = append(links, br.Link)
			}
		}
	}
	lowest := 0.0
	for _, l := range links {
		if v := linkGBps(l); v > 0 && (lowest == 0 || v < lowest) {
			lowest = v
		}
	}
	return lowest
}
