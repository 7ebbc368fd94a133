package cuda

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// HighMemTarget is a GPU whose BAR1 aperture is smaller than its memory (a 48 GB card
// with a 32 GiB BAR1): the probe places a buffer above the BAR1 size.
type HighMemTarget struct {
	Ordinal int
	BAR1    int64
	VRAM    int64
}

// Options configure Run. Zero values take the defaults in brackets.
type Options struct {
	Lib string // ["libcuda.so.1"]
	// Library, when set, is used instead of dlopening Lib: the FAKE stand-in of the
	// tests (selftest/gpufake) comes in here.
	Library   Library
	CopyBytes int64 // bytes per copy, a multiple of 16 [256 MiB]
	// nvbandwidth's shape: Warmup copies behind the spin kernel before the start
	// event, Loops timed copies per sample, Samples samples, median reported [4, 16, 3].
	// A negative Warmup means none.
	Warmup, Loops, Samples int
	Verify                 bool // check every destination on the GPU
	SM                     bool // also copy with the uint4 kernel (local, write, read)
	Bidir                  bool // also both directions at once (CE)
	HighMem                []HighMemTarget
	// HighMemForce runs the high-memory probe on every GPU with a pretended BAR1 of
	// HighMemFakeBAR1 bytes [32 GiB], so the path can be exercised on a card whose real
	// BAR1 covers its memory (an H200 has 256 GiB of BAR1 for 141 GiB). Ignored for
	// GPUs already in HighMem.
	HighMemForce    bool
	HighMemFakeBAR1 int64
	// LinkGBps gives the theoretical per-direction link rate of a pair (0: unknown);
	// it is copied into Copy.LinkGBps of peer copies. nil: all 0.
	LinkGBps func(src, dst int) float64
	// CorruptOnce is a test hook: after the first peer copy (with one GPU: the first
	// local copy) it inverts one word of the destination before verification, which
	// must then report a mismatch. Result.Injected says where.
	CorruptOnce bool
	// SpinTimeout bounds how long the gate kernel waits for the host [10 s].
	SpinTimeout time.Duration
	// Latency, p2pBandwidthLatencyTest's way: LatencyWrites 16-byte writes per sample
	// behind the spin gate, LatencySamples samples, median reported [100, 9].
	LatencyWrites, LatencySamples int
	// Seed changes every source pattern (0: the boot self-test's own). A soak gives
	// each round another, so a destination still holding an earlier round's data
	// (a copy that silently did nothing after a retrain) fails verification.
	Seed uint32
}

// Result is what the copy phase found. It is filled as far as the run got, also when
// Run returns an error.
type Result struct {
	CUDA      selftest.CUDA      `json:"cuda"`
	CanAccess [][]bool           `json:"can_access"` // [i][j]: cuDeviceCanAccessPeer(i, j); false on the diagonal
	Copies    []selftest.Copy    `json:"copies"`
	HighMem   []selftest.HighMem `json:"high_mem"`
	Latencies []selftest.Latency `json:"latencies"`
	// Injected describes the corruption made by Options.CorruptOnce ("" when none).
	Injected string `json:"injected,omitempty"`
	// Notes are facts that do not fail anything but qualify a figure, e.g. a spin
	// kernel that timed out (enqueue time then leaked into that sample).
	Notes []string `json:"notes,omitempty"`
}

func (o Options) withDefaults() Options {
	if o.Lib == "" {
		o.Lib = "libcuda.so.1"
	}
	if o.CopyBytes <= 0 {
		o.CopyBytes = 256 << 20
	}
	o.CopyBytes &^= 15
	if o.CopyBytes == 0 {
		o.CopyBytes = 16
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	} else if o.Warmup == 0 {
		o.Warmup = 4
	}
	if o.Loops <= 0 {
		o.Loops = 16
	}
	if o.Samples <= 0 {
		o.Samples = 3
	}
	if o.HighMemFakeBAR1 <= 0 {
		o.HighMemFakeBAR1 = 32 << 30
	}
	if o.SpinTimeout <= 0 {
		o.SpinTimeout = 10 * time.Second
	}
	if o.LatencyWrites <= 0 {
		o.LatencyWrites = 100
	}
	if o.LatencySamples <= 0 {
		o.LatencySamples = 9
	}
	return o
}

// Run loads the driver, describes the GPUs, loads the kernels, measures and verifies
// local and peer copies, and probes high memory. Per-copy CUDA failures are recorded
// in the copies; Run's error is for what stops the phase: no library, cuInit or
// PTX failing, no device, or ctx ending. All CUDA work runs on the calling
// goroutine, locked to its OS thread for the duration.
func Run(ctx context.Context, o Options) (*Result, error) {
	o = o.withDefaults()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	r := &Result{
		CUDA:      selftest.CUDA{Library: o.Lib, Devices: []selftest.CUDADevice{}},
		Copies:    []selftest.Copy{},
		HighMem:   []selftest.HighMem{},
		Latencies: []selftest.Latency{},
	}
	fail := func(err error) (*Result, error) {
		if r.CUDA.Error == "" {
			r.CUDA.Error = err.Error()
		}
		return r, err
	}

	// 1-4. The library, cuInit (after CUDA_DEVICE_ORDER=PCI_BUS_ID), the devices in PCI
	// order, and the kernels JIT-compiled in every GPU's primary context.
	d, n, err := openDevices(o, &r.CUDA)
	if d != nil {
		defer d.Close()
	}
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("copy phase stopped after loading the kernels: %w", err))
	}

	// 5. Peer capability matrix.
	r.CanAccess = make([][]bool, n)
	for i := range r.CanAccess {
		r.CanAccess[i] = make([]bool, n)
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			if r.CanAccess[i][j], err = d.CanAccessPeer(i, j); err != nil {
				return fail(err)
			}
		}
	}

	// 6. Timed, verified copies: local per GPU, then every pair.
	e, err := newEngine(d, o, r, n)
	if err != nil {
		return fail(err)
	}
	err = e.copies(ctx)
	if err == nil {
		err = e.latencies(ctx)
	}
	if ferr := e.free(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		return fail(err)
	}

	// 7. High-memory probes, with the copy buffers freed.
	targets := append([]HighMemTarget(nil), o.HighMem...)
	if o.HighMemForce {
	next:
		for i, dev := range r.CUDA.Devices {
			for _, t := range targets {
				if t.Ordinal == i {
					continue next
				}
			}
			targets = append(targets, HighMemTarget{Ordinal: i, BAR1: o.HighMemFakeBAR1, VRAM: dev.MemBytes})
		}
	}
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return fail(fmt.Errorf("copy phase stopped before the high-memory probe on GPU %d: %w", t.Ordinal, err))
		}
		r.HighMem = append(r.HighMem, e.highMem(t))
	}
	return r, nil
}

// Seeds of the fill pattern: each GPU's source has its own, so a copy from the
// wrong GPU fails verification; destinations are pre-filled with another.
const (
	seedSrc = 0xBAADF00D
	seedDst = 0xCAFEBABE
)

func srcSeed(gpu int) uint32 { return seedSrc ^ uint32(gpu)*0x01000193 }

// srcSeed is GPU gpu's source pattern seed in this run: srcSeed moved by Options.Seed
// (times an odd constant, so consecutive rounds' seeds differ in many bits).
func (e *engine) srcSeed(gpu int) uint32 { return srcSeed(gpu) ^ e.o.Seed*0x9E3779B1 }

// Median of the samples (mean of the middle two for an even count); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ { // insertion sort: a handful of samples
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// GBps is nvbandwidth's figure: bytes × loops over the elapsed time, in 1e9 B/s.
func GBps(bytes int64, loops int, ms float64) float64 {
	if ms <= 0 {
		return 0
	}
	return float64(bytes) * float64(loops) / (ms / 1e3) / 1e9
}
