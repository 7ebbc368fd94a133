package nccl_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nccl"
)

// The tests below run the real all-reduce phase (Run) over the FAKE libcuda and
// libnccl of selftest/gpufake: host memory, the PTX kernels emulated in Go, and a
// virtual clock on which an all-reduce of B bytes over n ranks takes exactly
// B / (NCCLBusGBps / (2(n-1)/n)) seconds. So the figures Run reports are known
// exactly: busbw is the box's NCCLBusGBps, algbw busbw / BusFactor(n).

// fakeGPUs is a box of n GPUs with the FAKE's defaults and the given faults.
func fakeGPUs(n int, faults ...gpufake.Fault) gpufake.FakeConfig {
	c := gpufake.FakeConfig{Faults: faults}
	for range n {
		c.GPUs = append(c.GPUs, gpufake.FakeGPU{MemBytes: 1 << 30})
	}
	return c
}

// runFake runs the phase over a box built from cfg, with sizes 4 KiB to 64 KiB and four
// timed iterations, timed on the box's virtual clock.
func runFake(t *testing.T, cfg gpufake.FakeConfig, edit ...func(*nccl.Options)) (*selftest.NCCL, error) {
	t.Helper()
	box := gpufake.New(cfg)
	o := nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(), MinBytes: 4 << 10, MaxBytes: 64 << 10, Iters: 4,
		LogPath: filepath.Join(t.TempDir(), "nccl.log"), Clock: box.Now}
	for _, e := range edit {
		e(&o)
	}
	return nccl.Run(context.Background(), o)
}

// near says whether got is want within 0.2 % (the virtual clock counts whole
// nanoseconds; a 4 KiB all-reduce is about 300 ns).
func near(got, want float64) bool { return math.Abs(got-want) <= want*0.002 }

func TestRunMeasuresEverySize(t *testing.T) {
	for _, tt := range []struct {
		gpus       int
		algGBps    float64 // what the FAKE's clock makes of NCCLBusGBps = 20
		busGBps    float64
		transports int // DefaultNCCLLog: one channel each way around the ring
	}{
		{4, 20 / 1.5, 20, 8},
		{2, 20, 20, 4},
		// One rank: BusFactor is 0, so busbw is 0 and algbw the only figure.
		{1, 20, 0, 0},
	} {
		res, err := runFake(t, fakeGPUs(tt.gpus))
		if err != nil {
			t.Fatalf("%d GPUs: %v", tt.gpus, err)
		}
		if res.Error != "" || res.Library != gpufake.NCCLName || res.Ranks != tt.gpus || res.Version != 22105 {
			t.Errorf("%d GPUs: error %q, library %q, %d ranks, version %d", tt.gpus, res.Error, res.Library, res.Ranks, res.Version)
		}
		if got, want := len(res.Sizes), 5; got != want { // 4, 8, 16, 32, 64 KiB
			t.Fatalf("%d GPUs: %d sizes, want %d: %+v", tt.gpus, got, want, res.Sizes)
		}
		for i, s := range res.Sizes {
			wantUS := float64(s.Bytes) / (tt.algGBps * 1e9) * 1e6
			if s.Bytes != 4<<10<<i || s.Wrong != 0 || !near(s.AlgBW, tt.algGBps) || !near(s.TimeUS, wantUS) ||
				(tt.busGBps == 0 && s.BusBW != 0) || (tt.busGBps != 0 && !near(s.BusBW, tt.busGBps)) {
				t.Errorf("%d GPUs, size %d: %+v; want %d B, 0 wrong, algbw %.3f, busbw %.3f GB/s, %.4f us",
					tt.gpus, i, s, 4<<10<<i, tt.algGBps, tt.busGBps, wantUS)
			}
		}
		if last := res.Sizes[len(res.Sizes)-1]; res.BusBWAtMax != last.BusBW {
			t.Errorf("%d GPUs: BusBWAtMax %v, the largest size's busbw %v", tt.gpus, res.BusBWAtMax, last.BusBW)
		}
		if len(res.Transports) != tt.transports {
			t.Errorf("%d GPUs: transports %+v, want %d read from the log", tt.gpus, res.Transports, tt.transports)
		}
		for _, tr := range res.Transports {
			if !tr.P2P || tr.Via != "P2P/direct pointer" {
				t.Errorf("%d GPUs: transport %+v", tt.gpus, tr)
			}
		}
		if res.Env["NCCL_DEBUG"] != "INFO" || res.Env["NCCL_DEBUG_SUBSYS"] != "INIT,P2P,SHM" || res.Env["NCCL_DEBUG_FILE"] != res.LogFile {
			t.Errorf("%d GPUs: env %v, log %s", tt.gpus, res.Env, res.LogFile)
		}
	}
}

// Every timed iteration is an all-reduce: a run that did one more or one fewer than
// Iters would divide the wrong time by Iters and report a wrong bandwidth. Above
// 256 MiB a quarter of the iterations run (ItersFor); the figure must not change.
func TestRunTimesIters(t *testing.T) {
	for _, iters := range []int{1, 3, 7} {
		res, err := runFake(t, fakeGPUs(2), func(o *nccl.Options) { o.Iters = iters; o.MinBytes, o.MaxBytes = 8<<10, 8<<10 })
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Sizes) != 1 || !near(res.Sizes[0].BusBW, 20) {
			t.Errorf("%d iterations: %+v, want busbw 20 GB/s", iters, res.Sizes)
		}
	}
}

// A clock too coarse to see an all-reduce (every reading the same) gives no
// bandwidth rather than an infinite one, which JSON cannot carry into the report.
func TestRunClockStandsStill(t *testing.T) {
	still := time.Unix(1e9, 0)
	res, err := runFake(t, fakeGPUs(2), func(o *nccl.Options) { o.Clock = func() time.Time { return still } })
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Sizes {
		if s.AlgBW != 0 || s.BusBW != 0 || s.TimeUS != 0 {
			t.Errorf("%+v: want no bandwidth and no time", s)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("the result does not encode: %v", err)
	}
}

// Wrong elements of the sum are counted on every rank and added up.
func TestRunCountsWrongElements(t *testing.T) {
	res, err := runFake(t, fakeGPUs(4,
		gpufake.Fault{Kind: gpufake.FaultSum, Rank: 1, Elem: 5, Count: 2},
		gpufake.Fault{Kind: gpufake.FaultSum, Rank: 3, Elem: 100, Count: 7}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Sizes {
		if s.Wrong != 9 {
			t.Errorf("%d B: %d wrong, want 2 + 7", s.Bytes, s.Wrong)
		}
	}
}

// A failing call ends the run with an error that names it, the same text in the
// result, and the result filled as far as the run got.
func TestRunReportsTheFailingCall(t *testing.T) {
	code := func(call string, nth, rc int) gpufake.Fault {
		return gpufake.Fault{Kind: gpufake.FaultCode, Call: call, Nth: nth, Code: rc}
	}
	for _, tt := range []struct {
		fault gpufake.Fault
		want  string // the error, whole
		sizes int
	}{
		{code("cuInit", 0, 999), "cuInit(0): CUDA_ERROR_UNKNOWN", 0},
		{code("cuDeviceGetCount", 0, 999), "cuDeviceGetCount: CUDA_ERROR_UNKNOWN", 0},
		{code("ncclGetVersion", 0, 3), "ncclGetVersion: internal error - please report this issue to the NCCL developers (ncclResult 3)", 0},
		{code("cuDeviceGetName", 2, 999), "cuDeviceGetName on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		{code("cuModuleLoadDataEx", 2, 999), "cuModuleLoadDataEx on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		{code("cuModuleGetFunction", 1, 999), "cuModuleGetFunction(pb_rank_fill) on GPU 0: CUDA_ERROR_UNKNOWN", 0},
		{code("cuModuleGetFunction", 2, 999), "cuModuleGetFunction(pb_sum_verify) on GPU 0: CUDA_ERROR_UNKNOWN", 0},
		{code("cuStreamCreate", 2, 999), "cuStreamCreate on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		// GPU 0's send, receive and result buffers.
		{code("cuMemAlloc_v2", 1, 2), "cuMemAlloc_v2(64 KiB) on GPU 0: CUDA_ERROR_OUT_OF_MEMORY", 0},
		{code("cuMemAlloc_v2", 2, 2), "cuMemAlloc_v2(64 KiB) on GPU 0: CUDA_ERROR_OUT_OF_MEMORY", 0},
		{code("cuMemAlloc_v2", 3, 2), "cuMemAlloc_v2(16 B) on GPU 0: CUDA_ERROR_OUT_OF_MEMORY", 0},
		{code("cuLaunchKernel", 2, 999), "cuLaunchKernel(pb_rank_fill, 64 x 256) on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		// Syncs 1 and 2 wait for the fills; 3 and 4 for the first warmup, on GPU 0
		// and GPU 1: a sync failing on any GPU ends the run.
		{code("cuStreamSynchronize", 2, 999), "cuStreamSynchronize on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		{code("cuStreamSynchronize", 4, 999), "cuStreamSynchronize on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		{code("ncclCommInitAll", 0, 2), "ncclCommInitAll(2 GPUs): unhandled system error (run with NCCL_DEBUG=INFO for details) (ncclResult 2)", 0},
		{code("ncclGroupStart", 1, 5), "ncclGroupStart: invalid usage (run with NCCL_DEBUG=WARN for details) (ncclResult 5)", 0},
		// The second rank's enqueue of the first size fails; the group is closed all
		// the same (NCCL's group end then reduces nothing).
		{code("ncclAllReduce", 2, 4), "ncclAllReduce(4 KiB, rank 1): invalid argument (run with NCCL_DEBUG=WARN for details) (ncclResult 4)", 0},
		{code("ncclGroupEnd", 0, 1), "ncclGroupEnd: unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)", 0},
		// The first size's timed iterations (all-reduces 2 to 5) then its check (6):
		// the second size's warmup is all-reduce 7.
		{code("ncclGroupEnd", 7, 1), "ncclGroupEnd: unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)", 1},
		{code("ncclGroupEnd", 3, 1), "ncclGroupEnd: unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)", 0},
		{code("ncclGroupEnd", 6, 1), "ncclGroupEnd: unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)", 0},
		{code("cuMemsetD32Async", 1, 999), "cuMemsetD32Async(1024 words) on GPU 0: CUDA_ERROR_UNKNOWN", 0},
		{code("cuMemsetD32Async", 3, 999), "cuMemsetD32Async(4 words) on GPU 0: CUDA_ERROR_UNKNOWN", 0},
		{code("cuMemcpyDtoH_v2", 2, 999), "cuMemcpyDtoH_v2(8 B) on GPU 1: CUDA_ERROR_UNKNOWN", 0},
		{code("cuLaunchKernel", 4, 999), "cuLaunchKernel(pb_sum_verify, 4 x 256) on GPU 1: CUDA_ERROR_UNKNOWN", 0},
	} {
		res, err := runFake(t, fakeGPUs(2, tt.fault))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s #%d: err %v\nwant %s", tt.fault.Call, tt.fault.Nth, err, tt.want)
			continue
		}
		if res.Error != err.Error() || len(res.Sizes) != tt.sizes || res.Library != gpufake.NCCLName {
			t.Errorf("%s #%d: result error %q, %d sizes (want %d), library %q", tt.fault.Call, tt.fault.Nth, res.Error, len(res.Sizes), tt.sizes, res.Library)
		}
	}
}

// The cleanup after the run is reported too: a communicator or module the library
// would not give back is an error of the run, however it went.
func TestRunReportsCleanupErrors(t *testing.T) {
	for _, tt := range []struct {
		call string
		want string
	}{
		{"ncclCommDestroy", "ncclCommDestroy(rank 0): internal error - please report this issue to the NCCL developers (ncclResult 3)\n" +
			"ncclCommDestroy(rank 1): internal error - please report this issue to the NCCL developers (ncclResult 3)"},
		{"cuModuleUnload", "cuModuleUnload on GPU 0: CUDA_ERROR_UNKNOWN\ncuModuleUnload on GPU 1: CUDA_ERROR_UNKNOWN"},
		{"cuStreamDestroy_v2", "cuStreamDestroy_v2 on GPU 0: CUDA_ERROR_UNKNOWN\ncuStreamDestroy_v2 on GPU 1: CUDA_ERROR_UNKNOWN"},
	} {
		rc := 999
		if strings.HasPrefix(tt.call, "nccl") {
			rc = 3
		}
		res, err := runFake(t, fakeGPUs(2, gpufake.Fault{Kind: gpufake.FaultCode, Call: tt.call, Code: rc}))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s fails: err %v\nwant %s", tt.call, err, tt.want)
			continue
		}
		// The measurements stand; only the error says the cleanup failed.
		if len(res.Sizes) != 5 || res.Error != tt.want {
			t.Errorf("%s fails: %d sizes, error %q", tt.call, len(res.Sizes), res.Error)
		}
	}
}

// A run that stops early cleans up exactly what it set up: a failed stream creation
// on the second GPU is the run's only error, not followed by errors of the cleanup
// touching a stream or module that was never made.
func TestRunCleansUpAfterAFailedSetup(t *testing.T) {
	for _, tt := range []struct {
		fault gpufake.Fault
		want  string
	}{
		{gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuStreamCreate", Nth: 2, Code: 999}, "cuStreamCreate on GPU 1: CUDA_ERROR_UNKNOWN"},
		{gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuModuleLoadDataEx", Nth: 2, Code: 999}, "cuModuleLoadDataEx on GPU 1: CUDA_ERROR_UNKNOWN"},
	} {
		_, err := runFake(t, fakeGPUs(2, tt.fault))
		if err == nil || err.Error() != tt.want {
			t.Errorf("err %v\nwant %s", err, tt.want)
		}
	}
	// Every stream sync failing: the fill's sync on GPU 0 ends the run, and the
	// cleanup syncs GPU 0's stream, the one stream there is, and nothing of GPU 1.
	// (The fill never finished, so destroying the stream after the buffers are gone
	// fails too.)
	_, err := runFake(t, fakeGPUs(2, gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuStreamSynchronize", Code: 999}))
	if err == nil {
		t.Fatal("every sync fails: no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) < 2 || lines[0] != "cuStreamSynchronize on GPU 0: CUDA_ERROR_UNKNOWN" || lines[1] != lines[0] || strings.Contains(err.Error(), "GPU 1") {
		t.Errorf("every sync fails: err %v\nwant the fill's and the cleanup's sync of GPU 0 failing, nothing of GPU 1", err)
	}
}

// NCCL's code says only "unhandled cuda error"; its last warning, from
// ncclGetLastError, says which.
func TestRunCarriesNCCLsLastWarning(t *testing.T) {
	cfg := fakeGPUs(2, gpufake.Fault{Kind: gpufake.FaultCode, Call: "ncclCommInitAll", Code: 1})
	cfg.NCCLLastError = "Cuda failure 'no kernel image is available for execution on the device'\n"
	_, err := runFake(t, cfg)
	want := "ncclCommInitAll(2 GPUs): unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1): Cuda failure 'no kernel image is available for execution on the device'"
	if err == nil || err.Error() != want {
		t.Errorf("err %v\nwant %s", err, want)
	}
}

// hidden is a library without some of its symbols: an older or broken libnccl.
type hidden struct {
	cuda.Library
	missing string
}

func (h hidden) Bind(name string, fn any) error {
	if name == h.missing {
		return os.ErrNotExist
	}
	return h.Library.Bind(name, fn)
}

func TestRunWithAnIncompleteLibrary(t *testing.T) {
	// Before NCCL 2.13 there is no ncclGetLastError: the code's text alone.
	cfg := fakeGPUs(2, gpufake.Fault{Kind: gpufake.FaultCode, Call: "ncclCommInitAll", Code: 1})
	cfg.NCCLLastError = "Cuda failure 'no kernel image is available for execution on the device'"
	box := gpufake.New(cfg)
	_, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: hidden{box.NCCL(), "ncclGetLastError"},
		MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if want := "ncclCommInitAll(2 GPUs): unhandled cuda error (run with NCCL_DEBUG=INFO for details) (ncclResult 1)"; err == nil || err.Error() != want {
		t.Errorf("without ncclGetLastError: %v\nwant %s", err, want)
	}
	// Without an entry point the phase needs, nothing runs.
	box = gpufake.New(fakeGPUs(2))
	res, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: hidden{box.NCCL(), "ncclGroupEnd"},
		MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if want := "loading " + gpufake.NCCLName + ": " + os.ErrNotExist.Error(); err == nil || err.Error() != want || len(res.Sizes) != 0 {
		t.Errorf("without ncclGroupEnd: %v, %d sizes\nwant %s", err, len(res.Sizes), want)
	}
}

// A stopped context ends the run before the next step; what was measured stays.
func TestRunStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	box := gpufake.New(fakeGPUs(2))
	res, err := nccl.Run(ctx, nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(), MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if want := "all-reduce phase stopped before ncclCommInitAll: context canceled"; err == nil || err.Error() != want || res.Error != want {
		t.Errorf("cancelled: %v\nwant %s", err, want)
	}

	// Cancelled while the first size is timed: the run stops before the second.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	box = gpufake.New(fakeGPUs(2))
	clock := func() time.Time { cancel(); return box.Now() }
	res, err = nccl.Run(ctx, nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(), MinBytes: 4 << 10, MaxBytes: 64 << 10, Iters: 2,
		LogPath: filepath.Join(t.TempDir(), "l"), Clock: clock})
	if want := "all-reduce phase stopped before 8 KiB: context canceled"; err == nil || err.Error() != want {
		t.Errorf("cancelled during 4 KiB: %v\nwant %s", err, want)
	}
	if len(res.Sizes) != 1 || res.Sizes[0].Bytes != 4<<10 || !near(res.Sizes[0].BusBW, 20) {
		t.Errorf("sizes %+v, want the 4 KiB measurement", res.Sizes)
	}
}

// The transports come from this run's log: an old log is removed first, so a run that
// fails before NCCL writes its own does not report the previous run's transports.
func TestRunReadsOnlyItsOwnLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "nccl.log")
	stale := "old:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"
	if err := os.WriteFile(log, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := runFake(t, fakeGPUs(2, gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuInit", Code: 999}), func(o *nccl.Options) { o.LogPath = log })
	if err == nil || len(res.Transports) != 0 || res.Transports == nil {
		t.Errorf("err %v, transports %+v: want none", err, res.Transports)
	}

	// A log that cannot be removed (here a directory with something in it) ends the
	// run at once, with that error, not one from reading the directory later.
	dir := filepath.Join(t.TempDir(), "log")
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err = runFake(t, fakeGPUs(2), func(o *nccl.Options) { o.LogPath = dir })
	if err == nil || !strings.HasPrefix(err.Error(), "removing old NCCL log: ") || res.Error != err.Error() || res.Ranks != 0 {
		t.Errorf("log path is a directory: %v, %+v", err, res)
	}
}

// A libnccl that does not load ends the run with the loader's error, after CUDA
// counted the GPUs.
func TestRunWithoutLibNCCL(t *testing.T) {
	const lib = "libnccl-peerboot-absent.so.2"
	box := gpufake.New(fakeGPUs(2))
	res, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), Lib: lib, MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if err == nil || !strings.HasPrefix(err.Error(), "loading "+lib+": ") || res.Library != lib || res.Ranks != 2 || len(res.Sizes) != 0 {
		t.Errorf("err %v, result %+v", err, res)
	}
}
