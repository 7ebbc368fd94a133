package gpufake

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
)

// CUresult values the FAKE driver returns (cuda.h).
const (
	cudaErrorInvalidValue      = 1
	cudaErrorOutOfMemory       = 2
	cudaErrorNotInitialized    = 3
	cudaErrorNoDevice          = 100
	cudaErrorInvalidDevice     = 101
	cudaErrorInvalidContext    = 201
	cudaErrorPeerUnsupported   = 217
	cudaErrorInvalidPTX        = 218
	cudaErrorInvalidHandle     = 400
	cudaErrorNotFound          = 500
	cudaErrorNotReady          = 600
	cudaErrorIllegalAddress    = 700
	cudaErrorPeerAlreadyOn     = 704
	cudaErrorPeerNotEnabled    = 705
	cudaErrorLaunchFailed      = 719
	cudaErrorSharedObjectInit  = 303
	cudaErrorFakeUnimplemented = 801 // CUDA_ERROR_NOT_SUPPORTED
)

// cudaNames are cuda.h 13.0's names of the codes a P2P test meets (selftest.md §2),
// which the FAKE cuGetErrorName answers as libcuda's does.
var cudaNames = map[int32]string{
	1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE", 200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT", 205: "CUDA_ERROR_MAP_FAILED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	214: "CUDA_ERROR_ECC_UNCORRECTABLE", 217: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", 218: "CUDA_ERROR_INVALID_PTX",
	221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY", 700: "CUDA_ERROR_ILLEGAL_ADDRESS",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT", 704: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", 705: "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
	711: "CUDA_ERROR_TOO_MANY_PEERS", 719: "CUDA_ERROR_LAUNCH_FAILED",
}

// FakeLibrary is one FAKE shared library of a box: it binds entry points by name into
// the func fields of selftest/cuda's and selftest/nccl's bindings (cuda.Library).
type FakeLibrary struct {
	name string
	syms map[string]any
}

// Name is the library's report name, which says FAKE.
func (l *FakeLibrary) Name() string { return l.name }

// Bind sets *fn to the FAKE entry point. A symbol the stand-in lacks, or one whose Go
// signature differs from the binding's, is an error naming both, so a binding that
// changes cannot silently run against a stale stand-in.
func (l *FakeLibrary) Bind(name string, fn any) error {
	impl, ok := l.syms[name]
	if !ok {
		return fmt.Errorf("dlsym %s: FAKE library %s has no such symbol", name, l.name)
	}
	dst := reflect.ValueOf(fn)
	if dst.Kind() != reflect.Pointer || dst.Elem().Kind() != reflect.Func {
		return fmt.Errorf("binding %s: want a pointer to a func, got %T", name, fn)
	}
	v := reflect.ValueOf(impl)
	if v.Type() != dst.Elem().Type() {
		return fmt.Errorf("binding %s: FAKE signature %s, binding wants %s", name, v.Type(), dst.Elem().Type())
	}
	dst.Elem().Set(v)
	return nil
}

// CUDA is the box's FAKE libcuda.
func (b *FakeBox) CUDA() *FakeLibrary {
	return &FakeLibrary{name: CUDAName, syms: map[string]any{
		"cuInit":                       b.cuInit,
		"cuDriverGetVersion":           b.cuDriverGetVersion,
		"cuGetErrorName":               b.cuGetErrorName,
		"cuDeviceGetCount":             b.cuDeviceGetCount,
		"cuDeviceGet":                  b.cuDeviceGet,
		"cuDeviceGetName":              b.cuDeviceGetName,
		"cuDeviceTotalMem_v2":          b.cuDeviceTotalMem,
		"cuDeviceGetAttribute":         b.cuDeviceGetAttribute,
		"cuDeviceGetPCIBusId":          b.cuDeviceGetPCIBusId,
		"cuDeviceCanAccessPeer":        b.cuDeviceCanAccessPeer,
		"cuDevicePrimaryCtxRetain":     b.cuDevicePrimaryCtxRetain,
		"cuDevicePrimaryCtxRelease_v2": b.cuDevicePrimaryCtxRelease,
		"cuCtxSetCurrent":              b.cuCtxSetCurrent,
		"cuCtxSynchronize":             b.cuCtxSynchronize,
		"cuCtxEnablePeerAccess":        b.cuCtxEnablePeerAccess,
		"cuCtxDisablePeerAccess":       b.cuCtxDisablePeerAccess,
		"cuMemAlloc_v2":                b.cuMemAlloc,
		"cuMemFree_v2":                 b.cuMemFree,
		"cuMemGetInfo_v2":              b.cuMemGetInfo,
		"cuMemHostAlloc":               b.cuMemHostAlloc,
		"cuMemFreeHost":                b.cuMemFreeHost,
		"cuMemHostGetDevicePointer_v2": b.cuMemHostGetDevicePointer,
		"cuMemcpyHtoD_v2":              b.cuMemcpyHtoD,
		"cuMemcpyDtoH_v2":              b.cuMemcpyDtoH,
		"cuMemcpyAsync":                b.cuMemcpyAsync,
		"cuMemsetD32Async":             b.cuMemsetD32Async,
		"cuStreamCreate":               b.cuStreamCreate,
		"cuStreamDestroy_v2":           b.cuStreamDestroy,
		"cuStreamSynchronize":          b.cuStreamSynchronize,
		"cuEventCreate":                b.cuEventCreate,
		"cuEventRecord":                b.cuEventRecord,
		"cuEventSynchronize":           b.cuEventSynchronize,
		"cuEventElapsedTime_v2":        b.cuEventElapsedTime,
		"cuEventDestroy_v2":            b.cuEventDestroy,
		"cuModuleLoadDataEx":           b.cuModuleLoadDataEx,
		"cuModuleGetFunction":          b.cuModuleGetFunction,
		"cuModuleUnload":               b.cuModuleUnload,
		"cuLaunchKernel":               b.cuLaunchKernel,

		"cuMemAllocManaged":              b.cuMemAllocManaged,
		"cuMemAdvise":                    b.cuMemAdvise,
		"cuMemGetAllocationGranularity":  b.cuMemGetAllocationGranularity,
		"cuMemCreate":                    b.cuMemCreate,
		"cuMemRelease":                   b.cuMemRelease,
		"cuMemAddressReserve":            b.cuMemAddressReserve,
		"cuMemAddressFree":               b.cuMemAddressFree,
		"cuMemMap":                       b.cuMemMap,
		"cuMemUnmap":                     b.cuMemUnmap,
		"cuMemSetAccess":                 b.cuMemSetAccess,
		"cuMemExportToShareableHandle":   b.cuMemExportToShareableHandle,
		"cuMemImportFromShareableHandle": b.cuMemImportFromShareableHandle,
		"cuIpcGetMemHandle":              b.cuIpcGetMemHandle,
		"cuIpcOpenMemHandle_v2":          b.cuIpcOpenMemHandle,
		"cuIpcCloseMemHandle":            b.cuIpcCloseMemHandle,
	}}
}

func (b *FakeBox) newHandle() uintptr {
	b.handle++
	return b.handle<<4 | 0x8 // never 0, never a small ordinal
}

func (b *FakeBox) ready(call string) int32 {
	if rc := b.fault(call); rc != 0 {
		return rc
	}
	if !b.inited {
		return cudaErrorNotInitialized
	}
	return 0
}

func (b *FakeBox) cuInit(flags uint32) int32 {
	if rc := b.fault("cuInit"); rc != 0 {
		return rc
	}
	if flags != 0 {
		return cudaErrorInvalidValue
	}
	if len(b.cfg.GPUs) == 0 {
		return cudaErrorNoDevice
	}
	b.inited = true
	return 0
}

func (b *FakeBox) cuDriverGetVersion(v *int32) int32 {
	if rc := b.fault("cuDriverGetVersion"); rc != 0 {
		return rc
	}
	*v = int32(b.cfg.DriverVersion)
	return 0
}

func (b *FakeBox) cuGetErrorName(code int32, name **byte) int32 {
	s, ok := b.names[code]
	if !ok {
		name, known := cudaNames[code]
		if !known {
			st := selftest.CUDAStatus(int(code))
			if strings.HasPrefix(st.Name, "CUresult(") {
				return cudaErrorInvalidValue
			}
			name = st.Name
		}
		s = append([]byte(name), 0)
		b.names[code] = s
	}
	*name = &s[0]
	return 0
}

func (b *FakeBox) cuDeviceGetCount(n *int32) int32 {
	if rc := b.ready("cuDeviceGetCount"); rc != 0 {
		return rc
	}
	*n = int32(len(b.cfg.GPUs))
	return 0
}

func (b *FakeBox) valid(dev int32) bool { return dev >= 0 && int(dev) < len(b.cfg.GPUs) }

func (b *FakeBox) cuDeviceGet(dev *int32, ordinal int32) int32 {
	if rc := b.ready("cuDeviceGet"); rc != 0 {
		return rc
	}
	if !b.valid(ordinal) {
		return cudaErrorInvalidDevice
	}
	*dev = ordinal
	return 0
}

// putString writes a NUL-terminated string into a C buffer of n bytes.
func putString(buf *byte, n int32, s string) int32 {
	if n <= 0 {
		return cudaErrorInvalidValue
	}
	out := unsafe.Slice(buf, int(n))
	k := copy(out[:n-1], s)
	out[k] = 0
	return 0
}

func (b *FakeBox) cuDeviceGetName(buf *byte, n int32, dev int32) int32 {
	if rc := b.ready("cuDeviceGetName"); rc != 0 {
		return rc
	}
	if !b.valid(dev) {
		return cudaErrorInvalidDevice
	}
	return putString(buf, n, "FAKE "+b.cfg.GPUs[dev].Name)
}

func (b *FakeBox) cuDeviceTotalMem(bytes *uint64, dev int32) int32 {
	if rc := b.ready("cuDeviceTotalMem_v2"); rc != 0 {
		return rc
	}
	if !b.valid(dev) {
		return cudaErrorInvalidDevice
	}
	*bytes = uint64(b.cfg.GPUs[dev].MemBytes)
	return 0
}

// CUdevice_attribute values the engine asks for.
const (
	attrClockRate         = 13
	attrSMCount           = 16
	attrCCMajor           = 75
	attrCCMinor           = 76
	attrManagedMemory     = 83
	attrConcurrentManaged = 89
)

func (b *FakeBox) cuDeviceGetAttribute(v *int32, attr int32, dev int32) int32 {
	if rc := b.ready("cuDeviceGetAttribute"); rc != 0 {
		return rc
	}
	if !b.valid(dev) {
		return cudaErrorInvalidDevice
	}
	g := b.cfg.GPUs[dev]
	maj, mnr, _ := strings.Cut(g.CC, ".")
	switch attr {
	case attrClockRate:
		*v = int32(g.ClockKHz)
	case attrSMCount:
		*v = int32(g.SMs)
	case attrCCMajor:
		x, _ := strconv.Atoi(maj)
		*v = int32(x)
	case attrCCMinor:
		x, _ := strconv.Atoi(mnr)
		*v = int32(x)
	case attrManagedMemory, attrConcurrentManaged:
		*v = 1 // Linux with a Pascal or newer GPU
	default:
		return cudaErrorInvalidValue
	}
	return 0
}

func (b *FakeBox) cuDeviceGetPCIBusId(buf *byte, n int32, dev int32) int32 {
	if rc := b.ready("cuDeviceGetPCIBusId"); rc != 0 {
		return rc
	}
	if !b.valid(dev) {
		return cudaErrorInvalidDevice
	}
	// The driver prints the address in upper case with a 4-digit domain.
	return putString(buf, n, strings.ToUpper(b.cfg.GPUs[dev].BDF))
}

func (b *FakeBox) canAccess(dev, peer int) bool {
	if dev == peer {
		return false
	}
	if b.cfg.CanAccess == nil {
		return true
	}
	return dev < len(b.cfg.CanAccess) && peer < len(b.cfg.CanAccess[dev]) && b.cfg.CanAccess[dev][peer]
}

func (b *FakeBox) cuDeviceCanAccessPeer(can *int32, dev, peer int32) int32 {
	if rc := b.ready("cuDeviceCanAccessPeer"); rc != 0 {
		return rc
	}
	if !b.valid(dev) || !b.valid(peer) {
		return cudaErrorInvalidDevice
	}
	*can = 0
	if b.canAccess(int(dev), int(peer)) {
		*can = 1
	}
	return 0
}

// Contexts: GPU g's primary context is the handle g+1.
func ctxOf(g int) uintptr { return uintptr(g + 1) }

func (b *FakeBox) gpuOf(ctx uintptr) int {
	g := int(ctx) - 1
	if g < 0 || g >= len(b.cfg.GPUs) || b.retain[g] == 0 {
		return -1
	}
	return g
}

func (b *FakeBox) cuDevicePrimaryCtxRetain(ctx *uintptr, dev int32) int32 {
	if rc := b.ready("cuDevicePrimaryCtxRetain"); rc != 0 {
		return rc
	}
	if !b.valid(dev) {
		return cudaErrorInvalidDevice
	}
	b.retain[dev]++
	*ctx = ctxOf(int(dev))
	return 0
}

func (b *FakeBox) cuDevicePrimaryCtxRelease(dev int32) int32 {
	if rc := b.ready("cuDevicePrimaryCtxRelease_v2"); rc != 0 {
		return rc
	}
	if !b.valid(dev) || b.retain[dev] == 0 {
		return cudaErrorInvalidContext
	}
	b.retain[dev]--
	if b.retain[dev] == 0 {
		// The last release destroys the context and its peer mappings.
		for p := range b.peer {
			b.peer[dev][p], b.peer[p][dev] = false, false
		}
		if b.current == int(dev) {
			b.current = -1
		}
	}
	return 0
}

func (b *FakeBox) cuCtxSetCurrent(ctx uintptr) int32 {
	if rc := b.fault("cuCtxSetCurrent"); rc != 0 {
		return rc
	}
	if ctx == 0 {
		b.current = -1
		return 0
	}
	g := b.gpuOf(ctx)
	if g < 0 {
		return cudaErrorInvalidContext
	}
	b.current = g
	return 0
}

func (b *FakeBox) cur(call string) (int, int32) {
	if rc := b.ready(call); rc != 0 {
		return -1, rc
	}
	if b.current < 0 {
		return -1, cudaErrorInvalidContext
	}
	return b.current, 0
}

func (b *FakeBox) cuCtxSynchronize() int32 {
	g, rc := b.cur("cuCtxSynchronize")
	if rc != 0 {
		return rc
	}
	for _, s := range b.streams {
		if s.gpu == g {
			if rc := b.flush(s); rc != 0 {
				return rc
			}
		}
	}
	return 0
}

func (b *FakeBox) cuCtxEnablePeerAccess(peer uintptr, flags uint32) int32 {
	g, rc := b.cur("cuCtxEnablePeerAccess")
	if rc != 0 {
		return rc
	}
	p := b.gpuOf(peer)
	switch {
	case p < 0 || flags != 0:
		return cudaErrorInvalidValue
	case !b.canAccess(g, p):
		return cudaErrorPeerUnsupported
	case b.peer[g][p]:
		return cudaErrorPeerAlreadyOn
	}
	b.peer[g][p] = true
	return 0
}

func (b *FakeBox) cuCtxDisablePeerAccess(peer uintptr) int32 {
	g, rc := b.cur("cuCtxDisablePeerAccess")
	if rc != 0 {
		return rc
	}
	p := b.gpuOf(peer)
	if p < 0 {
		return cudaErrorInvalidValue
	}
	if !b.peer[g][p] {
		return cudaErrorPeerNotEnabled
	}
	b.peer[g][p] = false
	return 0
}

func (b *FakeBox) cuMemAlloc(p *cuda.Ptr, n uintptr) int32 {
	g, rc := b.cur("cuMemAlloc_v2")
	if rc != 0 {
		return rc
	}
	return b.allocate(p, g, n, MemDevice)
}

// allocate places n bytes of kind mem on GPU g, above everything allocated before.
func (b *FakeBox) allocate(p *cuda.Ptr, g int, n uintptr, mem string) int32 {
	if n == 0 {
		return cudaErrorInvalidValue
	}
	size := (uint64(n) + vaAlign - 1) / vaAlign * vaAlign
	if b.used(g)+int64(size) > b.cfg.GPUs[g].MemBytes {
		return cudaErrorOutOfMemory
	}
	a := &alloc{gpu: g, addr: base(g) + b.next[g], size: uint64(n), mem: mem}
	b.next[g] += size
	b.insert(a)
	*p = cuda.Ptr(a.addr)
	return 0
}

func (b *FakeBox) cuMemFree(p cuda.Ptr) int32 {
	if rc := b.ready("cuMemFree_v2"); rc != 0 {
		return rc
	}
	for i, a := range b.allocs {
		if a.addr == uint64(p) && !a.ipcOpened && a.mem != MemVMM {
			b.allocs = append(b.allocs[:i], b.allocs[i+1:]...)
			if a.ipcPath != "" {
				os.Remove(a.ipcPath)
			}
			// Freed memory is not handed out again: later buffers sit above it, which
			// is where the above-BAR1 probe wants its buffer.
			return 0
		}
	}
	return cudaErrorInvalidValue
}

func (b *FakeBox) cuMemGetInfo(free, total *uintptr) int32 {
	g, rc := b.cur("cuMemGetInfo_v2")
	if rc != 0 {
		return rc
	}
	t := b.cfg.GPUs[g].MemBytes
	*total = uintptr(t)
	*free = uintptr(t - b.used(g))
	return 0
}

// hostMem is pinned host memory: anonymous mmap, outside the Go heap, so its address
// can travel as a uintptr the way cuMemHostAlloc's does.
type hostMem struct{ b []byte }

func (h *hostMem) addr() uint64 { return uint64(uintptr(unsafe.Pointer(&h.b[0]))) }

func (b *FakeBox) hostAt(addr uint64) *hostMem {
	for _, h := range b.host {
		if a := h.addr(); addr >= a && addr < a+uint64(len(h.b)) {
			return h
		}
	}
	return nil
}

func (b *FakeBox) cuMemHostAlloc(p *uintptr, n uintptr, flags uint32) int32 {
	if _, rc := b.cur("cuMemHostAlloc"); rc != 0 {
		return rc
	}
	if n == 0 {
		return cudaErrorInvalidValue
	}
	m, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return cudaErrorOutOfMemory
	}
	h := &hostMem{b: m}
	b.host = append(b.host, h)
	*p = uintptr(h.addr())
	return 0
}

func (b *FakeBox) cuMemFreeHost(p uintptr) int32 {
	if rc := b.ready("cuMemFreeHost"); rc != 0 {
		return rc
	}
	for i, h := range b.host {
		if h.addr() == uint64(p) {
			b.host = append(b.host[:i], b.host[i+1:]...)
			if syscall.Munmap(h.b) != nil {
				return cudaErrorInvalidValue
			}
			return 0
		}
	}
	return cudaErrorInvalidValue
}

// cuMemHostGetDevicePointer: with unified addressing the device pointer of mapped
// host memory is its host address.
func (b *FakeBox) cuMemHostGetDevicePointer(d *cuda.Ptr, p uintptr, flags uint32) int32 {
	if _, rc := b.cur("cuMemHostGetDevicePointer_v2"); rc != 0 {
		return rc
	}
	if flags != 0 || b.hostAt(uint64(p)) == nil {
		return cudaErrorInvalidValue
	}
	*d = cuda.Ptr(p)
	return 0
}

func (b *FakeBox) cuMemcpyHtoD(dst cuda.Ptr, src unsafe.Pointer, n uintptr) int32 {
	if _, rc := b.cur("cuMemcpyHtoD_v2"); rc != 0 {
		return rc
	}
	d := b.span(uint64(dst), uint64(n))
	if d == nil {
		return cudaErrorInvalidValue
	}
	copy(d, unsafe.Slice((*byte)(src), int(n)))
	return 0
}

func (b *FakeBox) cuMemcpyDtoH(dst unsafe.Pointer, src cuda.Ptr, n uintptr) int32 {
	if _, rc := b.cur("cuMemcpyDtoH_v2"); rc != 0 {
		return rc
	}
	s := b.span(uint64(src), uint64(n))
	if s == nil {
		return cudaErrorInvalidValue
	}
	copy(unsafe.Slice((*byte)(dst), int(n)), s)
	return 0
}

// Streams run their work when something waits for them (a stream or event
// synchronize), in order, which is when a real GPU may have run it too; work never
// runs at enqueue, so the spin gate and the timing see what they would on a GPU.
type stream struct {
	gpu   int
	ops   []func() int32
	clock float64 // seconds of virtual GPU time
}

type event struct {
	s    *stream
	t    float64
	done bool
}

func (b *FakeBox) flush(s *stream) int32 {
	for len(s.ops) > 0 {
		op := s.ops[0]
		s.ops = s.ops[1:]
		if rc := op(); rc != 0 {
			s.ops = nil
			return rc
		}
	}
	return 0
}

// streamFor checks that s belongs to the current context's GPU.
func (b *FakeBox) streamFor(call string, s cuda.Stream) (*stream, int32) {
	g, rc := b.cur(call)
	if rc != 0 {
		return nil, rc
	}
	st, ok := b.streams[uintptr(s)]
	if !ok {
		return nil, cudaErrorInvalidHandle
	}
	if st.gpu != g {
		return nil, cudaErrorInvalidContext
	}
	return st, 0
}

func (b *FakeBox) cuMemcpyAsync(dst, src cuda.Ptr, n uintptr, s cuda.Stream) int32 {
	st, rc := b.streamFor("cuMemcpyAsync", s)
	if rc != 0 {
		return rc
	}
	st.ops = append(st.ops, func() int32 {
		dt, rc := b.copyBytes(st.gpu, uint64(dst), uint64(src), uint64(n), false)
		st.clock += dt
		return rc
	})
	return 0
}

func (b *FakeBox) cuMemsetD32Async(p cuda.Ptr, v uint32, n uintptr, s cuda.Stream) int32 {
	st, rc := b.streamFor("cuMemsetD32Async", s)
	if rc != 0 {
		return rc
	}
	if b.span(uint64(p), 4*uint64(n)) == nil {
		return cudaErrorInvalidValue
	}
	st.ops = append(st.ops, func() int32 {
		for i := uint64(0); i < uint64(n); i++ {
			b.writeWord(st.gpu, uint64(p)+4*i, v)
		}
		st.clock += float64(4*n) / (b.cfg.LocalGBps * 1e9)
		return 0
	})
	return 0
}

func (b *FakeBox) cuStreamCreate(s *cuda.Stream, flags uint32) int32 {
	g, rc := b.cur("cuStreamCreate")
	if rc != 0 {
		return rc
	}
	h := b.newHandle()
	b.streams[h] = &stream{gpu: g}
	*s = cuda.Stream(h)
	return 0
}

func (b *FakeBox) cuStreamDestroy(s cuda.Stream) int32 {
	st, rc := b.streamFor("cuStreamDestroy_v2", s)
	if rc != 0 {
		return rc
	}
	rc = b.flush(st)
	delete(b.streams, uintptr(s))
	return rc
}

func (b *FakeBox) cuStreamSynchronize(s cuda.Stream) int32 {
	if rc := b.ready("cuStreamSynchronize"); rc != 0 {
		return rc
	}
	st, ok := b.streams[uintptr(s)]
	if !ok {
		return cudaErrorInvalidHandle
	}
	return b.flush(st)
}

func (b *FakeBox) cuEventCreate(e *cuda.Event, flags uint32) int32 {
	if _, rc := b.cur("cuEventCreate"); rc != 0 {
		return rc
	}
	h := b.newHandle()
	b.events[h] = &event{}
	*e = cuda.Event(h)
	return 0
}

func (b *FakeBox) cuEventRecord(e cuda.Event, s cuda.Stream) int32 {
	st, rc := b.streamFor("cuEventRecord", s)
	if rc != 0 {
		return rc
	}
	ev, ok := b.events[uintptr(e)]
	if !ok {
		return cudaErrorInvalidHandle
	}
	ev.s, ev.done = st, false
	st.ops = append(st.ops, func() int32 {
		ev.t, ev.done = st.clock, true
		return 0
	})
	return 0
}

func (b *FakeBox) cuEventSynchronize(e cuda.Event) int32 {
	if rc := b.ready("cuEventSynchronize"); rc != 0 {
		return rc
	}
	ev, ok := b.events[uintptr(e)]
	if !ok {
		return cudaErrorInvalidHandle
	}
	if ev.s == nil {
		return 0
	}
	return b.flush(ev.s)
}

func (b *FakeBox) cuEventElapsedTime(ms *float32, start, end cuda.Event) int32 {
	if rc := b.ready("cuEventElapsedTime_v2"); rc != 0 {
		return rc
	}
	a, ok1 := b.events[uintptr(start)]
	z, ok2 := b.events[uintptr(end)]
	if !ok1 || !ok2 {
		return cudaErrorInvalidHandle
	}
	if !a.done || !z.done {
		return cudaErrorNotReady
	}
	*ms = float32((z.t - a.t) * 1e3)
	return 0
}

func (b *FakeBox) cuEventDestroy(e cuda.Event) int32 {
	if rc := b.ready("cuEventDestroy_v2"); rc != 0 {
		return rc
	}
	if _, ok := b.events[uintptr(e)]; !ok {
		return cudaErrorInvalidHandle
	}
	delete(b.events, uintptr(e))
	return 0
}
