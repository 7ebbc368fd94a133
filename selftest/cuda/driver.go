// Package cuda is the self-test's copy phase: purego bindings of the CUDA driver API
// subset it needs (no cgo, no nvcc), PTX kernels that fill and check buffers on the
// GPU, and the measurement engine that times local and peer copies the way NVIDIA's
// nvbandwidth does (spin-kernel-gated start, warmup, event timing, median of samples).
//
// All CUDA calls of one Run happen on one locked OS thread: the current context is
// per thread. selftest/nccl shares the loaded library through Driver.
package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/dl"
)

// CUresult values the engine reacts to.
const (
	cudaSuccess                  = 0
	cudaErrorPeerAccessUnsupport = 217
	cudaErrorPeerAlreadyEnabled  = 704
	cudaErrorPeerNotEnabled      = 705
)

// Enum values from cuda.h 13.0 (selftest.md §2).
const (
	attrClockRate     = 13
	attrSMCount       = 16
	attrCCMajor       = 75
	attrCCMinor       = 76
	streamNonBlock    = 1
	eventDefault      = 0
	hostAllocPortable = 0x1
	hostAllocDevMap   = 0x2
	jitErrorLogBuf    = 5
	jitErrorLogSize   = 6
)

// Ptr is a device address (CUdeviceptr, 64-bit in the _v2 ABI).
type Ptr uint64

// Stream is a CUstream handle.
type Stream uintptr

// Event is a CUevent handle.
type Event uintptr

// Error is a failed driver call: what was called, on which GPU, and the CUresult.
type Error struct {
	Call string // e.g. "cuMemAlloc_v2(256 MiB) on GPU 1"
	Code int
	Name string // e.g. CUDA_ERROR_OUT_OF_MEMORY
}

func (e *Error) Error() string { return e.Call + ": " + e.Name }

// Code returns the CUresult inside err, or -1 when err is not a driver error.
func Code(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// Library is where a Driver's entry points come from: libcuda through dlopen
// (Load), or a FAKE stand-in that tests pass to Open (see package dl).
type Library = dl.Library

// Driver is a loaded libcuda. It is not safe for concurrent use: callers drive it from
// one goroutine locked to its OS thread.
type Driver struct {
	Lib string
	lib Library

	ctxs    map[int]uintptr // retained primary contexts by ordinal
	devs    map[int]int32   // CUdevice by ordinal
	kernels map[int]*Kernels
	mem     *memAPI // the peermem phase's entry points, bound on first use

	cuInit                    func(flags uint32) int32
	cuDriverGetVersion        func(v *int32) int32
	cuGetErrorName            func(code int32, name **byte) int32
	cuDeviceGetCount          func(n *int32) int32
	cuDeviceGet               func(dev *int32, ordinal int32) int32
	cuDeviceGetName           func(buf *byte, n int32, dev int32) int32
	cuDeviceTotalMem          func(bytes *uint64, dev int32) int32
	cuDeviceGetAttribute      func(v *int32, attr int32, dev int32) int32
	cuDeviceGetPCIBusId       func(buf *byte, n int32, dev int32) int32
	cuDeviceCanAccessPeer     func(can *int32, dev, peer int32) int32
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease func(dev int32) int32
	cuCtxSetCurrent           func(ctx uintptr) int32
	cuCtxSynchronize          func() int32
	cuCtxEnablePeerAccess     func(peer uintptr, flags uint32) int32
	cuCtxDisablePeerAccess    func(peer uintptr) int32
	cuMemAlloc                func(p *Ptr, n uintptr) int32
	cuMemFree                 func(p Ptr) int32
	cuMemGetInfo              func(free, total *uintptr) int32
	cuMemHostAlloc            func(p *uintptr, n uintptr, flags uint32) int32
	cuMemFreeHost             func(p uintptr) int32
	cuMemHostGetDevicePointer func(d *Ptr, p uintptr, flags uint32) int32
	cuMemcpyHtoD              func(dst Ptr, src unsafe.Pointer, n uintptr) int32
	cuMemcpyDtoH              func(dst unsafe.Pointer, src Ptr, n uintptr) int32
	cuMemcpyAsync             func(dst, src Ptr, n uintptr, s Stream) int32
	cuMemsetD32Async          func(p Ptr, v uint32, n uintptr, s Stream) int32
	cuStreamCreate            func(s *Stream, flags uint32) int32
	cuStreamDestroy           func(s Stream) int32
	cuStreamSynchronize       func(s Stream) int32
	cuEventCreate             func(e *Event, flags uint32) int32
	cuEventRecord             func(e Event, s Stream) int32
	cuEventSynchronize        func(e Event) int32
	cuEventElapsedTime        func(ms *float32, start, end Event) int32
	cuEventDestroy            func(e Event) int32
	cuModuleLoadDataEx        func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32
	cuModuleGetFunction       func(f *uintptr, m uintptr, name *byte) int32
	cuModuleUnload            func(m uintptr) int32
	cuLaunchKernel            func(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s Stream, params *unsafe.Pointer, extra *unsafe.Pointer) int32
}

// Load dlopens the driver library and binds the subset; it does not call cuInit. A
// missing library or symbol is an error naming it. Loading the same library twice
// shares it (dlopen counts references), so selftest/nccl and this package see one
// libcuda, the one libnccl loads too.
func Load(lib string) (*Driver, error) {
	l, err := dl.Open(lib)
	if err != nil {
		return nil, err
	}
	return Open(l)
}

// Open binds the driver subset from l (see Load).
func Open(l Library) (*Driver, error) {
	lib := l.Name()
	d := &Driver{Lib: lib, lib: l, ctxs: map[int]uintptr{}, devs: map[int]int32{}, kernels: map[int]*Kernels{}}
	// Only what answers "is there a driver and a GPU" is required here; the rest is
	// bound once cuInit succeeded (bindDevice). A library that can only say
	// CUDA_ERROR_NO_DEVICE still gives a truthful report.
	for _, s := range []struct {
		name string
		fn   any
	}{{"cuInit", &d.cuInit}, {"cuDriverGetVersion", &d.cuDriverGetVersion}} {
		if err := l.Bind(s.name, s.fn); err != nil {
			return nil, fmt.Errorf("loading %s: %w", lib, err)
		}
	}
	_ = l.Bind("cuGetErrorName", &d.cuGetErrorName) // optional: Status falls back to our table
	return d, nil
}

// bindDevice binds the rest of the API subset, after cuInit succeeded.
func (d *Driver) bindDevice() error {
	syms := []struct {
		name string
		fn   any
	}{
		{"cuDeviceGetCount", &d.cuDeviceGetCount},
		{"cuDeviceGet", &d.cuDeviceGet},
		{"cuDeviceGetName", &d.cuDeviceGetName},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem},
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute},
		{"cuDeviceGetPCIBusId", &d.cuDeviceGetPCIBusId},
		{"cuDeviceCanAccessPeer", &d.cuDeviceCanAccessPeer},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent},
		{"cuCtxSynchronize", &d.cuCtxSynchronize},
		{"cuCtxEnablePeerAccess", &d.cuCtxEnablePeerAccess},
		{"cuCtxDisablePeerAccess", &d.cuCtxDisablePeerAccess},
		{"cuMemAlloc_v2", &d.cuMemAlloc},
		{"cuMemFree_v2", &d.cuMemFree},
		{"cuMemGetInfo_v2", &d.cuMemGetInfo},
		{"cuMemHostAlloc", &d.cuMemHostAlloc},
		{"cuMemFreeHost", &d.cuMemFreeHost},
		{"cuMemHostGetDevicePointer_v2", &d.cuMemHostGetDevicePointer},
		{"cuMemcpyHtoD_v2", &d.cuMemcpyHtoD},
		{"cuMemcpyDtoH_v2", &d.cuMemcpyDtoH},
		{"cuMemcpyAsync", &d.cuMemcpyAsync},
		{"cuMemsetD32Async", &d.cuMemsetD32Async},
		{"cuStreamCreate", &d.cuStreamCreate},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy},
		{"cuStreamSynchronize", &d.cuStreamSynchronize},
		{"cuEventCreate", &d.cuEventCreate},
		{"cuEventRecord", &d.cuEventRecord},
		{"cuEventSynchronize", &d.cuEventSynchronize},
		{"cuEventDestroy_v2", &d.cuEventDestroy},
		{"cuModuleLoadDataEx", &d.cuModuleLoadDataEx},
		{"cuModuleGetFunction", &d.cuModuleGetFunction},
		{"cuModuleUnload", &d.cuModuleUnload},
		{"cuLaunchKernel", &d.cuLaunchKernel},
	}
	for _, s := range syms {
		if err := d.lib.Bind(s.name, s.fn); err != nil {
			return fmt.Errorf("loading %s: %w", d.Lib, err)
		}
	}
	// The header maps cuEventElapsedTime to _v2 (CUDA 12.8+); older drivers have only
	// the legacy symbol, with the same signature.
	if d.lib.Bind("cuEventElapsedTime_v2", &d.cuEventElapsedTime) != nil {
		if err := d.lib.Bind("cuEventElapsedTime", &d.cuEventElapsedTime); err != nil {
			return fmt.Errorf("loading %s: %w", d.Lib, err)
		}
	}
	return nil
}

// Status names a CUresult, asking the library first (cuGetErrorName works before
// cuInit) and falling back to selftest's table.
func (d *Driver) Status(code int) selftest.Status {
	if d != nil && d.cuGetErrorName != nil {
		var p *byte
		if d.cuGetErrorName(int32(code), &p) == 0 && p != nil {
			return selftest.Status{Name: goString(p, 256), Code: code}
		}
	}
	return selftest.CUDAStatus(code)
}

// check turns a CUresult into an *Error describing the call; nil on success.
func (d *Driver) check(rc int32, format string, args ...any) error {
	if rc == cudaSuccess {
		return nil
	}
	st := d.Status(int(rc))
	return &Error{Call: fmt.Sprintf(format, args...), Code: int(rc), Name: st.Name}
}

// Init orders devices by PCI bus id and calls cuInit(0).
//
// CUDA_DEVICE_ORDER=PCI_BUS_ID is set in the process environment (os.Setenv reaches
// the C environment through purego's fake cgo), so CUDA ordinal i is the i-th GPU in
// PCI order, in this package and in libnccl's runtime alike. p2pcheck is a
// single-purpose binary; changing its environment is deliberate.
func (d *Driver) Init() (selftest.Status, error) {
	if err := os.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID"); err != nil {
		return selftest.Status{}, fmt.Errorf("setting CUDA_DEVICE_ORDER: %w", err)
	}
	rc := d.cuInit(0)
	if err := d.check(rc, "cuInit(0)"); err != nil {
		return d.Status(int(rc)), err
	}
	return d.Status(int(rc)), d.bindDevice()
}

// DriverVersion is cuDriverGetVersion, e.g. 13000.
func (d *Driver) DriverVersion() (int, error) {
	var v int32
	if err := d.check(d.cuDriverGetVersion(&v), "cuDriverGetVersion"); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is cuDeviceGetCount.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if err := d.check(d.cuDeviceGetCount(&n), "cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (d *Driver) device(ordinal int) (int32, error) {
	if dev, ok := d.devs[ordinal]; ok {
		return dev, nil
	}
	var dev int32
	if err := d.check(d.cuDeviceGet(&dev, int32(ordinal)), "cuDeviceGet(%d)", ordinal); err != nil {
		return 0, err
	}
	d.devs[ordinal] = dev
	return dev, nil
}

func (d *Driver) attr(dev int32, ordinal, attr int) (int, error) {
	var v int32
	if err := d.check(d.cuDeviceGetAttribute(&v, int32(attr), dev), "cuDeviceGetAttribute(%d) on GPU %d", attr, ordinal); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Device describes one ordinal: name, PCI address (lower case), compute capability,
// SM count and memory size.
func (d *Driver) Device(ordinal int) (selftest.CUDADevice, error) {
	out := selftest.CUDADevice{Ordinal: ordinal}
	dev, err := d.device(ordinal)
	if err != nil {
		return out, err
	}
	buf := make([]byte, 256)
	if err := d.check(d.cuDeviceGetName(&buf[0], int32(len(buf)), dev), "cuDeviceGetName on GPU %d", ordinal); err != nil {
		return out, err
	}
	out.Name = goString(&buf[0], len(buf))
	clear(buf)
	if err := d.check(d.cuDeviceGetPCIBusId(&buf[0], int32(len(buf)), dev), "cuDeviceGetPCIBusId on GPU %d", ordinal); err != nil {
		return out, err
	}
	out.BDF = lower(goString(&buf[0], len(buf)))
	maj, err := d.attr(dev, ordinal, attrCCMajor)
	if err != nil {
		return out, err
	}
	minor, err := d.attr(dev, ordinal, attrCCMinor)
	if err != nil {
		return out, err
	}
	out.CC = fmt.Sprintf("%d.%d", maj, minor)
	if out.SMs, err = d.attr(dev, ordinal, attrSMCount); err != nil {
		return out, err
	}
	var mem uint64
	if err := d.check(d.cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem_v2 on GPU %d", ordinal); err != nil {
		return out, err
	}
	out.MemBytes = int64(mem)
	return out, nil
}

// ClockKHz is the device's maximum SM clock (CU_DEVICE_ATTRIBUTE_CLOCK_RATE).
func (d *Driver) ClockKHz(ordinal int) (int, error) {
	dev, err := d.device(ordinal)
	if err != nil {
		return 0, err
	}
	return d.attr(dev, ordinal, attrClockRate)
}

// CanAccessPeer is cuDeviceCanAccessPeer(dev, peer).
func (d *Driver) CanAccessPeer(dev, peer int) (bool, error) {
	a, err := d.device(dev)
	if err != nil {
		return false, err
	}
	b, err := d.device(peer)
	if err != nil {
		return false, err
	}
	var can int32
	if err := d.check(d.cuDeviceCanAccessPeer(&can, a, b), "cuDeviceCanAccessPeer(%d, %d)", dev, peer); err != nil {
		return false, err
	}
	return can != 0, nil
}

// SetCurrent retains the ordinal's primary context (once) and makes it current on
// the calling OS thread. Callers hold runtime.LockOSThread.
func (d *Driver) SetCurrent(ordinal int) error {
	ctx, ok := d.ctxs[ordinal]
	if !ok {
		dev, err := d.device(ordinal)
		if err != nil {
			return err
		}
		if err := d.check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain on GPU %d", ordinal); err != nil {
			return err
		}
		d.ctxs[ordinal] = ctx
	}
	return d.check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent on GPU %d", ordinal)
}

// EnablePeer makes peer's memory accessible from dev's context (one way). An already
// enabled pair is not an error.
func (d *Driver) EnablePeer(dev, peer int) error {
	if err := d.SetCurrent(peer); err != nil {
		return err
	}
	if err := d.SetCurrent(dev); err != nil {
		return err
	}
	rc := d.cuCtxEnablePeerAccess(d.ctxs[peer], 0)
	if rc == cudaErrorPeerAlreadyEnabled {
		return nil
	}
	return d.check(rc, "cuCtxEnablePeerAccess(GPU %d -> GPU %d)", dev, peer)
}

// DisablePeer undoes EnablePeer; a pair that was not enabled is not an error.
func (d *Driver) DisablePeer(dev, peer int) error {
	if err := d.SetCurrent(peer); err != nil {
		return err
	}
	if err := d.SetCurrent(dev); err != nil {
		return err
	}
	rc := d.cuCtxDisablePeerAccess(d.ctxs[peer])
	if rc == cudaErrorPeerNotEnabled {
		return nil
	}
	return d.check(rc, "cuCtxDisablePeerAccess(GPU %d -> GPU %d)", dev, peer)
}

// Close unloads the kernel modules and releases the primary contexts this Driver
// retained. The library stays loaded (libcuda is not meant to be unloaded).
func (d *Driver) Close() error {
	var errs []error
	for ord, k := range d.kernels {
		if err := d.SetCurrent(ord); err == nil {
			errs = append(errs, d.Free(ord, k.result), k.Module.Unload())
		}
	}
	d.kernels = map[int]*Kernels{}
	for ord := range d.ctxs {
		errs = append(errs, d.check(d.cuDevicePrimaryCtxRelease(d.devs[ord]), "cuDevicePrimaryCtxRelease_v2 on GPU %d", ord))
	}
	d.ctxs = map[int]uintptr{}
	if d.cuCtxSetCurrent != nil {
		d.cuCtxSetCurrent(0)
	}
	return errors.Join(errs...)
}

// MemInfo is cuMemGetInfo_v2 for the ordinal's context.
func (d *Driver) MemInfo(ordinal int) (free, total int64, err error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return 0, 0, err
	}
	var f, t uintptr
	if err := d.check(d.cuMemGetInfo(&f, &t), "cuMemGetInfo_v2 on GPU %d", ordinal); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// Alloc is cuMemAlloc_v2 in the ordinal's primary context.
func (d *Driver) Alloc(ordinal int, bytes int64) (Ptr, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return 0, err
	}
	var p Ptr
	if err := d.check(d.cuMemAlloc(&p, uintptr(bytes)), "cuMemAlloc_v2(%s) on GPU %d", Size(bytes), ordinal); err != nil {
		return 0, err
	}
	return p, nil
}

// Free is cuMemFree_v2; a zero pointer is ignored.
func (d *Driver) Free(ordinal int, p Ptr) error {
	if p == 0 {
		return nil
	}
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	return d.check(d.cuMemFree(p), "cuMemFree_v2 on GPU %d", ordinal)
}

// NewStream creates a non-blocking stream in the ordinal's primary context.
func (d *Driver) NewStream(ordinal int) (Stream, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return 0, err
	}
	var s Stream
	if err := d.check(d.cuStreamCreate(&s, streamNonBlock), "cuStreamCreate on GPU %d", ordinal); err != nil {
		return 0, err
	}
	return s, nil
}

// DestroyStream is cuStreamDestroy_v2.
func (d *Driver) DestroyStream(ordinal int, s Stream) error {
	if s == 0 {
		return nil
	}
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	return d.check(d.cuStreamDestroy(s), "cuStreamDestroy_v2 on GPU %d", ordinal)
}

// StreamSync waits for the stream (cuStreamSynchronize).
func (d *Driver) StreamSync(ordinal int, s Stream) error {
	return d.check(d.cuStreamSynchronize(s), "cuStreamSynchronize on GPU %d", ordinal)
}

// MemsetD32Async sets n 32-bit words at p to v on the stream.
func (d *Driver) MemsetD32Async(ordinal int, p Ptr, v uint32, n int64, s Stream) error {
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	return d.check(d.cuMemsetD32Async(p, v, uintptr(n), s), "cuMemsetD32Async(%d words) on GPU %d", n, ordinal)
}

// CopyAsync is cuMemcpyAsync (unified addressing: src and dst may be on any GPU)
// issued on the ordinal's stream.
func (d *Driver) CopyAsync(ordinal int, dst, src Ptr, bytes int64, s Stream) error {
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	return d.check(d.cuMemcpyAsync(dst, src, uintptr(bytes), s), "cuMemcpyAsync(%s) on GPU %d", Size(bytes), ordinal)
}

// ReadWords copies n 32-bit words from device memory to the host (synchronous).
func (d *Driver) ReadWords(ordinal int, src Ptr, n int) ([]uint32, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	if n == 0 {
		return out, nil
	}
	err := d.check(d.cuMemcpyDtoH(unsafe.Pointer(&out[0]), src, uintptr(4*n)), "cuMemcpyDtoH_v2(%d B) on GPU %d", 4*n, ordinal)
	runtime.KeepAlive(out)
	return out, err
}

// WriteWords copies 32-bit words from the host to device memory (synchronous).
func (d *Driver) WriteWords(ordinal int, dst Ptr, w []uint32) error {
	if len(w) == 0 {
		return nil
	}
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	err := d.check(d.cuMemcpyHtoD(dst, unsafe.Pointer(&w[0]), uintptr(4*len(w))), "cuMemcpyHtoD_v2(%d B) on GPU %d", 4*len(w), ordinal)
	runtime.KeepAlive(w)
	return err
}

// NewEvent creates a timing event in the ordinal's context.
func (d *Driver) NewEvent(ordinal int) (Event, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return 0, err
	}
	var e Event
	if err := d.check(d.cuEventCreate(&e, eventDefault), "cuEventCreate on GPU %d", ordinal); err != nil {
		return 0, err
	}
	return e, nil
}

// DestroyEvent is cuEventDestroy_v2.
func (d *Driver) DestroyEvent(e Event) error {
	if e == 0 {
		return nil
	}
	return d.check(d.cuEventDestroy(e), "cuEventDestroy_v2")
}

// Record is cuEventRecord.
func (d *Driver) Record(ordinal int, e Event, s Stream) error {
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	return d.check(d.cuEventRecord(e, s), "cuEventRecord on GPU %d", ordinal)
}

// Elapsed waits for end and returns the time between the events in milliseconds.
func (d *Driver) Elapsed(ordinal int, start, end Event) (float64, error) {
	if err := d.check(d.cuEventSynchronize(end), "cuEventSynchronize on GPU %d", ordinal); err != nil {
		return 0, err
	}
	var ms float32
	if err := d.check(d.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime on GPU %d", ordinal); err != nil {
		return 0, err
	}
	return float64(ms), nil
}

// goString copies a NUL-terminated C string of at most max bytes.
func goString(p *byte, max int) string {
	var b []byte
	for i := 0; i < max; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Size formats a byte count for messages: "256 MiB", "8 B".
func Size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
