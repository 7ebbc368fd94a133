package cuda_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The high-memory probe's seed (highmem.go): the copying GPU's ordinal is mixed in.
const seedHigh = 0x5EED4B1D

func highMem(t *testing.T, cfg gpufake.FakeConfig, targets ...cuda.HighMemTarget) []selftest.HighMem {
	t.Helper()
	box := gpufake.New(cfg)
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 1, Samples: 1, HighMem: targets})
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	if len(r.HighMem) != len(targets) {
		t.Fatalf("%d probes, want %d: %+v", len(r.HighMem), len(targets), r.HighMem)
	}
	for what, n := range box.Held() {
		if n != 0 {
			t.Errorf("after Run the driver still holds %d %s", n, what)
		}
	}
	return r.HighMem
}

// The probe copies into and out of the buffer from the first GPU with peer access both
// ways, after ballast of the BAR1 size (bounded by what is free less the buffer and a
// 1 GiB margin, in 2 MiB steps), and says what that placement proves.
func TestHighMemOverFake(t *testing.T) {
	// GPU 1 reaches 0 but 0 does not reach 1: the peer of both is 2.
	cfg := gpufake.FakeConfig{GPUs: gpus(3), CanAccess: [][]bool{{false, false, true}, {true, false, true}, {true, true, false}}}
	h := highMem(t, cfg, cuda.HighMemTarget{Ordinal: 0, BAR1: 1 << 30, VRAM: 4 << 30},
		// BAR1 above what is free: the ballast is what is free less the 4 KiB buffer
		// and the margin (GPU 1 holds the kernels' 16-byte result), rounded down to
		// 2 MiB: 3 GiB - 2 MiB.
		cuda.HighMemTarget{Ordinal: 1, BAR1: 8 << 30, VRAM: 4 << 30},
		// GPU 2's peer is 0 (the first probe's pair the other way round).
		cuda.HighMemTarget{Ordinal: 2, BAR1: 1 << 30, VRAM: 4 << 30})
	want := []struct {
		peer    int
		ballast int64
		bar1    string
	}{{2, 1024, "1 GiB"}, {2, 3070, "8 GiB"}, {0, 1024, "1 GiB"}}
	for i, w := range want {
		g := h[i]
		if g.GPU != i || g.Peer != w.peer || g.BallastMiB != w.ballast || !g.Verified || g.Error != "" || g.Mismatch != nil || !strings.HasPrefix(g.BufferVA, "0x") {
			t.Errorf("GPU %d: %+v, want peer %d, %d MiB of ballast, verified", i, g, w.peer, w.ballast)
		}
		if !strings.HasPrefix(g.Guarantee, "the buffer was allocated after "+strconv.FormatInt(w.ballast, 10)+" MiB of ballast (BAR1 is "+w.bar1+")") ||
			strings.Contains(g.Guarantee, "with one GPU") {
			t.Errorf("GPU %d: guarantee %q", i, g.Guarantee)
		}
	}
}

// One GPU copies locally and says so; a GPU that is not an ordinal, an unknown BAR1
// and a card with no room for ballast are errors named with the GPU.
func TestHighMemEdgesOverFake(t *testing.T) {
	h := highMem(t, gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 2 << 30}}},
		cuda.HighMemTarget{Ordinal: 0, BAR1: 4 << 30, VRAM: 2 << 30},
		cuda.HighMemTarget{Ordinal: 1, BAR1: 1 << 30},
		cuda.HighMemTarget{Ordinal: -1, BAR1: 1 << 30},
		cuda.HighMemTarget{Ordinal: 0, BAR1: 0})
	// Free: 2 GiB less the kernels' result (16 B) and the two 4 KiB buffers at the
	// other end (here the same GPU), less the buffer and the margin: 1 GiB - 12 KiB - 16
	// B, rounded down to 2 MiB.
	if g := h[0]; g.Peer != -1 || g.BallastMiB != 1022 || !g.Verified || g.Error != "" || !strings.HasSuffix(g.Guarantee, "; with one GPU the copies were local, so no peer path was exercised") {
		t.Errorf("one GPU: %+v", g)
	}
	for i, want := range []string{"GPU 1 is not a CUDA ordinal (1 devices)", "GPU -1 is not a CUDA ordinal (1 devices)", "GPU 0: BAR1 size unknown, no ballast size to aim for"} {
		if g := h[i+1]; g.Verified || g.Error != want {
			t.Errorf("%+v, want the error %q", g, want)
		}
	}
	// 1 GiB + 6 MiB: after the margin, the two buffers at the other end, the result and
	// the buffer, less than 2 MiB is free for ballast.
	h = highMem(t, gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 1<<30 + 2<<20 - 1}}}, cuda.HighMemTarget{Ordinal: 0, BAR1: 1 << 30})
	// What is free (1 GiB + 2 MiB - 1 B - 8208 B) is named in whole 2 MiB steps.
	if g := h[0]; g.Verified || g.Error != "GPU 0 has 1 GiB free: no room for ballast below a 4 KiB buffer" {
		t.Errorf("no room: %+v", g)
	}
}

// A word spoiled on the way into the buffer (a peer write) or out of it (a peer read)
// fails the probe at its offset, with the pattern the copying GPU wrote; when both
// are spoiled the way in is the one reported.
func TestHighMemCorruptionOverFake(t *testing.T) {
	flip := func(copy string, off int64) gpufake.Fault {
		return gpufake.Fault{Kind: gpufake.FaultFlip, Copy: copy, Offset: off}
	}
	w := func(i uint64) uint32 { return cuda.Pattern(i, seedHigh^1) }
	for _, tc := range []struct {
		name   string
		faults []gpufake.Fault
		want   selftest.Mismatch
	}{
		{"in", []gpufake.Fault{flip("1->0", 100)}, selftest.Mismatch{Offset: 100, Want: w(25), Got: ^w(25), Words: 1}},
		{"out", []gpufake.Fault{flip("0->1", 200)}, selftest.Mismatch{Offset: 200, Want: w(50), Got: ^w(50), Words: 1}},
		{"both", []gpufake.Fault{flip("1->0", 100), flip("0->1", 200)}, selftest.Mismatch{Offset: 100, Want: w(25), Got: ^w(25), Words: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := highMem(t, gpufake.FakeConfig{GPUs: gpus(2), Faults: tc.faults}, cuda.HighMemTarget{Ordinal: 0, BAR1: 1 << 30})
			if g := h[0]; g.Verified || g.Peer != 1 || g.Error != "" || g.Mismatch == nil || *g.Mismatch != tc.want {
				t.Errorf("%+v %+v, want %+v", g, g.Mismatch, tc.want)
			}
		})
	}
}

// A spoiled word that cannot be read back is the probe's error, not a mismatch of the
// way out. The probe's last four reads from a GPU are: the way in's verification,
// the read-back of its bad word, the way out's verification and its read-back; a
// first run counts the reads, the second fails the third from last.
func TestHighMemReadBackFailsOverFake(t *testing.T) {
	flip := gpufake.Fault{Kind: gpufake.FaultFlip, Copy: "1->0", Offset: 100}
	o := cuda.Options{CopyBytes: 4096, Loops: 1, Samples: 1, HighMem: []cuda.HighMemTarget{{Ordinal: 0, BAR1: 1 << 30}}}
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: []gpufake.Fault{flip}})
	o.Library = box.CUDA()
	if _, err := cuda.Run(context.Background(), o); err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	reads := box.Calls("cuMemcpyDtoH_v2")
	box = gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: []gpufake.Fault{flip,
		{Kind: gpufake.FaultCode, Call: "cuMemcpyDtoH_v2", Code: 700, Nth: reads - 2}}})
	o.Library = box.CUDA()
	r, err := cuda.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	if g := r.HighMem[0]; g.Verified || g.Mismatch != nil || g.Error != "cuMemcpyDtoH_v2(4 B) on GPU 0: CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Errorf("%+v %+v", g, g.Mismatch)
	}
}

// A probe whose stream cannot be made says so, and only that: the streams it never
// made are not synchronized on the way out (the probe makes the peer's stream, then
// its own GPU's: the run's last two).
func TestHighMemNoStreamOverFake(t *testing.T) {
	o := cuda.Options{CopyBytes: 4096, Loops: 1, Samples: 1, HighMem: []cuda.HighMemTarget{{Ordinal: 0, BAR1: 1 << 30}}}
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
	o.Library = box.CUDA()
	if _, err := cuda.Run(context.Background(), o); err != nil {
		t.Fatalf("cuda.Run: %v", err)
	}
	made := box.Calls("cuStreamCreate")
	for _, tc := range []struct {
		nth  int
		want string
	}{{made - 1, "cuStreamCreate on GPU 1: CUDA_ERROR_OUT_OF_MEMORY"}, {made, "cuStreamCreate on GPU 0: CUDA_ERROR_OUT_OF_MEMORY"}} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuStreamCreate", Code: 2, Nth: tc.nth}}})
		o.Library = box.CUDA()
		r, err := cuda.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("cuda.Run: %v", err)
		}
		if g := r.HighMem[0]; g.Verified || g.Error != tc.want {
			t.Errorf("stream %d of %d refused: %+v, want the error %q", tc.nth, made, g, tc.want)
		}
		for what, n := range box.Held() {
			if n != 0 {
				t.Errorf("stream %d refused: the driver still holds %d %s", tc.nth, n, what)
			}
		}
	}
}
