package cuda_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The FAKE driver's time is virtual: a copy of n bytes advances its stream's clock by
// n / rate, so every bandwidth figure the engine reports must come out as the rate
// the box was configured with, whatever CopyBytes, Loops and Samples are. A figure off
// by a loop, a unit or a leg is an arithmetic slip in the engine.
func near(got, want float64) bool { return math.Abs(got-want) <= 1e-4*math.Abs(want) }

func key(c selftest.Copy) string {
	return fmt.Sprintf("%d->%d %s %s", c.Src, c.Dst, c.Method, c.Direction)
}

func copyByKey(t *testing.T, r *cuda.Result, k string) selftest.Copy {
	t.Helper()
	for _, c := range r.Copies {
		if key(c) == k {
			return c
		}
	}
	t.Fatalf("no copy %s in %d copies", k, len(r.Copies))
	return selftest.Copy{}
}

// Every local copy, then every pair with peer access in both directions (write, read,
// bidir; CE and SM), each timed at the box's rate and verified; a pair with access
// one way only is not tried, and both its entries say which direction the driver
// refused.
func TestCopiesOverFake(t *testing.T) {
	pair := [][]float64{{0, 25, 0}, {22, 0, 18}, {0, 16, 0}}
	cfg := gpufake.FakeConfig{
		GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}, {MemBytes: 4 << 30}},
		// 0 may reach 2, 2 may not reach 0: the pair is refused as a whole.
		CanAccess: [][]bool{{false, true, true}, {true, false, true}, {false, true, false}},
		PairGBps:  pair,
		LocalGBps: 900, SMFactor: 0.5,
	}
	link := func(src, dst int) float64 { return float64(100 + 10*src + dst) }
	const bytes = 64 << 10
	box := gpufake.New(cfg)
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: bytes,
		Loops: 5, Samples: 4, Warmup: 2, Verify: true, SM: true, Bidir: true, LinkGBps: link})
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	var want []string
	for g := 0; g < 3; g++ {
		want = append(want, fmt.Sprintf("%d->%d ce local", g, g), fmt.Sprintf("%d->%d sm local", g, g))
	}
	peers := func(a, b int) {
		for _, p := range [][2]int{{a, b}, {b, a}} {
			want = append(want,
				fmt.Sprintf("%d->%d ce write", p[0], p[1]), fmt.Sprintf("%d->%d ce read", p[0], p[1]),
				fmt.Sprintf("%d->%d ce bidir", p[0], p[1]),
				fmt.Sprintf("%d->%d sm write", p[0], p[1]), fmt.Sprintf("%d->%d sm read", p[0], p[1]))
		}
	}
	peers(0, 1)
	want = append(want, "0->2 ce write", "2->0 ce write") // refused
	peers(1, 2)
	// Peer access is asked for only where the driver allows it both ways: 0-1 and
	// 1-2, in both directions, once for the copies and once for the latencies.
	if n := box.Calls("cuCtxEnablePeerAccess"); n != 8 {
		t.Errorf("cuCtxEnablePeerAccess called %d times, want 8 (never for 0-2)", n)
	}
	var got []string
	for _, c := range r.Copies {
		got = append(got, key(c))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("copies\n%v\nwant\n%v", got, want)
	}
	for _, c := range r.Copies {
		k := key(c)
		if c.Bytes != bytes {
			t.Errorf("%s: %d bytes", k, c.Bytes)
		}
		wantLink := 0.0
		if c.Src != c.Dst {
			wantLink = link(c.Src, c.Dst)
		}
		if c.LinkGBps != wantLink {
			t.Errorf("%s: link %g GB/s, want %g", k, c.LinkGBps, wantLink)
		}
		if (c.Src == 0 && c.Dst == 2) || (c.Src == 2 && c.Dst == 0) {
			if !strings.Contains(c.Error, "peer access unavailable: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (cuDeviceCanAccessPeer(2->0) = 0)") ||
				c.Verified || c.GBps != 0 || len(c.Samples) != 0 {
				t.Errorf("%s: %+v, want the refusal of 2->0", k, c)
			}
			continue
		}
		rate := 900.0
		if c.Src != c.Dst {
			rate = pair[c.Src][c.Dst]
			if c.Direction == selftest.DirBidir {
				rate += pair[c.Dst][c.Src]
			}
		}
		if c.Method == selftest.MethodSM {
			rate *= 0.5
		}
		if c.Error != "" || !c.Verified || c.Mismatch != nil {
			t.Errorf("%s: %+v, want a verified copy", k, c)
		}
		if len(c.Samples) != 4 {
			t.Errorf("%s: %d samples, want 4", k, len(c.Samples))
		}
		for _, s := range c.Samples {
			if !near(s, rate) {
				t.Errorf("%s: sample %g GB/s, want %g", k, s, rate)
			}
		}
		if !near(c.GBps, rate) {
			t.Errorf("%s: %g GB/s, want %g", k, c.GBps, rate)
		}
	}
}

// A copy that delivers wrong bytes is reported corrupt: which copy, the byte offset
// of the first bad word, what should be there and what is, and how many words are
// wrong; the copies it did not touch stay verified. Without Verify nothing is
// checked, so nothing is verified either.
func TestCopyCorruptionOverFake(t *testing.T) {
	const bytes = 64 << 10
	type bad struct {
		offset, words int64
		inverted      bool // Got is the inverse of Want (one flipped word per leg)
	}
	for _, tc := range []struct {
		name   string
		faults []gpufake.Fault
		verify bool
		want   map[string]bad // copies with a mismatch; every other one is verified
	}{
		{name: "healthy", verify: true},
		{
			name:   "flipped word 0->1",
			faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 40}},
			verify: true,
			// The bidir copy of 1->0 has a leg 0->1 too.
			want: map[string]bad{"0->1 ce write": {40, 1, true}, "0->1 ce read": {40, 1, true}, "0->1 ce bidir": {40, 1, true}, "1->0 ce bidir": {40, 1, true}},
		},
		{
			name: "both legs of the bidir copy flipped",
			faults: []gpufake.Fault{
				{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 1000},
				{Kind: gpufake.FaultFlip, Copy: "1->0", Method: "ce", Offset: 1000},
			},
			verify: true,
			want: map[string]bad{"0->1 ce write": {1000, 1, true}, "0->1 ce read": {1000, 1, true}, "1->0 ce write": {1000, 1, true},
				"1->0 ce read": {1000, 1, true}, "0->1 ce bidir": {1000, 2, true}, "1->0 ce bidir": {1000, 2, true}},
		},
		{
			name:   "short SM copy 1->1",
			faults: []gpufake.Fault{{Kind: gpufake.FaultShort, Copy: "1->1", Method: "sm", Bytes: 1024}},
			verify: true,
			want:   map[string]bad{"1->1 sm local": {1024, (bytes - 1024) / 4, false}},
		},
		{
			name:   "not verified",
			faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 40}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}}, Faults: tc.faults})
			r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: bytes, Loops: 2, Samples: 1,
				Verify: tc.verify, SM: true, Bidir: true})
			if err != nil {
				t.Fatalf("cuda.Run: %v", err)
			}
			if len(r.Copies) != 14 {
				t.Fatalf("%d copies, want 14", len(r.Copies))
			}
			for _, c := range r.Copies {
				k := key(c)
				if c.Error != "" || c.GBps <= 0 {
					t.Errorf("%s: %+v", k, c)
				}
				w, ok := tc.want[k]
				switch {
				case !tc.verify:
					if c.Verified || c.Mismatch != nil {
						t.Errorf("%s: verified %v, mismatch %+v without Verify", k, c.Verified, c.Mismatch)
					}
				case !ok:
					if !c.Verified || c.Mismatch != nil {
						t.Errorf("%s: verified %v, mismatch %+v, want intact", k, c.Verified, c.Mismatch)
					}
				default:
					m := c.Mismatch
					if c.Verified || m == nil {
						t.Errorf("%s: verified %v, mismatch %+v, want a mismatch", k, c.Verified, m)
						break
					}
					if m.Offset != w.offset || m.Words != w.words || m.Got == m.Want || w.inverted != (m.Got == ^m.Want) {
						t.Errorf("%s: mismatch %+v, want offset %d, %d words, inverted %v", k, *m, w.offset, w.words, w.inverted)
					}
				}
			}
		})
	}
}

// A short copy's first bad word is where its bytes stop, and what should be there is
// the source's word: the one a healthy copy of the same pair delivers.
func TestMismatchWantIsTheSource(t *testing.T) {
	run := func(seed uint32, faults ...gpufake.Fault) *cuda.Result {
		box := gpufake.New(gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}}, Faults: faults})
		r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, Verify: true, Seed: seed})
		if err != nil {
			t.Fatalf("cuda.Run: %v", err)
		}
		return r
	}
	// A flip at byte 512 tells what the source holds there: the inverse of what came.
	flipped := copyByKey(t, run(0, gpufake.Fault{Kind: gpufake.FaultFlip, Copy: "1->0", Offset: 512}), "1->0 ce write").Mismatch
	short := copyByKey(t, run(0, gpufake.Fault{Kind: gpufake.FaultShort, Copy: "1->0", Bytes: 512}), "1->0 ce write").Mismatch
	if flipped == nil || short == nil {
		t.Fatalf("mismatches %+v, %+v", flipped, short)
	}
	if short.Offset != 512 || short.Want != flipped.Want || short.Got == short.Want || short.Words != (4096-512)/4 {
		t.Errorf("short copy: %+v, want offset 512, want 0x%08x, %d words", *short, flipped.Want, (4096-512)/4)
	}
	// Another Seed gives every source another pattern: a destination still holding an
	// earlier round's bytes cannot pass.
	other := copyByKey(t, run(7, gpufake.Fault{Kind: gpufake.FaultFlip, Copy: "1->0", Offset: 512}), "1->0 ce write").Mismatch
	if other == nil || other.Want == flipped.Want {
		t.Errorf("Seed 7: mismatch %+v, want another source word than 0x%08x", other, flipped.Want)
	}
	// Each GPU's source has its own pattern, so a copy from the wrong GPU shows.
	from0 := copyByKey(t, run(0, gpufake.Fault{Kind: gpufake.FaultFlip, Copy: "0->1", Offset: 512}), "0->1 ce write").Mismatch
	if from0 == nil || from0.Want == flipped.Want {
		t.Errorf("GPU 0's source: mismatch %+v, want another word than GPU 1's 0x%08x", from0, flipped.Want)
	}
}

var injectedAt = regexp.MustCompile(`GPU (\d+) -> GPU (\d+), the word at byte offset (\d+) of GPU (\d+)'s destination was inverted`)

// The CorruptOnce hook breaks exactly one copy, the first peer copy (with one GPU the
// first local one), and verification must find the word Result.Injected names.
func TestCorruptOnceOverFake(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gpus       int
		bytes      int64
		copy       string // the one copy with a mismatch
		wantOffset int64  // in the middle of the destination, or its last word
	}{
		{"two GPUs", 2, 64 << 10, "0->1 ce write", 4 * ((64<<10)/8 + 7)},
		{"one GPU", 1, 64 << 10, "0->0 ce local", 4 * ((64<<10)/8 + 7)},
		{"one vector", 2, 16, "0->1 ce write", 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: make([]gpufake.FakeGPU, tc.gpus)})
			r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: tc.bytes, Loops: 1, Samples: 1,
				Verify: true, CorruptOnce: true})
			if err != nil {
				t.Fatalf("cuda.Run: %v", err)
			}
			m := injectedAt.FindStringSubmatch(r.Injected)
			if m == nil {
				t.Fatalf("Injected %q names no place", r.Injected)
			}
			off, _ := strconv.ParseInt(m[3], 10, 64)
			c := copyByKey(t, r, tc.copy)
			if want := fmt.Sprintf("%d->%d", c.Src, c.Dst); m[1]+"->"+m[2] != want || m[4] != strconv.Itoa(c.Dst) {
				t.Errorf("Injected %q, want the copy %s", r.Injected, tc.copy)
			}
			if off != tc.wantOffset || c.Verified || c.Mismatch == nil || c.Mismatch.Offset != off || c.Mismatch.Words != 1 || c.Mismatch.Got != ^c.Mismatch.Want {
				t.Errorf("%s: %+v mismatch %+v, want the word at %d (Injected %q)", tc.copy, c, c.Mismatch, tc.wantOffset, r.Injected)
			}
			for _, o := range r.Copies {
				if key(o) != tc.copy && (!o.Verified || o.Mismatch != nil) {
					t.Errorf("%s: %+v, want it intact: only one copy is broken", key(o), o)
				}
			}
		})
	}
}

// A driver that refuses cuCtxEnablePeerAccess for a pair cuDeviceCanAccessPeer
// allowed: the pair's copies carry the driver's answer by name, no latency is tried
// there, and the rest of the run goes on.
func TestEnablePeerRefusedOverFake(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{
		GPUs:   make([]gpufake.FakeGPU, 3),
		Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuCtxEnablePeerAccess", Code: 217, Nth: 1}},
	})
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, Verify: true})
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	refused := 0
	for _, c := range r.Copies {
		if (c.Src == 0 && c.Dst == 1) || (c.Src == 1 && c.Dst == 0) {
			refused++
			if !strings.HasPrefix(c.Error, "peer access unavailable: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (") || c.Verified {
				t.Errorf("%s: %+v, want the driver's refusal by name", key(c), c)
			}
		} else if c.Error != "" || !c.Verified {
			t.Errorf("%s: %+v, want a verified copy", key(c), c)
		}
	}
	if refused != 2 {
		t.Errorf("%d copies of the refused pair, want 2", refused)
	}
	var lat []string
	for _, l := range r.Latencies {
		lat = append(lat, fmt.Sprintf("%d->%d", l.Src, l.Dst))
	}
	// cuCtxEnablePeerAccess fails only once: the latency pass tries 0-1 again.
	if want := []string{"0->0", "1->1", "2->2", "0->1", "1->0", "0->2", "2->0", "1->2", "2->1"}; !slices.Equal(lat, want) {
		t.Errorf("latencies %v, want %v", lat, want)
	}
}

// The high-memory probe runs on the GPUs named in HighMem, and with HighMemForce on
// every other GPU too, with the pretended BAR1 size; a GPU named twice is probed once.
func TestHighMemForceOverFake(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 3 << 30}, {MemBytes: 3 << 30}}})
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, Verify: true,
		HighMem:      []cuda.HighMemTarget{{Ordinal: 1, BAR1: 1 << 30, VRAM: 3 << 30}},
		HighMemForce: true, HighMemFakeBAR1: 2 << 30})
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	var got []string
	for _, h := range r.HighMem {
		got = append(got, fmt.Sprintf("GPU %d BAR1 %d VRAM %d", h.GPU, h.BAR1Bytes, h.VRAMBytes))
	}
	want := []string{"GPU 1 BAR1 1073741824 VRAM 3221225472", "GPU 0 BAR1 2147483648 VRAM 4294967296", "GPU 2 BAR1 2147483648 VRAM 3221225472"}
	if !slices.Equal(got, want) {
		t.Errorf("high-memory probes\n%v\nwant\n%v", got, want)
	}
}

// The spin gate that holds every stream until all copies are queued gives up after
// SpinTimeout: the kernel counts GPU clocks, so it must be handed SpinTimeout in that
// GPU's clocks (cuDeviceGetAttribute's clock rate), each GPU its own.
func TestSpinTimeoutInClocksOverFake(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{ClockKHz: 1500000}, {ClockKHz: 2000000}}})
	_, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1,
		SpinTimeout: 2500 * time.Millisecond})
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	// 1.5 GHz x 2.5 s and 2 GHz x 2.5 s.
	if want := map[int]uint64{0: 3750000000, 1: 5000000000}; !maps.Equal(box.SpinClocks, want) {
		t.Errorf("spin timeouts %v clocks, want %v", box.SpinClocks, want)
	}
}

// nvbandwidth's shape: each sample queues Warmup copies and then Loops timed ones
// (Warmup -1: none), and each latency sample LatencyWrites writes; the driver is
// asked for exactly those copies, no more.
func TestCopyCountsOverFake(t *testing.T) {
	for _, tc := range []struct {
		warmup, want int
	}{
		{3, 2*(3+5) + 2*7},
		{-1, 2*5 + 2*7},
	} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: make([]gpufake.FakeGPU, 1)})
		r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Verify: true,
			Warmup: tc.warmup, Loops: 5, Samples: 2, LatencyWrites: 7, LatencySamples: 2})
		if err != nil {
			t.Fatalf("Warmup %d: cuda.Run: %v", tc.warmup, err)
		}
		if len(r.Copies) != 1 || !r.Copies[0].Verified || len(r.Latencies) != 1 || !r.Latencies[0].Verified {
			t.Errorf("Warmup %d: copies %+v, latencies %+v", tc.warmup, r.Copies, r.Latencies)
		}
		if n := box.Calls("cuMemcpyAsync"); n != tc.want {
			t.Errorf("Warmup %d: %d copies queued, want %d", tc.warmup, n, tc.want)
		}
	}
}

// A failure that stops the phase is Run's error, in the result too, reported as
// itself: building the copy buffers, or giving back peer access or memory at the end;
// when both fail, the first, which stopped the phase, not the clean-up's.
func TestPhaseFailuresOverFake(t *testing.T) {
	code := func(call string, nth int) gpufake.Fault {
		return gpufake.Fault{Kind: gpufake.FaultCode, Call: call, Code: 2, Nth: nth}
	}
	for _, tc := range []struct {
		faults []gpufake.Fault
		want   string
		exact  bool // the error is that call's alone, no clean-up noise beside it
	}{
		// GPU 0's stream is made, GPU 1's is not.
		{[]gpufake.Fault{code("cuStreamCreate", 2)}, "cuStreamCreate on GPU 1: CUDA_ERROR_OUT_OF_MEMORY", true},
		{[]gpufake.Fault{code("cuMemHostAlloc", 1)}, "cuMemHostAlloc(64 B): CUDA_ERROR_OUT_OF_MEMORY", true},
		{[]gpufake.Fault{code("cuCtxDisablePeerAccess", 1)}, "cuCtxDisablePeerAccess(GPU 0 -> GPU 1): CUDA_ERROR_OUT_OF_MEMORY", false},
		{[]gpufake.Fault{code("cuMemFree_v2", 1)}, "cuMemFree_v2 on GPU 0: CUDA_ERROR_OUT_OF_MEMORY", false},
		{[]gpufake.Fault{code("cuCtxDisablePeerAccess", 1), code("cuMemFree_v2", 1)}, "cuCtxDisablePeerAccess(GPU 0 -> GPU 1): CUDA_ERROR_OUT_OF_MEMORY", true},
	} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: make([]gpufake.FakeGPU, 2), Faults: tc.faults})
		r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, Verify: true})
		if err == nil || r == nil {
			t.Errorf("%+v: Run succeeded", tc.faults)
			continue
		}
		if got := err.Error(); (tc.exact && got != tc.want) || !strings.Contains(got, tc.want) || r.CUDA.Error != got {
			t.Errorf("%+v: error %q, result's %q, want %q", tc.faults, got, r.CUDA.Error, tc.want)
		}
	}
}

// A soak runs the phase thousands of times in one process: each Run must give back
// every buffer, pinned host page, stream, event, module and context it took, also
// after the high-memory probe and after a failure.
func TestRunReleasesEverythingOverFake(t *testing.T) {
	for _, faults := range [][]gpufake.Fault{
		nil,
		{{Kind: gpufake.FaultFlip, Copy: "0->1"}},
		{{Kind: gpufake.FaultCode, Call: "cuStreamCreate", Code: 2, Nth: 2}},
	} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}}, Faults: faults})
		_, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, Verify: true,
			SM: true, Bidir: true, HighMemForce: true, HighMemFakeBAR1: 1 << 30})
		if (err != nil) != (len(faults) > 0 && faults[0].Kind == gpufake.FaultCode) {
			t.Errorf("%+v: Run: %v", faults, err)
		}
		for what, n := range box.Held() {
			if n != 0 {
				t.Errorf("%+v: after Run the driver still holds %d %s", faults, n, what)
			}
		}
	}
}
