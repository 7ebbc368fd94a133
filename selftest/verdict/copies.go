package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// overrateFactor bounds a measured peer copy from above: more than 5% over the link's
// theoretical rate means the copies are not going where the test thinks they go.
const overrateFactor = 1.05

// ptx fails when the self-test's own kernels did not load: every SM copy and data check
// depends on them.
func (j *judge) ptx() {
	p := j.r.CUDA.PTX
	if p == nil || p.Code == selftest.CUDASuccess {
		return
	}
	hint := "the driver could not JIT the self-test's PTX: see ptx_log"
	switch p.Code {
	case 222:
		hint = "the driver is older than the PTX ISA version: the driver must be at least CUDA 11.0"
	case 218:
		hint = "the PTX targets a newer GPU than this one: a p2pcheck bug, report it with ptx_log"
	case 221:
		hint = "no PTX JIT compiler: the image needs libnvidia-ptxjitcompiler1 of driver.version"
	}
	ev := statusText(p)
	if log := strings.TrimSpace(j.r.CUDA.PTXLog); log != "" {
		ev += ": " + firstLine(log)
	}
	j.add(selftest.SevFail, "cuda.ptx", "ptx", fmt.Sprintf("loading the self-test's PTX kernels: %s (%d)", p.Name, p.Code), ev, hint)
}

// copies checks every timed copy: errors, corrupted data, rates above the link (the
// copies went somewhere else) and rates below the recipe's threshold for the pair's
// topology class.
func (j *judge) copies() {
	r := j.r
	var unverified []string
	defer func() { j.unverified(unverified) }()
	for k := range r.Copies {
		c := &r.Copies[k]
		a, b := r.GPUIndex(c.Src), r.GPUIndex(c.Dst)
		subject := selftest.CopySubject(r, c)
		name := fmt.Sprintf("GPU%d->GPU%d %s %s", a, b, c.Method, c.Direction)
		if c.Src == c.Dst {
			name = fmt.Sprintf("GPU%d local %s copy", a, c.Method)
		}
		if c.Error != "" {
			j.add(selftest.SevFail, "copy.error", subject, fmt.Sprintf("%s failed: %s", name, c.Error), c.Error, j.copyErrorHint(c.Error))
			continue
		}
		if m := c.Mismatch; m != nil {
			j.add(selftest.SevFail, "copy.corrupt", subject, fmt.Sprintf("%s corrupted data: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", name, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("offset=%d want=0x%08x got=0x%08x words=%d bytes=%d", m.Offset, m.Want, m.Got, m.Words, c.Bytes),
				j.corruptHint(c))
			continue
		}
		if !c.Verified {
			unverified = append(unverified, name)
			continue
		}
		if c.Src == c.Dst || c.Direction == selftest.DirLocal {
			continue
		}
		limit := c.LinkGBps
		if c.Direction == selftest.DirBidir {
			limit *= 2
		}
		if nvlinked(r, c.Src, c.Dst) {
			limit = 0 // the PCIe path's rate does not bound an NVLink pair
		}
		if limit > 0 && c.GBps > overrateFactor*limit {
			j.add(selftest.SevFail, "copy.overrate", subject, fmt.Sprintf("%s measured %.1f GB/s, above the link's %.1f GB/s: copies are not landing where they should", name, c.GBps, limit),
				fmt.Sprintf("gbps=%.2f link_gbps=%.2f samples=%s", c.GBps, c.LinkGBps, floats(c.Samples)),
				"a driver that claims P2P but maps peer memory wrongly measures like this (seen on early patch forks): do not use P2P on this image; check the driver patch series")
			continue
		}
		j.copyThreshold(c, a, b, subject, name)
	}
}

// unverified judges copies that ran without error but were never checked: with
// verification on (the default; selftest.verify) a copy that was not checked proves
// nothing, so it fails; with verification off the bandwidth figures stand alone and
// the report says so once.
func (j *judge) unverified(names []string) {
	if len(names) == 0 {
		return
	}
	ev := strings.Join(names, ", ")
	if j.e != nil && j.e.NoVerify {
		j.add(selftest.SevWarn, "copy.unverified", "copies", fmt.Sprintf("%d copies were not checked: the recipe sets selftest.verify = false, so a pass does not show that peer data arrived", len(names)), ev,
			"set selftest.verify = true (the default): only a verified copy shows the data landed where it should")
		return
	}
	for _, n := range names {
		j.add(selftest.SevFail, "copy.unverified", "copies", fmt.Sprintf("%s was not verified though verification is on: the data check did not run", n), n,
			"a copy that was timed but not checked proves nothing; this is a p2pcheck fault: report it with this JSON")
	}
}

// injectedMessage is the message of p2pcheck's test.injected finding, which names the
// copy --inject-corruption broke; "" when nothing was injected.
func (j *judge) injectedMessage() string {
	for _, f := range j.r.Findings {
		if f.ID == "test.injected" {
			return f.Message
		}
	}
	return ""
}

func (j *judge) isInjected(c *selftest.Copy) bool {
	msg := j.injectedMessage()
	return msg != "" && strings.Contains(msg, fmt.Sprintf("after the %s %s copy GPU %d -> GPU %d,", c.Method, c.Direction, c.Src, c.Dst))
}

// corruptHint says what a mismatch means for this copy: the injected one, one GPU's
// own copy (no peer path involved), an SM copy through the peer mapping, or a copy
// engine peer copy.
func (j *judge) corruptHint(c *selftest.Copy) string {
	switch {
	case j.isInjected(c):
		return "this is the word --inject-corruption inverted on purpose: the data check works; run without the flag for a verdict"
	case c.Src == c.Dst || c.Direction == selftest.DirLocal:
		return "a copy within one GPU corrupted data, with no peer path involved: suspect the GPU's memory or the driver (check kernel.xid for ECC / MMU errors, and the card's temperature and clocks)"
	case c.Method == selftest.MethodSM:
		return "the GPU's own loads and stores through the peer mapping (the path NCCL uses) landed in the wrong place: " + j.mappingAdvice()
	}
	return "peer data landed in the wrong place: " + j.mappingAdvice()
}

// injected fails a run where --inject-corruption broke a word (in a copy or a
// peer-memory check) and no verification found it: the data check itself is broken, so no pass of this image can be trusted.
func (j *judge) injected() {
	msg := j.injectedMessage()
	if msg == "" {
		return
	}
	for _, f := range j.fs {
		if (f.ID == "copy.corrupt" || f.ID == "peermem.corrupt") && f.Status == selftest.SevFail {
			return
		}
	}
	j.add(selftest.SevFail, "test.undetected", "copies", "corruption was injected on purpose but no copy reported a mismatch (nor a peer-memory check): the data check does not catch corrupted data", msg,
		"verification is off (selftest.verify) or broken; no PASS of this p2pcheck means peer data arrived")
}

func (j *judge) copyThreshold(c *selftest.Copy, a, b int, subject, name string) {
	if j.e == nil || len(j.e.Thresholds) == 0 {
		return
	}
	topo := j.r.PairTopology(a, b)
	th, ok := j.e.Thresholds[topo]
	if !ok {
		return
	}
	min, kind := th.UnidirGBps, "min_unidir_gbps"
	if c.Direction == selftest.DirBidir {
		min, kind = th.BidirGBps, "min_bidir_gbps"
	}
	if min <= 0 || c.GBps >= min {
		return
	}
	j.add(selftest.SevFail, "copy.bandwidth", subject, fmt.Sprintf("%s %.1f GB/s, below the %s threshold of %.1f GB/s", name, c.GBps, topo, min),
		fmt.Sprintf("gbps=%.2f selftest.thresholds.%s.%s=%g samples=%s", c.GBps, topo, kind, min, floats(c.Samples)),
		"check pcie.link for a narrow or slow link and the slot wiring (chipset lanes, x4 slots); far below means the copy was staged through host memory")
}

// mappingAdvice is the next step for a peer mapping that put data in the wrong place
// or failed: the dynamic-BAR1 driver, unless the image already runs it, when the
// mapping itself is at fault.
func (j *judge) mappingAdvice() string {
	if j.p2pMode() == P2PDynamicBAR1 {
		return "the image already runs the dynamic-BAR1 driver (driver.p2p = \"dynamic-bar1\"), so its peer mapping of this window is wrong: check kernel.iommu_fault and kernel.xid around the copy, and report it with this JSON against the patch series"
	}
	return "on cards whose BAR1 is smaller than VRAM an address outside the BAR1 window does this (use driver.p2p = \"dynamic-bar1\"); check kernel.iommu_fault and kernel.xid"
}

func (j *judge) copyErrorHint(msg string) string {
	switch {
	case strings.Contains(msg, "MAP_FAILED") || strings.Contains(msg, "(205)"):
		return "mapping of buffer object failed is the broken-P2P-mapping error: " + j.mappingAdvice()
	case strings.Contains(msg, "PEER_ACCESS_UNSUPPORTED") || strings.Contains(msg, "(217)"):
		return "the driver refused peer access between these GPUs: see p2p.status"
	case strings.Contains(msg, "TOO_MANY_PEERS") || strings.Contains(msg, "(711)"):
		return "peer hardware resources are exhausted (BAR1 windows): check the driver's BAR1 budget"
	case strings.Contains(msg, "ILLEGAL_ADDRESS") || strings.Contains(msg, "(700)"):
		return "the copy touched an unmapped address: a broken peer mapping; check kernel.xid and kernel.iommu_fault"
	}
	return "see kernel_events and dmesg for Xid or IOMMU faults around the copy"
}

// highMem checks the probe that places a buffer above the BAR1 size: on 48 GB cards
// with 32 GiB BAR1 that is where a static mapping silently corrupts data.
func (j *judge) highMem() {
	hint := "peer copies to memory above the BAR1 size need per-allocation BAR1 windows: use the dynamic-BAR1 driver (driver.p2p = \"dynamic-bar1\")"
	if j.p2pMode() == P2PDynamicBAR1 {
		hint = "peer copies above the BAR1 size failed under the dynamic-BAR1 driver (driver.p2p = \"dynamic-bar1\"): its per-allocation windows are not working; check kernel_log for BAR1 exhaustion and the patch series"
	}
	for _, h := range j.r.HighMem {
		gi := j.r.GPUIndex(h.GPU)
		subject := fmt.Sprintf("GPU%d", gi)
		ev := fmt.Sprintf("buffer_va=%s ballast=%dMiB bar1=%s vram=%s", orDefault(h.BufferVA, "?"), h.BallastMiB, selftest.HumanBytes(h.BAR1Bytes), selftest.HumanBytes(h.VRAMBytes))
		peer := "no peer"
		if h.Peer >= 0 {
			peer = "peer " + j.gpuLabel(j.r.GPUIndex(h.Peer))
		}
		switch {
		case h.Error != "":
			j.add(selftest.SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) failed: %s", j.gpuLabel(gi), peer, h.Error), ev+"; "+h.Error, hint)
		case h.Mismatch != nil:
			m := h.Mismatch
			j.add(selftest.SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) corrupted data: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", j.gpuLabel(gi), peer, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("%s; offset=%d want=0x%08x got=0x%08x", ev, m.Offset, m.Want, m.Got), hint)
		case !h.Verified && h.Peer < 0:
			j.add(selftest.SevInfo, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s: no peer GPU to copy with", j.gpuLabel(gi)), ev, "")
		case !h.Verified:
			j.add(selftest.SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) was not verified", j.gpuLabel(gi), peer), ev, hint)
		}
	}
}

// latencies judges every latency measurement: a failed CUDA call or bytes that did not
// arrive fail; a peer write slower than the recipe's max_latency_us for the pair's
// topology class warns. Bandwidth and verified data are what a pass rests on; a slow
// small write on a pair whose copies pass is a symptom worth a look, not a broken box.
func (j *judge) latencies() {
	r := j.r
	for k := range r.Latencies {
		l := &r.Latencies[k]
		a, b := r.GPUIndex(l.Src), r.GPUIndex(l.Dst)
		subject := selftest.LatencySubject(r, l)
		name := fmt.Sprintf("GPU%d->GPU%d %d-byte write", a, b, l.Bytes)
		if a == b {
			name = fmt.Sprintf("GPU%d local %d-byte write", a, l.Bytes)
		}
		if l.Error != "" {
			j.add(selftest.SevFail, "latency.error", subject, fmt.Sprintf("timing the %s failed: %s", name, l.Error), l.Error, j.copyErrorHint(l.Error))
			continue
		}
		if m := l.Mismatch; m != nil {
			hint := "a peer write landed elsewhere: check kernel.iommu_fault and kernel.xid, and the driver's P2P mapping (driver.p2p)"
			if a == b {
				hint = "a write inside one GPU did not arrive: check kernel.xid for this GPU and its memory (ECC, nvidia-smi -q -d ECC)"
			}
			j.add(selftest.SevFail, "latency.corrupt", subject, fmt.Sprintf("%s did not arrive: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", name, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("offset=%d want=0x%08x got=0x%08x words=%d", m.Offset, m.Want, m.Got, m.Words), hint)
			continue
		}
		if a == b || j.e == nil {
			continue
		}
		topo := r.PairTopology(a, b)
		th, ok := j.e.Thresholds[topo]
		if !ok || th.MaxLatencyUS <= 0 || l.US <= th.MaxLatencyUS {
			continue
		}
		j.add(selftest.SevWarn, "latency.slow", subject, fmt.Sprintf("%s takes %.2f µs, above the %s bound of %.2f µs", name, l.US, topo, th.MaxLatencyUS),
			fmt.Sprintf("us=%.3f selftest.thresholds.%s.max_latency_us=%g samples=%s", l.US, topo, th.MaxLatencyUS, floats(l.Samples)),
			"direct P2P writes take about 0.5 µs, writes staged through host memory about 14 µs: check p2p.status, acs.redirect and the IOMMU mode; a value near the staged figure means P2P is not really on")
	}
}
