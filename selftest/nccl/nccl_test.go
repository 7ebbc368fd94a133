package nccl

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest/cuda"
)

func TestReducePTX(t *testing.T) {
	entries, err := cuda.LintPTX(reducePTX)
	if err != nil {
		t.Fatal(err)
	}
	if entries["pb_rank_fill"] != 3 || entries["pb_sum_verify"] != 4 || len(entries) != 2 {
		t.Errorf("entries %v", entries)
	}
}

func TestValues(t *testing.T) {
	// Every value is a 12-bit signed number, so eight ranks sum far inside int32
	// and the result is exact.
	for r := 0; r < 8; r++ {
		for i := uint64(0); i < 1<<16; i += 7 {
			if v := Value(r, i); v < -2048 || v > 2047 {
				t.Fatalf("Value(%d, %d) = %d", r, i, v)
			}
		}
	}
	if Value(0, 1) == Value(1, 1) {
		t.Error("ranks put the same value")
	}
	if got, want := Expected(12345, 3), Value(0, 12345)+Value(1, 12345)+Value(2, 12345); got != want {
		t.Errorf("Expected = %d, want %d", got, want)
	}
}

func TestBusFactor(t *testing.T) {
	for n, want := range map[int]float64{0: 0, 1: 0, 2: 1, 4: 1.5, 8: 1.75} {
		if got := BusFactor(n); got != want {
			t.Errorf("BusFactor(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestSizes(t *testing.T) {
	s := Sizes(8, 1<<30)
	if len(s) != 28 || s[0] != 8 || s[len(s)-1] != 1<<30 {
		t.Errorf("Sizes(8, 1 GiB) = %d sizes, %v..%v", len(s), s[0], s[len(s)-1])
	}
	if s := Sizes(8, 100); len(s) != 4 || s[3] != 64 {
		t.Errorf("Sizes(8, 100) = %v", s)
	}
	if ItersFor(256<<20, 20) != 20 || ItersFor(512<<20, 20) != 5 || ItersFor(1<<30, 4) != 2 {
		t.Error("ItersFor")
	}
	o := Options{MinBytes: 6, MaxBytes: 2}.withDefaults()
	if o.MinBytes != 4 || o.MaxBytes != 4 || o.Iters != 20 || o.Lib != "libnccl.so.2" || o.CUDALib != "libcuda.so.1" {
		t.Errorf("defaults %+v", o)
	}
}

func TestMissingLibrary(t *testing.T) {
	log := filepath.Join(t.TempDir(), "nccl.log")
	const lib = "libcuda-peerboot-missing.so.1"
	t.Setenv("NCCL_DEBUG", "")
	t.Setenv("NCCL_DEBUG_SUBSYS", "")
	t.Setenv("NCCL_DEBUG_FILE", "")
	t.Setenv("NCCL_P2P_LEVEL", "")
	res, err := Run(context.Background(), Options{CUDALib: lib, LogPath: log, Env: map[string]string{"NCCL_P2P_LEVEL": "SYS"}})
	if err == nil || !strings.Contains(err.Error(), "loading "+lib) {
		t.Fatalf("Run: %v", err)
	}
	if res.Error != err.Error() || res.Env["NCCL_P2P_LEVEL"] != "SYS" || res.Env["NCCL_DEBUG"] != "INFO" || res.Env["NCCL_DEBUG_FILE"] != log {
		t.Errorf("result %+v", res)
	}
	if res.Sizes == nil || res.Transports == nil {
		t.Error("nil lists in a failed result")
	}
}
