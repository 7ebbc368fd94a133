package nccl

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/dl"
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

// Zero options take the documented defaults.
func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	want := Options{Lib: "libnccl.so.2", CUDALib: "libcuda.so.1", MinBytes: 8, MaxBytes: 1 << 30, Iters: 20,
		LogPath: filepath.Join(os.TempDir(), "p2pcheck-nccl.log")}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("defaults %+v\nwant %+v", o, want)
	}
	// Sizes are rounded down to whole int32 elements.
	if o := (Options{MinBytes: 13, MaxBytes: 1001}).withDefaults(); o.MinBytes != 12 || o.MaxBytes != 1000 {
		t.Errorf("13..1001 B: %d..%d", o.MinBytes, o.MaxBytes)
	}
}

// grid is the launch of the fill and verify kernels: one 256-thread block per 256
// elements, at most 8 blocks per SM (the kernels loop over what is left), never none.
// A grid of one block would still count right, but would check a 1 GiB buffer with
// 256 threads.
func TestGrid(t *testing.T) {
	for _, tt := range []struct {
		sms   int
		items int64
		want  uint32
	}{
		{128, 0, 1},
		{128, 1, 1},
		{128, 256, 1},
		{128, 257, 2},
		{128, 100 << 10, 400},
		{128, 1024 * 256, 1024},
		{128, 1024*256 + 1, 1024},
		{128, 1 << 28, 1024},
		{1, 1 << 28, 8},
		{82, 5000, 20},
	} {
		if got := grid(tt.sms, tt.items); got != tt.want {
			t.Errorf("grid(%d SMs, %d items) = %d, want %d", tt.sms, tt.items, got, tt.want)
		}
	}
}

// NCCL writes its debug file through libc's stdio, which holds what it wrote in a
// buffer: flushC is what gets it onto the disk before Run reads the transports.
func TestFlushCWritesLibcBuffers(t *testing.T) {
	libc, err := dl.Open("libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	var fopen func(path, mode string) uintptr
	var fputs func(s string, f uintptr) int32
	var fclose func(f uintptr) int32
	for name, fn := range map[string]any{"fopen": &fopen, "fputs": &fputs, "fclose": &fclose} {
		if err := libc.Bind(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "nccl.log")
	f := fopen(path, "w")
	if f == 0 {
		t.Fatalf("fopen %s failed", path)
	}
	defer fclose(f)
	const line = "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer\n"
	if fputs(line, f) < 0 {
		t.Fatal("fputs failed")
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
		t.Fatalf("before the flush the file holds %q (%v); want it still in libc's buffer", b, err)
	}
	flushC()
	if b, err := os.ReadFile(path); err != nil || string(b) != line {
		t.Errorf("after flushC the file holds %q (%v), want %q", b, err, line)
	}
}

// Each rank's value changes with the element index, so an element copied from the
// wrong place (a shifted or stale buffer) is counted wrong.
func TestValueFollowsTheIndex(t *testing.T) {
	for r := 0; r < 4; r++ {
		for i := uint64(0); i < 4096; i++ {
			if Value(r, i) == Value(r, i+1) {
				t.Fatalf("rank %d: elements %d and %d hold the same value %d", r, i, i+1, Value(r, i))
			}
		}
	}
}

// Doubling 0 gets nowhere: Sizes from 0 lists nothing and returns, rather than
// listing 0 without end. It runs in a child process whose address space is capped
// 512 MiB above what it holds, so a Sizes that never stops ends there with "out of
// memory" instead of taking the machine's.
func TestSizesFromZero(t *testing.T) {
	if os.Getenv("NCCL_SIZES_TEST_CHILD") == "1" {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		var vmKB uint64
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "VmSize:"); ok {
				vmKB, err = strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		limit := vmKB<<10 + 512<<20
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
			t.Fatal(err)
		}
		if s := Sizes(0, 64); len(s) != 0 {
			t.Fatalf("Sizes(0, 64) = %d sizes, want none", len(s))
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSizesFromZero$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NCCL_SIZES_TEST_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("Sizes(0, 64) in a child: %v\n%.2000s", err, out)
	}
}
