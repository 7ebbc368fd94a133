package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
)

// soakKey is one copy as the soak tracks it: bandwidth is only comparable at one size.
type soakKey struct {
	src, dst          int
	method, direction string
	bytes             int64
}

type soakPoint struct {
	round int
	atMS  int64
	gbps  float64
}

// soakTracker keeps what the findings need over every round, including rounds the
// downsampled series dropped: every copy's figure and each GPU's first NVML sample.
type soakTracker struct {
	points   map[soakKey][]soakPoint
	verified map[soakKey]int
	first    map[int]selftest.SoakGPU // GPU -> its first sample
	firstAt  map[int]int64
	// The first time each thing was seen, for the findings.
	replay map[int]*soakEvent
	// throttle and powerCap: the first sample with a heat / power-cap reason, the
	// reasons seen over all samples in from (as a mask), rounds with them in to.
	throttle, powerCap map[int]*soakEvent
	maxTemp            map[int]int
	events             []soakEventAt
	corrupt            *soakCorrupt
}

type soakEvent struct {
	round int
	atMS  int64
	from  int64
	to    int64
	temp  int // °C at the first sample, 0: unknown
}

type soakEventAt struct {
	round int
	atMS  int64
	ev    selftest.KEvent
}

type soakCorrupt struct {
	round int
	atMS  int64
	bytes int64
	c     selftest.SoakCopy
}

func newSoakTracker() *soakTracker {
	return &soakTracker{points: map[soakKey][]soakPoint{}, verified: map[soakKey]int{}, first: map[int]selftest.SoakGPU{}, firstAt: map[int]int64{}, replay: map[int]*soakEvent{},
		throttle: map[int]*soakEvent{}, powerCap: map[int]*soakEvent{}, maxTemp: map[int]int{}}
}

// round records a finished round.
func (t *soakTracker) round(rd *selftest.SoakRound) {
	for _, c := range rd.Copies {
		k := soakKey{c.Src, c.Dst, c.Method, c.Direction, rd.Bytes}
		if c.Error == "" {
			t.points[k] = append(t.points[k], soakPoint{rd.Round, rd.AtMS, c.GBps})
		}
		if c.Verified {
			t.verified[k]++
		}
		if c.Mismatch != nil && t.corrupt == nil {
			t.corrupt = &soakCorrupt{rd.Round, rd.AtMS, rd.Bytes, c}
		}
	}
	for _, g := range rd.GPUs {
		if g.TemperatureC != nil {
			t.maxTemp[g.GPU] = max(t.maxTemp[g.GPU], *g.TemperatureC)
		}
		if g.ThrottleReasons != nil {
			for _, x := range []struct {
				m    map[int]*soakEvent
				bits uint64
			}{{t.throttle, selftest.ThrottleHeat}, {t.powerCap, selftest.ThrottlePowerCap}} {
				got := *g.ThrottleReasons & x.bits
				if got == 0 {
					continue
				}
				e := x.m[g.GPU]
				if e == nil {
					e = &soakEvent{round: rd.Round, atMS: rd.AtMS}
					if g.TemperatureC != nil {
						e.temp = *g.TemperatureC
					}
					x.m[g.GPU] = e
				}
				e.from |= int64(got)
				e.to++
			}
		}
	}
	for _, g := range rd.GPUs {
		f, ok := t.first[g.GPU]
		if !ok {
			t.first[g.GPU], t.firstAt[g.GPU] = g, rd.AtMS
			continue
		}
		if f.ReplayCounter >= 0 && g.ReplayCounter > f.ReplayCounter {
			if e := t.replay[g.GPU]; e == nil {
				t.replay[g.GPU] = &soakEvent{round: rd.Round, atMS: rd.AtMS, from: f.ReplayCounter, to: g.ReplayCounter}
			} else {
				e.to = g.ReplayCounter
			}
		}
	}
	for _, ev := range rd.Events {
		t.events = append(t.events, soakEventAt{rd.Round, rd.AtMS, ev})
	}
}

// hard says what in a recorded round ends the soak: a link trained below its first
// sample, or any kernel-log event (the verdict fails each; going on would only pile
// up a broken GPU's errors).
func (t *soakTracker) hard(rd *selftest.SoakRound) string {
	for _, g := range rd.GPUs {
		f := t.first[g.GPU]
		if g.LinkGen < f.LinkGen || g.LinkWidth < f.LinkWidth {
			return fmt.Sprintf("GPU%d's link retrained from Gen%d x%d to Gen%d x%d", g.GPU, f.LinkGen, f.LinkWidth, g.LinkGen, g.LinkWidth)
		}
	}
	if len(rd.Events) > 0 {
		ev := rd.Events[0]
		return fmt.Sprintf("kernel log: %s", ev.Line)
	}
	return ""
}

// pairs summarises every tracked copy, in a fixed order.
func (t *soakTracker) pairs() []selftest.SoakPair {
	out := []selftest.SoakPair{}
	for k, pts := range t.points {
		p := selftest.SoakPair{Src: k.src, Dst: k.dst, Method: k.method, Direction: k.direction, Bytes: k.bytes, Rounds: len(pts), Verified: t.verified[k]}
		p.StartGBps, p.EndGBps = startEnd(pts)
		p.MinGBps, p.MinRound = pts[0].gbps, pts[0].round
		for _, x := range pts {
			if x.gbps < p.MinGBps {
				p.MinGBps, p.MinRound = x.gbps, x.round
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b selftest.SoakPair) int {
		return cmp.Or(cmp.Compare(a.Src, b.Src), cmp.Compare(a.Dst, b.Dst), cmp.Compare(a.Method, b.Method), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Bytes, b.Bytes))
	})
	return out
}

// soakWindow is how many of a copy's rounds make its start and its end figure: the
// median of its first three and of its last three rounds at that size, so one slow
// sample (another process on the box, a clock change) moves neither.
const soakWindow = 3

// startEnd is a copy's figure at the start and at the end of the soak; end is 0 when
// the copy ran fewer than 2*soakWindow rounds (start and end would overlap).
func startEnd(pts []soakPoint) (start, end float64) {
	fig := func(ps []soakPoint) float64 {
		xs := make([]float64, len(ps))
		for i, p := range ps {
			xs[i] = p.gbps
		}
		return cuda.Median(xs)
	}
	start = fig(pts[:min(soakWindow, len(pts))])
	if len(pts) >= 2*soakWindow {
		end = fig(pts[len(pts)-soakWindow:])
	}
	return start, end
}

// judgeSoak files the soak's findings: what changed over time, each with when.
func judgeSoak(r *selftest.Report, s *selftest.Soak, t *soakTracker, so soakOptions) {
	add := func(sev, id, subject, msg, evidence, hint string) {
		r.Findings = append(r.Findings, selftest.Finding{ID: id, Status: sev, Subject: subject, Message: msg, Evidence: evidence, Hint: hint})
	}
	if c := t.corrupt; c != nil {
		mm := c.c.Mismatch
		add(selftest.SevFail, "soak.corrupt", soakSubject(c.c.Src, c.c.Dst, c.c.Method, c.c.Direction),
			fmt.Sprintf("%s of %s delivered wrong data in round %d (%s): first bad word at byte %d", soakCopyName(c.c.Src, c.c.Dst, c.c.Method, c.c.Direction), cuda.Size(c.bytes), c.round, soakAt(c.atMS), mm.Offset),
			fmt.Sprintf("got %#08x, want %#08x; %d words wrong", mm.Got, mm.Want, mm.Words),
			"data went bad under sustained load: reseat or replace the riser/retimer on this path, then soak again; a card that corrupts alone (local copy) is the card")
	}
	for _, e := range t.events {
		add(selftest.SevFail, "soak.kernel", e.ev.Kind, fmt.Sprintf("kernel log %s event in round %d (%s)", e.ev.Kind, e.round, soakAt(e.atMS)), e.ev.Line,
			"the kernel.* finding for the same line says what it means; the time says how long the box held")
	}
	gpus := make([]int, 0, len(t.first))
	for g := range t.first {
		gpus = append(gpus, g)
	}
	slices.Sort(gpus)
	for _, g := range gpus {
		f := t.first[g]
		for _, rd := range s.Series {
			for _, x := range rd.GPUs {
				if x.GPU == g && (x.LinkGen < f.LinkGen || x.LinkWidth < f.LinkWidth) {
					add(selftest.SevFail, "soak.link", fmt.Sprintf("GPU%d", g),
						fmt.Sprintf("GPU%d's PCIe link retrained from Gen%d x%d to Gen%d x%d by round %d (%s)", g, f.LinkGen, f.LinkWidth, x.LinkGen, x.LinkWidth, rd.Round, soakAt(rd.AtMS)),
						fmt.Sprintf("NVML link gen/width at the start Gen%d x%d, then Gen%d x%d", f.LinkGen, f.LinkWidth, x.LinkGen, x.LinkWidth),
						"the link lost lanes or speed under load: a marginal riser, retimer or slot; reseat, try another slot, or force the retimer's gen in the BIOS")
					goto nextGPU
				}
			}
		}
		if e := t.replay[g]; e != nil {
			add(selftest.SevWarn, "soak.replay", fmt.Sprintf("GPU%d", g),
				fmt.Sprintf("GPU%d's PCIe replay counter rose from %d to %d, first in round %d (%s)", g, e.from, e.to, e.round, soakAt(e.atMS)),
				fmt.Sprintf("nvmlDeviceGetPcieReplayCounter %d -> %d", e.from, e.to),
				"link-level retries: the data still arrived, but the link is marginal (signal integrity of the riser/retimer); watch whether it keeps rising")
		}
	nextGPU:
	}
	for _, g := range gpus {
		temp := func(e *soakEvent) string {
			if e.temp == 0 {
				return ""
			}
			return fmt.Sprintf(" at %d °C (hottest sample %d °C)", e.temp, t.maxTemp[g])
		}
		if e := t.throttle[g]; e != nil {
			add(selftest.SevWarn, "soak.throttle", fmt.Sprintf("GPU%d", g),
				fmt.Sprintf("GPU%d's clocks were held down (%s) in %d samples, first in round %d (%s)%s", g, selftest.ThrottleNames(uint64(e.from)), e.to, e.round, soakAt(e.atMS), temp(e)),
				fmt.Sprintf("nvmlDeviceGetCurrentClocksThrottleReasons mask %#x", e.from),
				"heat or a hardware slowdown signal under sustained load: check the card's airflow, fans and the chassis; bandwidth figures taken while throttled are not the card's")
		}
		if e := t.powerCap[g]; e != nil {
			add(selftest.SevInfo, "soak.power_cap", fmt.Sprintf("GPU%d", g),
				fmt.Sprintf("GPU%d ran at its power cap in %d samples, first in round %d (%s)%s", g, e.to, e.round, soakAt(e.atMS), temp(e)),
				"nvmlDeviceGetCurrentClocksThrottleReasons: SW power cap", "normal for a card at full load; a lower cap than the card's default is set with nvidia-smi -pl")
		}
	}
	if so.driftPct > 0 {
		// One finding per copy (pair, method, direction): the size that fell most.
		type copyKey struct {
			src, dst          int
			method, direction string
		}
		worst := map[copyKey]selftest.SoakPair{}
		var order []copyKey
		drop := func(p selftest.SoakPair) float64 { return 100 * (p.StartGBps - p.EndGBps) / p.StartGBps }
		for _, p := range s.Pairs {
			if p.EndGBps <= 0 || p.StartGBps <= 0 || drop(p) <= so.driftPct {
				continue
			}
			k := copyKey{p.Src, p.Dst, p.Method, p.Direction}
			w, ok := worst[k]
			if !ok {
				order = append(order, k)
			}
			if !ok || drop(p) > drop(w) {
				worst[k] = p
			}
		}
		for _, k := range order {
			p := worst[k]
			add(selftest.SevWarn, "soak.drift", soakSubject(p.Src, p.Dst, p.Method, p.Direction),
				fmt.Sprintf("%s fell %.0f %% over the soak (at %s): %.1f GB/s at the start, %.1f at the end (lowest %.1f in round %d, %s)",
					soakCopyName(p.Src, p.Dst, p.Method, p.Direction), drop(p), cuda.Size(p.Bytes), p.StartGBps, p.EndGBps, p.MinGBps, p.MinRound, soakAt(roundAt(t, p))),
				fmt.Sprintf("median of its first %d rounds at that size vs its last %d; the limit is %.0f %%", soakWindow, soakWindow, so.driftPct),
				"bandwidth that falls as the box warms up is throttling or a link falling back: see the soak series' link and replay figures of both GPUs")
		}
	}
}

// roundAt is when the round of p's lowest figure started.
func roundAt(t *soakTracker, p selftest.SoakPair) int64 {
	for _, x := range t.points[soakKey{p.Src, p.Dst, p.Method, p.Direction, p.Bytes}] {
		if x.round == p.MinRound {
			return x.atMS
		}
	}
	return 0
}

// soakSubject names a copy the way the self-test's copy findings do.
func soakSubject(src, dst int, method, dir string) string {
	if src == dst {
		return fmt.Sprintf("GPU%d %s local", src, method)
	}
	return fmt.Sprintf("GPU%d->GPU%d %s %s", src, dst, method, dir)
}

// soakFloors fails a peer copy whose sustained figure at the recipe's copy size (the
// size its floors are written for) is below its topology class's floor
// (selftest.thresholds): the median of its last three rounds, or of its first three
// when it ran fewer than six.
func soakFloors(r *selftest.Report, s *selftest.Soak, rc *recipe.Recipe, full int64) {
	if rc == nil || len(rc.Selftest.Thresholds) == 0 {
		return
	}
	for _, p := range s.Pairs {
		if p.Src == p.Dst || p.Bytes != full {
			continue
		}
		topo := r.PairTopology(r.GPUIndex(p.Src), r.GPUIndex(p.Dst))
		th, ok := rc.Selftest.Thresholds[topo]
		if !ok {
			continue
		}
		floor, key := th.UnidirGBps, "min_unidir_gbps"
		if p.Direction == selftest.DirBidir {
			floor, key = th.BidirGBps, "min_bidir_gbps"
		}
		fig, which := p.EndGBps, "at the end"
		if fig <= 0 {
			fig, which = p.StartGBps, "over its rounds"
		}
		if floor <= 0 || fig >= floor {
			continue
		}
		r.Findings = append(r.Findings, selftest.Finding{ID: "soak.floor", Status: selftest.SevFail, Subject: soakSubject(p.Src, p.Dst, p.Method, p.Direction),
			Message: fmt.Sprintf("%s ran %.1f GB/s %s of the soak, below the %s floor of %.1f GB/s (%.1f at the start; lowest %.1f in round %d)",
				soakCopyName(p.Src, p.Dst, p.Method, p.Direction), fig, which, topo, floor, p.StartGBps, p.MinGBps, p.MinRound),
			Evidence: fmt.Sprintf("selftest.thresholds.%s.%s=%g, %d rounds at %s", topo, key, floor, p.Rounds, cuda.Size(p.Bytes)),
			Hint:     "the pair cannot hold its bandwidth under sustained load: see soak.drift, soak.throttle and soak.link for why, and the series for when"})
	}
}
