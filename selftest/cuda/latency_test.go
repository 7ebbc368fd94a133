package cuda_test

import (
	"context"
	"math"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The latency pass runs the engine's real host code over the FAKE driver: every GPU
// locally and every ordered pair with peer access, none for a pair without, each
// with its samples and the written bytes read back.
func TestLatencyOverFake(t *testing.T) {
	for _, tc := range []struct {
		name     string
		faults   []gpufake.Fault
		corrupt  string // "src->dst" whose latency must show a mismatch
		offset   int64  // of its first bad byte
		words    int64  // how many of its 4 words are wrong
		wantErrs int
	}{
		{name: "healthy"},
		{name: "flipped peer word", faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 0}}, corrupt: "0->1", words: 1},
		{name: "flipped local word", faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "2->2", Method: "ce", Offset: 4}}, corrupt: "2->2", offset: 4, words: 1},
		{name: "flipped third word", faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "2->1", Method: "ce", Offset: 8}}, corrupt: "2->1", offset: 8, words: 1},
		// Writes that move nothing leave the destination as it was before them: all
		// four words are what the engine put there, the inverse of what was sent.
		{name: "lost peer writes", faults: []gpufake.Fault{{Kind: gpufake.FaultShort, Copy: "1->2", Method: "ce", Bytes: 1}}, corrupt: "1->2", words: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gpufake.FakeConfig{
				GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}, {MemBytes: 4 << 30}},
				// GPU0 and GPU2 cannot reach each other: no latency is tried there.
				CanAccess: [][]bool{{false, true, false}, {true, false, true}, {false, true, false}},
				Faults:    tc.faults,
			}
			box := gpufake.New(cfg)
			r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 64 << 10, Verify: true})
			if err != nil {
				t.Fatalf("cuda.Run: %v", err)
			}
			want := map[string]string{"0->0": selftest.DirLocal, "1->1": selftest.DirLocal, "2->2": selftest.DirLocal,
				"0->1": selftest.DirWrite, "1->0": selftest.DirWrite, "1->2": selftest.DirWrite, "2->1": selftest.DirWrite}
			if len(r.Latencies) != len(want) {
				t.Fatalf("%d latencies, want %d: %+v", len(r.Latencies), len(want), r.Latencies)
			}
			for _, l := range r.Latencies {
				key := itoa(l.Src) + "->" + itoa(l.Dst)
				dir, ok := want[key]
				if !ok {
					t.Errorf("latency %s measured, want none there", key)
					continue
				}
				delete(want, key)
				if l.Direction != dir || l.Bytes != cuda.LatencyBytes || l.Writes != 100 || len(l.Samples) != 9 || l.Error != "" || l.Verified != (l.Mismatch == nil) {
					t.Errorf("latency %s: %+v", key, l)
				}
				// Virtual time: one 16-byte write takes 16 B / rate, at the FAKE box's
				// default rates (900 GB/s on one GPU, 20 GB/s between peers).
				rate := 20e9
				if l.Src == l.Dst {
					rate = 900e9
				}
				if wantUS := cuda.LatencyBytes / rate * 1e6; math.Abs(l.US-wantUS) > 1e-4*wantUS || l.US != cuda.Median(l.Samples) {
					t.Errorf("latency %s: %g us, median of %v, want %g us per write", key, l.US, l.Samples, wantUS)
				}
				if corrupt := key == tc.corrupt; corrupt != (l.Mismatch != nil) {
					t.Errorf("latency %s: mismatch %+v, want one: %v", key, l.Mismatch, corrupt)
				} else if corrupt && (l.Mismatch.Offset != tc.offset || l.Mismatch.Words != tc.words || l.Mismatch.Got != ^l.Mismatch.Want) {
					t.Errorf("latency %s: mismatch %+v, want %d inverted words from byte %d", key, l.Mismatch, tc.words, tc.offset)
				}
			}
		})
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
