package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/kmsg"
)

// The burn-in mode (--soak, docs/burn-in.md). After the one-shot phases, rounds run
// until the duration ends, --soak-rounds is reached or a round fails hard. Each round
// is the cuda phase again in a child of its own (a wedged GPU is killed at the phase
// deadline and named, as in the self-test) with a new pattern seed and another copy
// size, then the nccl phase (every element of every all-reduce checked) when the
// one-shot ran it, then NVML again (link, replay counter, BAR1), then the kernel log.

// soakOptions are the soak's settings: flags, over the recipe's [selftest.soak].
type soakOptions struct {
	duration     time.Duration
	rounds       int     // 0: no bound but the duration
	driftPct     float64 // a pair ending this many percent below its start warns
	aerMax       int64   // correctable AER errors a device may gain before soak.aer warns
	corruptRound int     // test hook: inject one flipped word in this round (0: none)
	progress     string  // --soak-progress: the progress file ("" none)
}

// soakSettings are the soak's options: a flag given on the command line, else the
// recipe's [selftest.soak] (the image's recipe, so a boot soaks as its recipe says),
// else the flag's default.
func soakSettings(o *options, rc *recipe.Recipe) soakOptions {
	so := o.soak
	if rc == nil {
		return so
	}
	rs := rc.Selftest.Soak
	if !o.set["soak-rounds"] {
		so.rounds = rs.Rounds
	}
	if !o.set["soak-drift"] {
		so.driftPct = rs.MaxDriftPct
	}
	if !o.set["soak-aer-correctable"] {
		so.aerMax = int64(rs.MaxAERCorrectable)
	}
	return so
}

// soakSizes are the copy sizes a soak cycles through, from the one-shot's size: the
// size itself, a quarter, a sixteenth and an odd size between (a multiple of 16 that is
// no power of two, so a fault tied to aligned transfers has somewhere to show).
func soakSizes(full int64) []int64 {
	sizes := []int64{full, full / 4, full / 16, full/2 + 16*37}
	out := sizes[:0]
	for _, s := range sizes {
		s &^= 15
		if s >= 16 && s <= full && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = append(out, 16)
	}
	return out
}

// soakSeed is round's pattern seed: never 0 (the one-shot's), different every round.
func soakSeed(round int) uint32 { return uint32(round)*0x01000193 | 1 }

// soak runs the rounds and writes r.Soak and its findings. in is the one-shot's
// input (the cuda phase's settings); deadlines the per-phase limits.
func soak(ctx context.Context, rc *recipe.Recipe, so soakOptions, r *selftest.Report, self string, in *phaseInput, deadlines map[string]time.Duration, watch *kmsg.Watch, stderr io.Writer) {
	start := time.Now()
	s := &selftest.Soak{RequestedMS: so.duration.Milliseconds(), Stride: 1, Series: []selftest.SoakRound{}, Pairs: []selftest.SoakPair{}}
	r.Soak = s
	sizes := soakSizes(in.CopyBytes)
	ncclOK := r.NCCL != nil && r.NCCL.Error == ""
	end := start.Add(so.duration)
	tr := newSoakTracker()
	aer := newSoakAER(in.Root, r.GPUs)
	ecc := newSoakECC(r.GPUs)
	lastRound := time.Duration(0)
	pw := newProgressWriter(so.progress, stderr)
	// Ctrl-C on the console (SIGINT) or a SIGTERM ends the soak after the round in
	// flight, and the report of every round so far is written as for any other end.
	// (The phase children are in process groups of their own: the terminal's SIGINT
	// does not reach them, so the round finishes within its phase deadlines.)
	intr, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	defer func() {
		s.ElapsedMS = time.Since(start).Milliseconds()
		s.Pairs = tr.pairs()
		s.AER = aer.summary()
		judgeSoak(r, s, tr, so)
		judgeAER(r, aer, so.aerMax)
		judgeECC(r, ecc)
		soakFloors(r, s, rc, in.CopyBytes)
		pw.end(r, s, tr)
	}()
	for round := 1; ; round++ {
		switch {
		case !time.Now().Before(end):
			s.Stopped = "duration"
			return
		case so.rounds > 0 && round > so.rounds:
			s.Stopped = "rounds"
			return
		case ctx.Err() != nil:
			s.Stopped = "deadline"
			return
		case intr.Err() != nil:
			s.Stopped = "interrupted"
			return
		}
		s.Rounds = round
		rd := selftest.SoakRound{Round: round, AtMS: time.Since(start).Milliseconds(), Copies: []selftest.SoakCopy{}, GPUs: []selftest.SoakGPU{}, Events: []selftest.KEvent{}}
		cin := *in
		cin.Phase = selftest.PhaseCUDA
		cin.Seed = soakSeed(round)
		cin.CopyBytes = sizes[(round-1)%len(sizes)]
		cin.HighMem, cin.HighMemFrc = nil, false // the one-shot probed high memory; rounds repeat the copies
		cin.Corrupt = round == so.corruptRound
		cin.SoakRound = round
		rd.Bytes, rd.Seed = cin.CopyBytes, cin.Seed
		// NVML is sampled while the copies run, not after (an idle GPU's clocks and
		// throttle reasons say nothing about load): halfway through the previous round.
		sampled := make(chan []selftest.SoakGPU, 1)
		go func(delay time.Duration) {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
			}
			var x selftest.SoakRound
			soakNVML(ctx, self, in, round, deadlines, r, &x)
			sampled <- x.GPUs
		}(min(lastRound/2, 5*time.Second))
		t0 := time.Now()
		hard := soakCopies(ctx, self, &cin, deadlines, &rd, stderr)
		if hard == "" && ncclOK {
			hard = soakAllReduce(ctx, self, in, round, deadlines, &rd, stderr)
		}
		rd.GPUs = append(rd.GPUs, <-sampled...)
		lastRound = time.Since(t0)
		if watch != nil {
			evs, err := watch.Events()
			if err == nil {
				rd.Events = append(rd.Events, evs...)
				r.KernelEvents = append(r.KernelEvents, evs...)
			}
		}
		tr.round(&rd)
		aer.round(&rd)
		ecc.round(&rd)
		if hard == "" {
			hard = cmp.Or(tr.hard(&rd), aer.hard(&rd), ecc.hard(&rd))
		}
		if rd.Error == "" {
			rd.Error = hard
		}
		s.AddRound(rd)
		s.ElapsedMS = time.Since(start).Milliseconds()
		pw.round(r, s, tr, &rd)
		fmt.Fprintf(stderr, "p2pcheck: soak round %d at %s: %s\n", round, time.Duration(rd.AtMS)*time.Millisecond, roundLine(&rd))
		if intr.Err() != nil && hard == "" {
			fmt.Fprintf(stderr, "p2pcheck: interrupted: soak ends after round %d; writing the report\n", round)
		}
		if hard != "" {
			s.Stopped, s.StoppedAt = "failure", fmt.Sprintf("round %d at %s: %s", round, soakAt(rd.AtMS), hard)
			return
		}
	}
}

// soakCopies runs the round's cuda phase; it returns what stops the soak ("" none).
func soakCopies(ctx context.Context, self string, in *phaseInput, deadlines map[string]time.Duration, rd *selftest.SoakRound, stderr io.Writer) string {
	res := runPhase(ctx, self, in, deadlines[selftest.PhaseCUDA], stderr)
	switch {
	case res.stalled:
		return fmt.Sprintf("the copy phase did not finish within %s", deadlines[selftest.PhaseCUDA])
	case res.err != nil:
		return "the copy phase crashed: " + res.err.Error()
	case res.out.CUDA == nil:
		return "the copy phase answered nothing: " + res.out.Error
	}
	c := res.out.CUDA
	for _, cp := range c.Copies {
		rd.Copies = append(rd.Copies, selftest.SoakCopy{Src: cp.Src, Dst: cp.Dst, Method: cp.Method, Direction: cp.Direction, GBps: cp.GBps, Verified: cp.Verified, Mismatch: cp.Mismatch, Error: cp.Error})
	}
	for _, l := range c.Latencies {
		if l.Src != l.Dst && l.Error == "" {
			if rd.Latency == nil {
				rd.Latency = map[string]float64{}
			}
			rd.Latency[fmt.Sprintf("%d->%d", l.Src, l.Dst)] = l.US
		}
	}
	if res.out.Error != "" {
		return "the copy phase failed: " + res.out.Error
	}
	for _, cp := range c.Copies {
		if cp.Error != "" {
			return fmt.Sprintf("%s failed: %s", soakCopyName(cp.Src, cp.Dst, cp.Method, cp.Direction), cp.Error)
		}
		if cp.Mismatch != nil {
			return fmt.Sprintf("%s of %s: word at byte %d was %#08x, want %#08x (%d words wrong)", soakCopyName(cp.Src, cp.Dst, cp.Method, cp.Direction), cuda.Size(cp.Bytes), cp.Mismatch.Offset, cp.Mismatch.Got, cp.Mismatch.Want, cp.Mismatch.Words)
		}
	}
	return ""
}

// soakAllReduce runs the round's all-reduce sweep: from an eighth of the one-shot's
// largest size up to it (four sizes), every element checked against the exact sum.
func soakAllReduce(ctx context.Context, self string, in *phaseInput, round int, deadlines map[string]time.Duration, rd *selftest.SoakRound, stderr io.Writer) string {
	nin := *in
	nin.Phase = selftest.PhaseNCCL
	nin.NCCLMin = max(in.NCCLMax/8, 8)
	nin.SoakRound = round
	res := runPhase(ctx, self, &nin, deadlines[selftest.PhaseNCCL], stderr)
	ar := &selftest.SoakAllReduce{}
	rd.AllReduce = ar
	switch {
	case res.stalled:
		ar.Error = fmt.Sprintf("did not finish within %s", deadlines[selftest.PhaseNCCL])
	case res.err != nil:
		ar.Error = "crashed: " + res.err.Error()
	case res.out.NCCL == nil:
		ar.Error = "answered nothing: " + res.out.Error
	default:
		n := res.out.NCCL
		ar.BusBWAtMax, ar.Sizes, ar.Error = n.BusBWAtMax, len(n.Sizes), n.Error
		for _, sz := range n.Sizes {
			ar.Wrong += sz.Wrong
		}
		if ar.Wrong > 0 {
			return fmt.Sprintf("all-reduce: %d elements differ from the exact sum", ar.Wrong)
		}
	}
	if ar.Error != "" {
		return "all-reduce " + ar.Error
	}
	return ""
}

// soakNVML samples NVML during the round (the bar1 phase: NVML's per-GPU answers).
// It only reads r.GPUs, so it may run beside the round's other children.
func soakNVML(ctx context.Context, self string, in *phaseInput, round int, deadlines map[string]time.Duration, r *selftest.Report, rd *selftest.SoakRound) {
	nin := *in
	nin.Phase = selftest.PhaseBAR1
	nin.SoakRound = round
	res := runPhase(ctx, self, &nin, deadlines[selftest.PhaseNVML], io.Discard)
	if res.stalled || res.err != nil || res.out.BAR1 == nil {
		return
	}
	index := map[string]int{}
	for i, g := range r.GPUs {
		index[strings.ToLower(g.BDF)] = i
	}
	bdfs := make([]string, 0, len(res.out.BAR1.GPUs))
	for b := range res.out.BAR1.GPUs {
		bdfs = append(bdfs, b)
	}
	sort.Strings(bdfs)
	for k, b := range bdfs {
		g := res.out.BAR1.GPUs[b]
		i, ok := index[strings.ToLower(b)]
		if !ok {
			i = k
		}
		rd.GPUs = append(rd.GPUs, selftest.SoakGPU{GPU: i, LinkGen: g.LinkGen, LinkWidth: g.LinkWidth, ReplayCounter: g.ReplayCounter, BAR1Used: g.BAR1Used,
			TemperatureC: g.TemperatureC, SMClockMHz: g.SMClockMHz, MemClockMHz: g.MemClockMHz, PowerMW: g.PowerMW, ThrottleReasons: g.ThrottleReasons, ECC: g.ECC})
	}
	slices.SortFunc(rd.GPUs, func(a, b selftest.SoakGPU) int { return cmp.Compare(a.GPU, b.GPU) })
}

func soakCopyName(src, dst int, method, dir string) string {
	if src == dst {
		return fmt.Sprintf("GPU%d local %s copy", src, method)
	}
	return fmt.Sprintf("GPU%d->GPU%d %s %s", src, dst, method, dir)
}

// soakAt writes a time from the start of the soak as h:mm:ss.
func soakAt(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	return fmt.Sprintf("T+%d:%02d:%02d", int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60)
}

// roundLine is the console's progress line for a round.
func roundLine(rd *selftest.SoakRound) string {
	var peers []float64
	verified := 0
	for _, c := range rd.Copies {
		if c.Verified {
			verified++
		}
		if c.Src != c.Dst && c.Direction == selftest.DirWrite {
			peers = append(peers, c.GBps)
		}
	}
	line := fmt.Sprintf("%d/%d copies verified at %s", verified, len(rd.Copies), cuda.Size(rd.Bytes))
	if len(peers) > 0 {
		line += fmt.Sprintf(", peer writes %.1f..%.1f GB/s", slices.Min(peers), slices.Max(peers))
	}
	if rd.AllReduce != nil {
		line += fmt.Sprintf(", all-reduce busbw %.1f GB/s, %d wrong", rd.AllReduce.BusBWAtMax, rd.AllReduce.Wrong)
	}
	if len(rd.Events) > 0 {
		line += fmt.Sprintf(", %d kernel events", len(rd.Events))
	}
	for _, a := range rd.AER {
		line += fmt.Sprintf(", AER %s +%d correctable +%d uncorrectable", a.BDF, a.Correctable, a.NonFatal+a.Fatal)
	}
	if rd.Error != "" {
		line += "; STOP: " + rd.Error
	}
	return line
}
