package cuda

import (
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Module is a loaded PTX module in one GPU's primary context.
type Module struct {
	d       *Driver
	ordinal int
	h       uintptr
}

// Function is a kernel of a loaded module.
type Function struct {
	Name    string
	ordinal int
	h       uintptr
}

// LoadModule JIT-compiles PTX text in the ordinal's context (cuModuleLoadDataEx with
// an error log buffer). On failure it returns the JIT's log next to the error.
func (d *Driver) LoadModule(ordinal int, ptx string) (*Module, string, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return nil, "", err
	}
	image := append([]byte(ptx), 0)
	logBuf := make([]byte, 16<<10)
	var pin runtime.Pinner
	pin.Pin(&logBuf[0])
	defer pin.Unpin()
	opts := []int32{jitErrorLogBuf, jitErrorLogSize}
	// Option values are void*; the size travels as an integer in a pointer slot and
	// comes back as the log's length, so the slots are uintptrs, not Go pointers.
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	var h uintptr
	rc := d.cuModuleLoadDataEx(&h, &image[0], uint32(len(opts)), &opts[0], &vals[0])
	runtime.KeepAlive(image)
	if rc != cudaSuccess {
		n := int(vals[1])
		if n < 0 || n > len(logBuf) {
			n = len(logBuf)
		}
		log := goString(&logBuf[0], n)
		return nil, log, d.check(rc, "cuModuleLoadDataEx on GPU %d", ordinal)
	}
	return &Module{d: d, ordinal: ordinal, h: h}, "", nil
}

// Function looks a kernel up by its .entry name.
func (m *Module) Function(name string) (*Function, error) {
	if err := m.d.SetCurrent(m.ordinal); err != nil {
		return nil, err
	}
	cname := append([]byte(name), 0)
	var f uintptr
	if err := m.d.check(m.d.cuModuleGetFunction(&f, m.h, &cname[0]), "cuModuleGetFunction(%s) on GPU %d", name, m.ordinal); err != nil {
		return nil, err
	}
	return &Function{Name: name, ordinal: m.ordinal, h: f}, nil
}

// Unload is cuModuleUnload; the caller has the module's context current.
func (m *Module) Unload() error {
	if m == nil || m.h == 0 {
		return nil
	}
	err := m.d.check(m.d.cuModuleUnload(m.h), "cuModuleUnload on GPU %d", m.ordinal)
	m.h = 0
	return err
}

// Launch runs f on a 1-D grid. Every kernel argument is passed as a 64-bit value;
// 32-bit parameters read the low half (little-endian). The argument values and the
// pointer array are pinned Go memory, kept until cuLaunchKernel returns (the driver
// copies the parameters at launch).
func (d *Driver) Launch(f *Function, grid, block uint32, s Stream, args ...uint64) error {
	if err := d.SetCurrent(f.ordinal); err != nil {
		return err
	}
	vals := make([]uint64, len(args)+1) // +1: never empty
	copy(vals, args)
	ptrs := make([]unsafe.Pointer, len(vals))
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&vals[0])
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	pin.Pin(&ptrs[0])
	rc := d.cuLaunchKernel(f.h, grid, 1, 1, block, 1, 1, 0, s, &ptrs[0], nil)
	runtime.KeepAlive(vals)
	runtime.KeepAlive(ptrs)
	return d.check(rc, "cuLaunchKernel(%s, %d x %d) on GPU %d", f.Name, grid, block, f.ordinal)
}

// Kernels is the package's PTX module loaded on one GPU.
type Kernels struct {
	Module *Module
	SMs    int
	fill   *Function
	verify *Function
	copy   *Function
	spin   *Function
	result Ptr // 16 bytes for pb_verify
}

// Kernels loads (once per GPU) the fill, verify, copy and spin kernels. The error of
// a failed JIT carries the log as a *PTXError.
func (d *Driver) Kernels(ordinal int) (*Kernels, error) {
	if k, ok := d.kernels[ordinal]; ok {
		return k, nil
	}
	info, err := d.Device(ordinal)
	if err != nil {
		return nil, err
	}
	m, log, err := d.LoadModule(ordinal, kernelPTX)
	if err != nil {
		return nil, &PTXError{Err: err, Log: log}
	}
	k := &Kernels{Module: m, SMs: max(info.SMs, 1)}
	for _, fn := range []struct {
		name string
		dst  **Function
	}{{kFill, &k.fill}, {kVerify, &k.verify}, {kCopy, &k.copy}, {kSpin, &k.spin}} {
		if *fn.dst, err = m.Function(fn.name); err != nil {
			_ = m.Unload()
			return nil, err
		}
	}
	if k.result, err = d.Alloc(ordinal, 16); err != nil {
		_ = m.Unload()
		return nil, err
	}
	d.kernels[ordinal] = k
	return k, nil
}

// PTXError is a module that did not load, with the JIT's error log.
type PTXError struct {
	Err error
	Log string
}

func (e *PTXError) Error() string {
	if e.Log == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + ": " + e.Log
}

func (e *PTXError) Unwrap() error { return e.Err }

// gridFor sizes a grid-stride launch: enough blocks to fill every SM a few times,
// never more than the work needs.
func gridFor(sms int, items int64, block int64) uint32 {
	g := int64(sms) * 8
	if need := (items + block - 1) / block; need < g {
		g = need
	}
	return uint32(max(g, 1))
}

// Fill writes Pattern(i, seed) into the nWords 32-bit words at p.
func (d *Driver) Fill(ordinal int, s Stream, p Ptr, nWords int64, seed uint32) error {
	k, err := d.Kernels(ordinal)
	if err != nil {
		return err
	}
	return d.Launch(k.fill, gridFor(k.SMs, nWords, 256), 256, s, uint64(p), uint64(nWords), uint64(seed))
}

// Verification is what the verify kernel found.
type Verification struct {
	Wrong    int64 // words that differ
	FirstBad int64 // word index of the first, -1 when none
}

// Verify checks the nWords words at p against Pattern(i, seed) on the GPU and waits
// for the answer.
func (d *Driver) Verify(ordinal int, s Stream, p Ptr, nWords int64, seed uint32) (Verification, error) {
	k, err := d.Kernels(ordinal)
	if err != nil {
		return Verification{}, err
	}
	if err := d.MemsetD32Async(ordinal, k.result, 0, 2, s); err != nil {
		return Verification{}, err
	}
	if err := d.MemsetD32Async(ordinal, k.result+8, math.MaxUint32, 2, s); err != nil {
		return Verification{}, err
	}
	if err := d.Launch(k.verify, gridFor(k.SMs, nWords, 256), 256, s, uint64(p), uint64(nWords), uint64(seed), uint64(k.result)); err != nil {
		return Verification{}, err
	}
	if err := d.StreamSync(ordinal, s); err != nil {
		return Verification{}, err
	}
	w, err := d.ReadWords(ordinal, k.result, 4)
	if err != nil {
		return Verification{}, err
	}
	v := Verification{Wrong: int64(uint64(w[0]) | uint64(w[1])<<32), FirstBad: -1}
	if v.Wrong > 0 {
		v.FirstBad = int64(uint64(w[2]) | uint64(w[3])<<32)
	}
	return v, nil
}

// The SM copy's launch shape; scripts/device/d2d_ref.cu's reference kernel uses the
// same. Two blocks of 512 per SM fit every GPU the self-test targets (sm_89 holds
// 1536 threads per SM, sm_90 2048) and, with pb_copy_v4's four loads per thread,
// keep enough bytes in flight to saturate HBM.
const (
	smCopyBlocksPerSM = 2
	smCopyThreads     = 512
)

// CopySM launches the uint4 copy kernel on the ordinal's stream: grid =
// smCopyBlocksPerSM blocks per SM of smCopyThreads threads. bytes is a multiple of 16.
func (d *Driver) CopySM(ordinal int, s Stream, dst, src Ptr, bytes int64) error {
	k, err := d.Kernels(ordinal)
	if err != nil {
		return err
	}
	return d.Launch(k.copy, uint32(k.SMs*smCopyBlocksPerSM), smCopyThreads, s, uint64(dst), uint64(src), uint64(bytes/16))
}

// HostFlag is a word pair in pinned, device-mapped host memory: word 0 releases the
// spin kernels, word 1 is set by a spin kernel that timed out.
type HostFlag struct {
	d    *Driver
	host uintptr
}

// NewHostFlag allocates the flag (cuMemHostAlloc PORTABLE|DEVICEMAP) with the
// ordinal's context current.
func (d *Driver) NewHostFlag(ordinal int) (*HostFlag, error) {
	if err := d.SetCurrent(ordinal); err != nil {
		return nil, err
	}
	var h uintptr
	if err := d.check(d.cuMemHostAlloc(&h, 64, hostAllocPortable|hostAllocDevMap), "cuMemHostAlloc(64 B)"); err != nil {
		return nil, err
	}
	f := &HostFlag{d: d, host: h}
	f.Set(0)
	atomic.StoreUint32(f.word(1), 0)
	return f, nil
}

// word returns a pointer into C memory; the conversion goes through a pointer to the
// uintptr so that no Go pointer is ever made from an integer expression.
func (f *HostFlag) word(i int) *uint32 {
	base := *(*unsafe.Pointer)(unsafe.Pointer(&f.host))
	return (*uint32)(unsafe.Add(base, 4*i))
}

// Set stores v into word 0.
func (f *HostFlag) Set(v uint32) { atomic.StoreUint32(f.word(0), v) }

// TimedOut reports (and clears) a spin kernel's timeout mark.
func (f *HostFlag) TimedOut() bool { return atomic.SwapUint32(f.word(1), 0) != 0 }

// Free releases the host memory.
func (f *HostFlag) Free() error {
	if f == nil || f.host == 0 {
		return nil
	}
	err := f.d.check(f.d.cuMemFreeHost(f.host), "cuMemFreeHost")
	f.host = 0
	return err
}

// Spin enqueues the spin kernel on the ordinal's stream: work queued behind it waits
// until the flag is set or timeout passes.
func (d *Driver) Spin(ordinal int, s Stream, f *HostFlag, timeoutClocks uint64) error {
	k, err := d.Kernels(ordinal)
	if err != nil {
		return err
	}
	if err := d.SetCurrent(ordinal); err != nil {
		return err
	}
	var dp Ptr
	if err := d.check(d.cuMemHostGetDevicePointer(&dp, f.host, 0), "cuMemHostGetDevicePointer_v2 on GPU %d", ordinal); err != nil {
		return err
	}
	return d.Launch(k.spin, 1, 1, s, uint64(dp), timeoutClocks)
}
