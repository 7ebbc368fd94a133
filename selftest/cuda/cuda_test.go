package cuda

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestKernelPTX(t *testing.T) {
	entries, err := LintPTX(kernelPTX)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{kFill: 3, kVerify: 4, kCopy: 3, kSpin: 2}
	for name, n := range want {
		if entries[name] != n {
			t.Errorf("entry %s has %d params, want %d", name, entries[name], n)
		}
	}
	if len(entries) != len(want) {
		t.Errorf("entries %v, want %v", entries, want)
	}
	for _, s := range []string{"atom.global.min.u64", "atom.global.add.u64", "ld.global.v4.u32", "st.global.v4.u32", "%clock64", "ld.volatile.u32"} {
		if !strings.Contains(kernelPTX, s) {
			t.Errorf("kernels lack %s", s)
		}
	}
}

func TestLintPTXCatches(t *testing.T) {
	for name, bad := range map[string]string{
		"brace":    strings.Replace(kernelPTX, "FILL_DONE:\n\tret;\n}", "FILL_DONE:\n\tret;\n", 1),
		"version":  strings.Replace(kernelPTX, ".version 7.0", ".version 8.0", 1),
		"label":    strings.Replace(kernelPTX, "@%p1 bra FILL_LOOP;", "@%p1 bra VERIFY_LOOP;", 1),
		"register": strings.Replace(kernelPTX, "xor.b32 %r6, %r6, %r8;", "xor.b32 %r6, %r6, %r10;", 1),
		"param":    strings.Replace(kernelPTX, "[pb_spin_timeout]", "[pb_spin_timeouts]", 1),
	} {
		if _, err := LintPTX(bad); err == nil {
			t.Errorf("%s: LintPTX accepted a broken text", name)
		}
	}
}

func TestPattern(t *testing.T) {
	// Neighbouring words, the same word under another seed, and words 4 GiB apart
	// (same low half) must all differ.
	seen := map[uint32]bool{}
	for i := uint64(0); i < 4096; i++ {
		seen[Pattern(i, seedSrc)] = true
	}
	if len(seen) < 4090 {
		t.Errorf("only %d distinct values in 4096 words", len(seen))
	}
	if Pattern(5, srcSeed(0)) == Pattern(5, srcSeed(1)) || Pattern(5, seedSrc) == Pattern(5, seedDst) {
		t.Error("seeds do not change the pattern")
	}
	if Pattern(7, seedSrc) == Pattern(7+1<<32, seedSrc) {
		t.Error("the high half of the index is ignored")
	}
}

func TestMedianAndGBps(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{25.1, 22.0, 24.3}, 24.3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []float64{3, 1, 2}
	Median(in)
	if in[0] != 3 {
		t.Error("Median sorted its argument")
	}
	// 256 MiB x 16 copies in 0.2 s = 21.47 GB/s (1e9).
	if got := GBps(256<<20, 16, 200); math.Abs(got-21.474836480) > 1e-9 {
		t.Errorf("GBps = %v", got)
	}
	if GBps(1, 1, 0) != 0 {
		t.Error("GBps of zero time is not 0")
	}
}

// Size names a byte count in the largest unit that divides it: each unit from
// exactly one of it, and 0 in bytes (0 divides by every unit).
func TestSize(t *testing.T) {
	for n, want := range map[int64]string{8: "8 B", 4096: "4 KiB", 256 << 20: "256 MiB", 1 << 30: "1 GiB", 3 << 29: "1536 MiB",
		0: "0 B", 1023: "1023 B", 1 << 10: "1 KiB", 1<<10 + 1: "1025 B", 1 << 20: "1 MiB", 3 << 19: "1536 KiB", 1<<20 + 1<<10: "1025 KiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	o := Options{CopyBytes: 1000, Warmup: -1}.withDefaults()
	if o.Lib != "libcuda.so.1" || o.CopyBytes != 992 || o.Warmup != 0 || o.Loops != 16 || o.Samples != 3 || o.HighMemFakeBAR1 != 32<<30 {
		t.Errorf("defaults: %+v", o)
	}
	if o := (Options{}).withDefaults(); o.CopyBytes != 256<<20 || o.Warmup != 4 || o.SpinTimeout != 10*time.Second ||
		o.LatencyWrites != 100 || o.LatencySamples != 9 {
		t.Errorf("defaults: %+v", o)
	}
	// Below one 16-byte vector, a copy is one vector: never zero bytes.
	if o := (Options{CopyBytes: 15}).withDefaults(); o.CopyBytes != 16 {
		t.Errorf("CopyBytes 15: %d, want 16", o.CopyBytes)
	}
	// Values given are kept.
	o = Options{CopyBytes: 4096, Warmup: 2, Loops: 5, Samples: 7, SpinTimeout: time.Second, LatencyWrites: 3, LatencySamples: 1, HighMemFakeBAR1: 1 << 30}.withDefaults()
	if o.CopyBytes != 4096 || o.Warmup != 2 || o.Loops != 5 || o.Samples != 7 || o.SpinTimeout != time.Second || o.LatencyWrites != 3 || o.LatencySamples != 1 || o.HighMemFakeBAR1 != 1<<30 {
		t.Errorf("given values: %+v", o)
	}
}

func TestMissingLibrary(t *testing.T) {
	const lib = "libcuda-peerboot-missing.so.1"
	if _, err := Load(lib); err == nil || !strings.Contains(err.Error(), "loading "+lib) {
		t.Fatalf("Load: %v", err)
	}
	r, err := Run(context.Background(), Options{Lib: lib})
	if err == nil {
		t.Fatal("Run of a missing library succeeded")
	}
	if r == nil || r.CUDA.Loaded || !strings.Contains(r.CUDA.Error, lib) || r.CUDA.Library != lib || r.CUDA.CuInit != nil {
		t.Errorf("result: %+v", r)
	}
	if r.Copies == nil || r.HighMem == nil || r.CUDA.Devices == nil {
		t.Error("nil lists in a failed result")
	}
}

func TestErrorWording(t *testing.T) {
	var d *Driver
	err := d.check(2, "cuMemAlloc_v2(%s) on GPU %d", Size(256<<20), 1)
	if got := err.Error(); got != "cuMemAlloc_v2(256 MiB) on GPU 1: CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("error %q", got)
	}
	if Code(err) != 2 || Code(context.Canceled) != -1 {
		t.Error("Code")
	}
	if d.check(0, "x") != nil {
		t.Error("success is an error")
	}
}

func TestPeerRefusal(t *testing.T) {
	can := [][]bool{{false, true}, {false, false}}
	got := peerRefusal(can, 0, 1)
	if !strings.Contains(got, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED") || !strings.Contains(got, "1->0") {
		t.Errorf("peerRefusal = %q", got)
	}
}

// The cross-process forms run on a ring: each owner once, with the next GPU it has
// peer access to.
func TestRingPairs(t *testing.T) {
	all := func(n int, skip ...[2]int) [][2]int {
		var out [][2]int
		for a := 0; a < n; a++ {
			for b := 0; b < n; b++ {
				if a != b && !slices.Contains(skip, [2]int{a, b}) {
					out = append(out, [2]int{a, b})
				}
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		pairs [][2]int
		n     int
		want  [][2]int
	}{
		{"one GPU", [][2]int{{0, 0}}, 1, [][2]int{{0, 0}}},
		{"two", all(2), 2, [][2]int{{0, 1}, {1, 0}}},
		{"four", all(4), 4, [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 0}}},
		{"four, 1-2 without P2P", all(4, [2]int{1, 2}, [2]int{2, 1}), 4, [][2]int{{0, 1}, {1, 3}, {2, 3}, {3, 0}}},
	} {
		if got := ringPairs(tc.pairs, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
