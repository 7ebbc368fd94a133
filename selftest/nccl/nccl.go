// Package nccl is the self-test's all-reduce phase: one process, one communicator
// over every GPU (ncclCommInitAll), int32 sums checked exactly on the GPU, timed the
// way nccl-tests' all_reduce_perf times them, and the transports NCCL chose read back
// from its own INFO log. libnccl is loaded with purego; device memory, streams and
// kernels come from selftest/cuda, which shares the one libcuda with libnccl.
package nccl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/dl"
)

// Options configure Run. Zero values take the defaults in brackets.
type Options struct {
	Lib      string // ["libnccl.so.2"]
	CUDALib  string // ["libcuda.so.1"]
	MinBytes int64  // smallest all-reduce, a multiple of 4 [8 B]
	MaxBytes int64  // largest; sizes double from MinBytes up to it [1 GiB]
	// Iters timed iterations per size [20]; sizes above 256 MiB run a quarter of them
	// (at least 2), which keeps a 1 GiB step on PCIe 4090s near a second.
	Iters int
	// Env are NCCL_* variables to run with (e.g. NCCL_P2P_LEVEL=SYS). NCCL_DEBUG=INFO,
	// NCCL_DEBUG_SUBSYS=INIT,P2P,SHM and NCCL_DEBUG_FILE=LogPath are always added:
	// the transports are read from that log.
	Env     map[string]string
	LogPath string // [$TMPDIR/p2pcheck-nccl.log]
	// NCCLLibrary and CUDALibrary, when set, are used instead of dlopening Lib and
	// CUDALib: the FAKE stand-ins of the tests (selftest/gpufake) come in here.
	NCCLLibrary cuda.Library
	CUDALibrary cuda.Library
	// Clock times the iterations [time.Now]; the FAKE libraries bring their own
	// virtual clock, because their host-memory all-reduce has no real-world speed.
	Clock func() time.Time
}

// ncclResult_t, ncclDataType_t and ncclRedOp_t values (nccl.h).
const (
	ncclSuccess = 0
	ncclInt32   = 2
	ncclSum     = 0
)

// bigSize is where the iteration count drops (see Options.Iters).
const bigSize = 256 << 20

func (o Options) withDefaults() Options {
	if o.Lib == "" {
		o.Lib = "libnccl.so.2"
	}
	if o.CUDALib == "" {
		o.CUDALib = "libcuda.so.1"
	}
	if o.MinBytes <= 0 {
		o.MinBytes = 8
	}
	o.MinBytes = max(o.MinBytes&^3, 4)
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	o.MaxBytes = max(o.MaxBytes&^3, o.MinBytes)
	if o.Iters <= 0 {
		o.Iters = 20
	}
	if o.LogPath == "" {
		o.LogPath = filepath.Join(os.TempDir(), "p2pcheck-nccl.log")
	}
	return o
}

// Sizes lists the all-reduce sizes: MinBytes doubling while not above MaxBytes.
func Sizes(minBytes, maxBytes int64) []int64 {
	var out []int64
	for b := minBytes; b > 0 && b <= maxBytes; b *= 2 {
		out = append(out, b)
	}
	return out
}

// ItersFor is the number of timed iterations for a size.
func ItersFor(bytes int64, iters int) int {
	if bytes > bigSize {
		return max(iters/4, 2)
	}
	return iters
}

// BusFactor converts all-reduce algbw to busbw: 2(n-1)/n, as nccl-tests does. With
// one rank it is 0, so busbw is 0 (nccl-tests prints the same); algbw is then the
// only meaningful figure.
func BusFactor(ranks int) float64 {
	if ranks <= 0 {
		return 0
	}
	return 2 * float64(ranks-1) / float64(ranks)
}

// Expected is the exact all-reduce result at element i over ranks ranks.
func Expected(i uint64, ranks int) int32 {
	var s int32
	for r := 0; r < ranks; r++ {
		s += Value(r, i)
	}
	return s
}

// Value is what rank r puts at element i: a 12-bit signed number, so sums over any
// realistic rank count are exact in int32.
func Value(rank int, i uint64) int32 {
	h := uint32(i)*0x9E3779B1 + uint32(rank)*0x7F4A7C15
	return int32(h>>20) - 2048
}

// lib is the bound libnccl.
type lib struct {
	getVersion     func(v *int32) int32
	commInitAll    func(comms *uintptr, ndev int32, devlist *int32) int32
	commDestroy    func(comm uintptr) int32
	groupStart     func() int32
	groupEnd       func() int32
	allReduce      func(send, recv cuda.Ptr, count uintptr, dtype, op int32, comm uintptr, s cuda.Stream) int32
	getErrorString func(rc int32) string
	// getLastError is ncclGetLastError (NCCL 2.13 on; nil before): the text of NCCL's
	// last WARN, e.g. "Cuda failure 'no kernel image is available for execution on the
	// device'", which ncclGetErrorString's "unhandled cuda error" does not say.
	getLastError func(comm uintptr) string
}

func loadNCCL(path string) (*lib, error) {
	l, err := dl.Open(path)
	if err != nil {
		return nil, err
	}
	return bindNCCL(l)
}

// bindNCCL binds the NCCL subset from src.
func bindNCCL(src cuda.Library) (*lib, error) {
	path := src.Name()
	l := &lib{}
	for _, s := range []struct {
		name string
		fn   any
	}{
		{"ncclGetVersion", &l.getVersion},
		{"ncclCommInitAll", &l.commInitAll},
		{"ncclCommDestroy", &l.commDestroy},
		{"ncclGroupStart", &l.groupStart},
		{"ncclGroupEnd", &l.groupEnd},
		{"ncclAllReduce", &l.allReduce},
		{"ncclGetErrorString", &l.getErrorString},
	} {
		if err := src.Bind(s.name, s.fn); err != nil {
			return nil, fmt.Errorf("loading %s: %w", path, err)
		}
	}
	if err := src.Bind("ncclGetLastError", &l.getLastError); err != nil {
		l.getLastError = nil // an NCCL older than 2.13: the code's text alone
	}
	return l, nil
}

// Error is a failed NCCL call.
type Error struct {
	Call string
	Code int
	Text string // ncclGetErrorString
	Last string // ncclGetLastError: what NCCL warned of last ("" when it cannot say)
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s (ncclResult %d)", e.Call, e.Text, e.Code)
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

func (l *lib) check(rc int32, format string, args ...any) error {
	if rc == ncclSuccess {
		return nil
	}
	e := &Error{Call: fmt.Sprintf(format, args...), Code: int(rc), Text: l.getErrorString(rc)}
	if l.getLastError != nil {
		e.Last = strings.TrimSpace(l.getLastError(0)) // no communicator: the thread's last error
	}
	return e
}

// rank is one GPU's side of the communicator.
type rank struct {
	comm      uintptr
	stream    cuda.Stream
	send, rcv cuda.Ptr
	fill      *cuda.Function
	verify    *cuda.Function
	mod       *cuda.Module
	result    cuda.Ptr
	sms       int
}

// Run measures all-reduce over every CUDA device. The returned NCCL is filled as far
// as the run got, with Error set when Run returns an error. All work runs on the
// calling goroutine, locked to its OS thread.
func Run(ctx context.Context, o Options) (*selftest.NCCL, error) {
	o = o.withDefaults()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if o.NCCLLibrary != nil {
		o.Lib = o.NCCLLibrary.Name()
	}
	res := &selftest.NCCL{Library: o.Lib, Env: map[string]string{}, Sizes: []selftest.NCCLSize{}, Transports: []selftest.Transport{}, LogFile: o.LogPath}
	err := run(ctx, o, res)
	// The log is complete once the communicators are gone; flush libc's buffers so
	// the file holds everything NCCL wrote.
	flushC()
	if f, ferr := os.Open(o.LogPath); ferr == nil {
		ts, perr := ParseTransports(f)
		f.Close()
		if ts != nil {
			res.Transports = ts
		}
		if err == nil && perr != nil {
			err = fmt.Errorf("reading NCCL log %s: %w", o.LogPath, perr)
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func run(ctx context.Context, o Options, res *selftest.NCCL) (err error) {
	// 1. Environment, before either library reads it.
	env := maps.Clone(o.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["NCCL_DEBUG"] = "INFO"
	env["NCCL_DEBUG_SUBSYS"] = "INIT,P2P,SHM"
	env["NCCL_DEBUG_FILE"] = o.LogPath
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := os.Setenv(k, env[k]); err != nil {
			return fmt.Errorf("setting %s: %w", k, err)
		}
	}
	res.Env = env
	if err := os.Remove(o.LogPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing old NCCL log: %w", err)
	}

	// 2. CUDA: the same libcuda libnccl will load.
	var d *cuda.Driver
	if o.CUDALibrary != nil {
		d, err = cuda.Open(o.CUDALibrary)
	} else {
		d, err = cuda.Load(o.CUDALib)
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	if _, err := d.Init(); err != nil {
		return err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("cuDeviceGetCount: no CUDA device")
	}
	res.Ranks = n

	// 3. libnccl.
	var l *lib
	if o.NCCLLibrary != nil {
		l, err = bindNCCL(o.NCCLLibrary)
	} else {
		l, err = loadNCCL(o.Lib)
	}
	if err != nil {
		return err
	}
	var v int32
	if err := l.check(l.getVersion(&v), "ncclGetVersion"); err != nil {
		return err
	}
	res.Version = int(v)

	// 4. Per-GPU buffers, streams and kernels; each rank's input filled once for
	// the largest size (Value depends on the element index only).
	ranks := make([]rank, n)
	defer func() {
		var errs []error
		// Communicators first (nccl-tests destroys them in a loop like this), then
		// the memory they used.
		for r := range ranks {
			if k := &ranks[r]; k.comm != 0 {
				errs = append(errs, l.check(l.commDestroy(k.comm), "ncclCommDestroy(rank %d)", r))
			}
		}
		for r := range ranks {
			k := &ranks[r]
			if k.stream != 0 {
				errs = append(errs, d.StreamSync(r, k.stream))
			}
			errs = append(errs, d.Free(r, k.send), d.Free(r, k.rcv), d.Free(r, k.result), d.DestroyStream(r, k.stream))
			if k.mod != nil && d.SetCurrent(r) == nil {
				errs = append(errs, k.mod.Unload())
			}
		}
		err = errors.Join(append([]error{err}, errs...)...)
	}()
	maxCount := o.MaxBytes / 4
	for r := range ranks {
		k := &ranks[r]
		dev, err := d.Device(r)
		if err != nil {
			return err
		}
		k.sms = max(dev.SMs, 1)
		var log string
		if k.mod, log, err = d.LoadModule(r, reducePTX); err != nil {
			return &cuda.PTXError{Err: err, Log: log}
		}
		if k.fill, err = k.mod.Function("pb_rank_fill"); err != nil {
			return err
		}
		if k.verify, err = k.mod.Function("pb_sum_verify"); err != nil {
			return err
		}
		if k.stream, err = d.NewStream(r); err != nil {
			return err
		}
		if k.send, err = d.Alloc(r, o.MaxBytes); err != nil {
			return err
		}
		if k.rcv, err = d.Alloc(r, o.MaxBytes); err != nil {
			return err
		}
		if k.result, err = d.Alloc(r, 16); err != nil {
			return err
		}
		if err := d.Launch(k.fill, grid(k.sms, maxCount), 256, k.stream, uint64(k.send), uint64(maxCount), uint64(r)); err != nil {
			return err
		}
		if err := d.StreamSync(r, k.stream); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("all-reduce phase stopped before ncclCommInitAll: %w", err)
	}

	// 5. One communicator per GPU, all in this process.
	comms := make([]uintptr, n)
	devs := make([]int32, n)
	for i := range devs {
		devs[i] = int32(i)
	}
	if err := l.check(l.commInitAll(&comms[0], int32(n), &devs[0]), "ncclCommInitAll(%d GPUs)", n); err != nil {
		return err
	}
	for r := range ranks {
		ranks[r].comm = comms[r]
	}

	// 6. Every size: warmup, timed iterations, then one checked iteration.
	allReduce := func(count int64) error {
		if err := l.check(l.groupStart(), "ncclGroupStart"); err != nil {
			return err
		}
		var errs []error
		for r := range ranks {
			k := &ranks[r]
			errs = append(errs, l.check(l.allReduce(k.send, k.rcv, uintptr(count), ncclInt32, ncclSum, k.comm, k.stream),
				"ncclAllReduce(%s, rank %d)", cuda.Size(count*4), r))
		}
		// The group is always closed, also after a failed enqueue.
		errs = append(errs, l.check(l.groupEnd(), "ncclGroupEnd"))
		return errors.Join(errs...)
	}
	syncAll := func() error {
		for r := range ranks {
			if err := d.StreamSync(r, ranks[r].stream); err != nil {
				return err
			}
		}
		return nil
	}
	factor := BusFactor(n)
	now := o.Clock
	if now == nil {
		now = time.Now
	}
	for _, bytes := range Sizes(o.MinBytes, o.MaxBytes) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("all-reduce phase stopped before %s: %w", cuda.Size(bytes), err)
		}
		count := bytes / 4
		if err := allReduce(count); err != nil {
			return err
		}
		if err := syncAll(); err != nil {
			return err
		}
		iters := ItersFor(bytes, o.Iters)
		t0 := now()
		for it := 0; it < iters; it++ {
			if err := allReduce(count); err != nil {
				return err
			}
		}
		if err := syncAll(); err != nil {
			return err
		}
		sec := now().Sub(t0).Seconds() / float64(iters)
		sz := selftest.NCCLSize{Bytes: bytes, TimeUS: sec * 1e6}
		if sec > 0 {
			sz.AlgBW = float64(bytes) / 1e9 / sec
		}
		sz.BusBW = sz.AlgBW * factor
		// The check: poison the outputs, reduce once more, compare on every GPU.
		for r := range ranks {
			if err := d.MemsetD32Async(r, ranks[r].rcv, 0xDEADBEEF, count, ranks[r].stream); err != nil {
				return err
			}
		}
		if err := syncAll(); err != nil {
			return err
		}
		if err := allReduce(count); err != nil {
			return err
		}
		if err := syncAll(); err != nil {
			return err
		}
		for r := range ranks {
			w, err := verify(d, r, &ranks[r], count, n)
			if err != nil {
				return err
			}
			sz.Wrong += w
		}
		res.Sizes = append(res.Sizes, sz)
		res.BusBWAtMax = sz.BusBW
	}
	return nil
}

func grid(sms int, items int64) uint32 {
	g := int64(sms) * 8
	if need := (items + 255) / 256; need < g {
		g = need
	}
	return uint32(max(g, 1))
}

// verify counts the elements of rank r's output that differ from the exact sum.
func verify(d *cuda.Driver, r int, k *rank, count int64, n int) (int64, error) {
	if err := d.MemsetD32Async(r, k.result, 0, 4, k.stream); err != nil {
		return 0, err
	}
	if err := d.Launch(k.verify, grid(k.sms, count), 256, k.stream, uint64(k.rcv), uint64(count), uint64(n), uint64(k.result)); err != nil {
		return 0, err
	}
	if err := d.StreamSync(r, k.stream); err != nil {
		return 0, err
	}
	w, err := d.ReadWords(r, k.result, 2)
	if err != nil {
		return 0, err
	}
	return int64(uint64(w[0]) | uint64(w[1])<<32), nil
}

// flushC calls libc's fflush(NULL), so NCCL's buffered debug file is complete on disk.
func flushC() {
	libc, err := dl.Open("libc.so.6")
	if err != nil {
		return
	}
	var fflush func(f uintptr) int32
	if libc.Bind("fflush", &fflush) == nil {
		fflush(0)
	}
}
