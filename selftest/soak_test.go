package selftest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A round is faulty, and so kept in a downsampled series and marked "!" in the
// view, for anything it found: an error, a kernel event, AER growth, a wrong or
// failed all-reduce, a copy not verified or failed. A clean round is not.
func TestSoakRoundFaulty(t *testing.T) {
	clean := func() SoakRound {
		return SoakRound{Round: 3, Copies: []SoakCopy{{Src: 0, Dst: 1, Verified: true}, {Src: 1, Dst: 0, Verified: true}},
			AllReduce: &SoakAllReduce{BusBWAtMax: 20, Sizes: 4}, Events: []KEvent{}}
	}
	for _, tc := range []struct {
		name   string
		edit   func(r *SoakRound)
		faulty bool
	}{
		{"clean", func(r *SoakRound) {}, false},
		{"no all-reduce", func(r *SoakRound) { r.AllReduce = nil }, false},
		{"error", func(r *SoakRound) { r.Error = "cuCtxSynchronize: CUDA_ERROR_LAUNCH_TIMEOUT (702)" }, true},
		{"kernel event", func(r *SoakRound) { r.Events = []KEvent{{Kind: KEventXid, Code: 79}} }, true},
		{"AER grew", func(r *SoakRound) { r.AER = []SoakAERGrowth{{BDF: "0000:01:00.0", Correctable: 1}} }, true},
		{"all-reduce wrong", func(r *SoakRound) { r.AllReduce.Wrong = 1 }, true},
		{"all-reduce failed", func(r *SoakRound) { r.AllReduce.Error = "ncclAllReduce: unhandled cuda error (1)" }, true},
		{"second copy not verified", func(r *SoakRound) { r.Copies[1].Verified = false }, true},
		{"copy failed", func(r *SoakRound) { r.Copies[1].Error = "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS (700)" }, true},
	} {
		r := clean()
		tc.edit(&r)
		if got := r.Faulty(); got != tc.faulty {
			t.Errorf("%s: Faulty() = %v, want %v", tc.name, got, tc.faulty)
		}
	}
}

// The throttle reasons the soak names, in a fixed order; bits it does not know are
// left out.
func TestThrottleNames(t *testing.T) {
	for _, tc := range []struct {
		mask uint64
		want string
	}{
		{0, ""},
		{0x1, ""}, // GPU idle: not named
		{ThrottlePowerCap, "SW power cap"},
		{ThrottleHWSlowdown, "HW slowdown"},
		{ThrottleSWThermal, "SW thermal slowdown"},
		{ThrottleHWThermal, "HW thermal slowdown"},
		{ThrottleHWBrake, "HW power brake"},
		{ThrottleHeat | ThrottlePowerCap | 0x1, "SW power cap, HW slowdown, SW thermal slowdown, HW thermal slowdown, HW power brake"},
		{ThrottleSWThermal | ThrottleHWBrake, "SW thermal slowdown, HW power brake"},
	} {
		if got := ThrottleNames(tc.mask); got != tc.want {
			t.Errorf("ThrottleNames(%#x) = %q, want %q", tc.mask, got, tc.want)
		}
	}
}

// AddRound's edges: a series of one round keeps it; the latest round kept only for
// being the latest goes when the next comes, a faulty one stays; the stride starts
// at 1 and doubles exactly when the bound is passed.
func TestAddRoundEdges(t *testing.T) {
	rounds := func(s *Soak) []int {
		var out []int
		for _, x := range s.Series {
			out = append(out, x.Round)
		}
		return out
	}
	s := &Soak{}
	s.AddRound(SoakRound{Round: 1})
	if s.Stride != 1 || len(s.Series) != 1 {
		t.Fatalf("after one round: stride %d, %d entries", s.Stride, len(s.Series))
	}
	for n := 2; n <= SoakMaxSeries; n++ {
		s.AddRound(SoakRound{Round: n})
	}
	if s.Stride != 1 || len(s.Series) != SoakMaxSeries {
		t.Fatalf("at the bound: stride %d, %d entries, want 1 and %d (every round)", s.Stride, len(s.Series), SoakMaxSeries)
	}
	s.AddRound(SoakRound{Round: SoakMaxSeries + 1})
	// Past the bound: the odd rounds (1, 3, ..., 257) stay, the latest among them.
	if s.Stride != 2 || len(s.Series) != SoakMaxSeries/2+1 {
		t.Fatalf("past the bound: stride %d, %d entries, want 2 and %d", s.Stride, len(s.Series), SoakMaxSeries/2+1)
	}
	s.AddRound(SoakRound{Round: SoakMaxSeries + 2, Error: "a fault"})
	s.AddRound(SoakRound{Round: SoakMaxSeries + 3})
	s.AddRound(SoakRound{Round: SoakMaxSeries + 4})
	got := rounds(s)
	want := []int{SoakMaxSeries - 1, SoakMaxSeries + 1, SoakMaxSeries + 2, SoakMaxSeries + 3, SoakMaxSeries + 4}
	if tail := got[len(got)-len(want):]; !slices.Equal(tail, want) {
		t.Errorf("the series ends %v, want %v (the faulty round kept, round %d gone once %d came? no: it is on the stride)", tail, want, SoakMaxSeries+3, SoakMaxSeries+4)
	}
	s.AddRound(SoakRound{Round: SoakMaxSeries + 5})
	got = rounds(s)
	want = []int{SoakMaxSeries + 1, SoakMaxSeries + 2, SoakMaxSeries + 3, SoakMaxSeries + 5}
	if tail := got[len(got)-len(want):]; !slices.Equal(tail, want) {
		t.Errorf("the series ends %v, want %v: round %d was kept only for being the latest", tail, want, SoakMaxSeries+4)
	}
}

// soakOf is a 2-GPU soak of n rounds 30 s apart: copies at two sizes, GPU0->GPU1
// dropping to half from round 5, GPU1 warming, an Xid in round xid (0: none).
func soakOf(n, xid int) *Soak {
	s := &Soak{RequestedMS: int64(n) * 30000, Stopped: "duration"}
	for k := 1; k <= n; k++ {
		size := int64(256 << 20)
		if k%2 == 0 {
			size = 64 << 20
		}
		rate := 24.4
		if k >= 5 {
			rate = 12.2
		}
		t0, t1, p0, p1 := 40, min(40+3*k, 91), 250500, 300000+min(k, 50)*1000
		clock := 2500
		x := SoakRound{Round: k, AtMS: int64(k-1) * 30000, Bytes: size, Seed: uint32(k),
			Copies: []SoakCopy{
				{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, GBps: 900, Verified: true},
				{Src: 0, Dst: 1, Method: MethodSM, Direction: DirWrite, GBps: rate - 1, Verified: true},
				{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: rate, Verified: true},
				{Src: 1, Dst: 0, Method: MethodSM, Direction: DirRead, GBps: 20, Verified: true},
			},
			AllReduce: &SoakAllReduce{BusBWAtMax: 20 + float64(k%3), Sizes: 4},
			GPUs: []SoakGPU{
				{GPU: 0, LinkGen: 4, LinkWidth: 16, ReplayCounter: 0, TemperatureC: &t0, PowerMW: &p0},
				{GPU: 1, LinkGen: 4, LinkWidth: 16, ReplayCounter: int64(k / 2), TemperatureC: &t1, PowerMW: &p1, SMClockMHz: &clock},
			},
			Events: []KEvent{}}
		if k == xid {
			x.Events = []KEvent{{Kind: KEventXid, Code: 79, Line: "NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus."}}
			x.GPUs[1].LinkGen, x.GPUs[1].LinkWidth = 1, 8
			s.Stopped, s.StoppedAt = "failure", fmt.Sprintf("round %d, kernel event", k)
		}
		if k == 3 {
			x.AllReduce.Error = "ncclAllReduce: unhandled cuda error (1)"
		}
		s.AddRound(x)
		s.Rounds, s.ElapsedMS = k, int64(k)*30000-1500
		if k == xid {
			break
		}
	}
	return s
}

// The burn-in's console summary: how it ended, each copy at its largest size (a
// local copy named as such, no end figure for fewer than six rounds), each GPU's
// link, replay counter, temperature, clock and power first and last (W, from mW);
// then the time series. Held by goldens.
func TestRenderSoak(t *testing.T) {
	pairs := []SoakPair{
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, Bytes: 64 << 20, Rounds: 4, Verified: 4, StartGBps: 24.4, EndGBps: 12.2, MinGBps: 12.2, MinRound: 6},
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, Bytes: 256 << 20, Rounds: 4, Verified: 4, StartGBps: 24.44, EndGBps: 12.25, MinGBps: 12.15, MinRound: 7},
		{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, Bytes: 256 << 20, Rounds: 8, Verified: 8, StartGBps: 900, MinGBps: 899.96, MinRound: 2},
		{Src: 1, Dst: 0, Method: MethodSM, Direction: DirRead, Bytes: 256 << 20, Rounds: 3, Verified: 2, StartGBps: 20, EndGBps: 0, MinGBps: 0, MinRound: 0},
	}
	for _, tc := range []struct {
		name  string
		width int
		soak  func() *Soak
	}{
		{"soak-8", 80, func() *Soak { s := soakOf(8, 0); s.Pairs = pairs; return s }},
		{"soak-8-wide", 160, func() *Soak { s := soakOf(8, 0); s.Pairs = pairs; return s }},
		{"soak-xid", 80, func() *Soak { s := soakOf(12, 7); s.Pairs = pairs[2:3]; return s }},
		// A long soak: the series downsampled, its columns as many as the width
		// leaves, each the lowest bandwidth and the highest temperature of its
		// rounds; a label too long for its column clipped.
		{"soak-long", 80, func() *Soak {
			s := soakOf(400, 0)
			for i := range s.Series {
				s.Series[i].Copies = append(s.Series[i].Copies, SoakCopy{Src: 12, Dst: 13, Method: "copy-kernel", Direction: DirBidir, GBps: 40, Verified: true})
			}
			s.Series[100].Copies[2].GBps = 2
			return s
		}},
		{"soak-long-wide", 120, func() *Soak { return soakOf(400, 0) }},
		// A soak stopped before its first round: the line, no tables.
		{"soak-empty", 80, func() *Soak { return &Soak{RequestedMS: 3600000, Stopped: "interrupted"} }},
		// The last round without an NVML sample (the first has one): no first
		// and last to set side by side, so no GPU table; the sensor lines end in a gap.
		{"soak-last-no-nvml", 80, func() *Soak {
			s := soakOf(4, 0)
			s.Series[3].GPUs = nil
			return s
		}},
		// Rounds without NVML samples: no GPU table, no sensor lines.
		{"soak-no-nvml", 80, func() *Soak {
			s := soakOf(3, 0)
			for i := range s.Series {
				s.Series[i].GPUs = nil
				s.Series[i].AllReduce = nil
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			r := &Report{Soak: tc.soak()}
			renderSoak(&b, r)
			renderSoakSeries(&b, r, tc.width)
			golden(t, "render-"+tc.name, b.String())
		})
	}
}

// However long the soak, the series' last entry is the latest round, including
// the rounds that pass the bound while off the new stride (round 512 of a series
// at stride 2 halves it to stride 4).
func TestAddRoundKeepsTheLatest(t *testing.T) {
	s := &Soak{}
	for n := 1; n <= 2100; n++ {
		s.AddRound(SoakRound{Round: n})
		if last := s.Series[len(s.Series)-1].Round; last != n {
			t.Fatalf("after round %d (stride %d) the series ends at round %d", n, s.Stride, last)
		}
		if s.Series[0].Round != 1 {
			t.Fatalf("after round %d the series starts at round %d", n, s.Series[0].Round)
		}
	}
}
