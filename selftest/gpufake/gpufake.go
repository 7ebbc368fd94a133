// Package gpufake is a FAKE stand-in for the CUDA driver API, NCCL and NVML, for tests only:
// it is not NVIDIA code and drives no GPU. It answers the very entry points
// selftest/cuda and selftest/nccl bind from libcuda and libnccl (same names, same Go
// signatures as their purego bindings), backed by host memory, with the effect of
// the self-test's PTX kernels (pattern fill, verify with mismatch count and first
// offset, the SM copy, the spin gate, the NCCL rank fill and sum check) emulated in
// Go. The engine's real host code runs over it unchanged: cuda.Open(box.CUDA()) and
// nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL()}, and
// nvml.ProbeWith(ctx, NewNVML(cfg)) for NVML's return and status codes.
//
// Faults are raw effects the way broken hardware or a broken driver shows them, not
// findings: a word flipped in a copy's destination, a copy that stops short, an entry
// point returning an error code, a wrong element in an all-reduce sum, peer writes
// above a BAR1 window landing inside it. The verdict has to find them on its own.
//
// Time is virtual: every copy advances its stream's clock by bytes / rate, and events
// read that clock, so the bandwidth figures are exactly what the config says.
package gpufake

import (
	"fmt"
	"sort"
)

// Name labels the FAKE libraries in reports (CUDA.Library, NCCL.Library).
const (
	CUDAName = "FAKE-libcuda (selftest/gpufake, no GPU)"
	NCCLName = "FAKE-libnccl (selftest/gpufake, no GPU)"
)

// FakeGPU is one emulated device.
type FakeGPU struct {
	Name     string `json:"name"`      // cuDeviceGetName, reported with a "FAKE " prefix
	BDF      string `json:"bdf"`       // cuDeviceGetPCIBusId, e.g. 0000:01:00.0
	CC       string `json:"cc"`        // compute capability "8.9" [8.9]
	SMs      int    `json:"sms"`       // [128]
	MemBytes int64  `json:"mem_bytes"` // [24 GiB]
	ClockKHz int    `json:"clock_khz"` // [2520000]
}

// FakeConfig is the box the stand-in emulates. Zero values take the defaults in brackets.
type FakeConfig struct {
	GPUs          []FakeGPU `json:"gpus"`
	DriverVersion int       `json:"driver_version"` // cuDriverGetVersion [12040]
	// CanAccess[i][j] is cuDeviceCanAccessPeer(i, j); nil: every pair true.
	CanAccess [][]bool `json:"can_access,omitempty"`
	// Rates in GB/s (1e9 B/s) of a copy engine copy: on one GPU, between peers with
	// peer access on, and staged through the host without it [900, 20, 10]. PeerGBps
	// [src][dst], when set, overrides PeerGBps for that pair. SM copies run at
	// SMFactor of the same figure [0.9].
	LocalGBps   float64     `json:"local_gbps"`
	PeerGBps    float64     `json:"peer_gbps"`
	PairGBps    [][]float64 `json:"pair_gbps,omitempty"`
	StagedGBps  float64     `json:"staged_gbps"`
	SMFactor    float64     `json:"sm_factor"`
	NCCLVersion int         `json:"nccl_version"`  // ncclGetVersion [22105]
	NCCLBusGBps float64     `json:"nccl_bus_gbps"` // all-reduce algbw per rank link [20]
	Faults      []Fault     `json:"faults,omitempty"`
	// NCCLLog is written, one line each, to NCCL_DEBUG_FILE at ncclCommInitAll, the
	// way libnccl logs its channel setup. nil: one ring over every rank via
	// "P2P/direct pointer", which is what a single-process NCCL logs with P2P on.
	NCCLLog []string `json:"nccl_log,omitempty"`
	// NCCLLastError is what ncclGetLastError answers: NCCL's last WARN text, e.g.
	// "Cuda failure 'no kernel image is available for execution on the device'"
	// beside a Code fault on an NCCL entry point [""].
	NCCLLastError string `json:"nccl_last_error,omitempty"`
	// PTXLog is the JIT log cuModuleLoadDataEx returns with a Code fault on it.
	PTXLog string `json:"ptx_log,omitempty"`
	// VMMGranularity is what cuMemGetAllocationGranularity answers [64 KiB: smaller
	// than NVIDIA's 2 MiB, so the tests' Go loops stay quick].
	VMMGranularity int64 `json:"vmm_granularity,omitempty"`
}

// Fault kinds.
const (
	// FaultCode: entry point Call returns Code instead of success (on the Nth call,
	// counting from 1; 0: every call).
	FaultCode = "code"
	// FaultFlip: after a copy matching Copy, the 32-bit word at byte Offset of the
	// destination range is inverted (Offset < 0: the middle word).
	FaultFlip = "flip"
	// FaultShort: copies matching Copy move only their first Bytes bytes [half].
	FaultShort = "short"
	// FaultSum: the all-reduce result on rank Rank is one too large at Count elements
	// from element Elem [1].
	FaultSum = "sum"
	// FaultWindow: accesses from another GPU to GPU's memory at a physical offset at
	// or above Window land at that offset modulo Window, where nothing of the buffer
	// is (a BAR1 window that does not follow the buffer).
	FaultWindow = "window"
	// FaultLost: kernel writes from another GPU into GPU's memory of kind Mem
	// ("managed", "vmm"; "" cuMemAlloc'd) are lost, from byte Offset of the allocation
	// for Bytes bytes [all of it]: a peer mapping that points somewhere else.
	FaultLost = "lost"
	// FaultMMU: a kernel of another GPU touching GPU's memory of kind Mem fails with
	// CUDA_ERROR_ILLEGAL_ADDRESS, the way an MMU fault (Xid 31) ends a kernel.
	FaultMMU = "mmu"
)

// Fault is one raw effect injected into the stand-in.
type Fault struct {
	Kind string `json:"kind"`
	// code
	Call string `json:"call,omitempty"`
	Code int    `json:"code,omitempty"`
	Nth  int    `json:"nth,omitempty"`
	// flip, short: "src->dst" GPU ordinals ("0->1", "2->2" for a local copy); "" any.
	// Method "ce" or "sm" narrows it; "" both.
	Copy   string `json:"copy,omitempty"`
	Method string `json:"method,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	// sum
	Rank  int   `json:"rank,omitempty"`
	Elem  int64 `json:"elem,omitempty"`
	Count int64 `json:"count,omitempty"`
	// window, lost, mmu
	GPU    int   `json:"gpu,omitempty"`
	Window int64 `json:"window,omitempty"`
	// lost, mmu
	Mem string `json:"mem,omitempty"`
}

func (c FakeConfig) withDefaults() FakeConfig {
	c.GPUs = append([]FakeGPU(nil), c.GPUs...)
	for i := range c.GPUs {
		g := &c.GPUs[i]
		if g.Name == "" {
			g.Name = "NVIDIA GeForce RTX 4090"
		}
		if g.BDF == "" {
			g.BDF = fmt.Sprintf("0000:%02x:00.0", i+1)
		}
		if g.CC == "" {
			g.CC = "8.9"
		}
		if g.SMs <= 0 {
			g.SMs = 128
		}
		if g.MemBytes <= 0 {
			g.MemBytes = 24 << 30
		}
		if g.ClockKHz <= 0 {
			g.ClockKHz = 2520000
		}
	}
	if c.DriverVersion == 0 {
		c.DriverVersion = 12040
	}
	if c.LocalGBps <= 0 {
		c.LocalGBps = 900
	}
	if c.PeerGBps <= 0 {
		c.PeerGBps = 20
	}
	if c.StagedGBps <= 0 {
		c.StagedGBps = 10
	}
	if c.SMFactor <= 0 {
		c.SMFactor = 0.9
	}
	if c.NCCLVersion == 0 {
		c.NCCLVersion = 22105
	}
	if c.NCCLBusGBps <= 0 {
		c.NCCLBusGBps = 20
	}
	if c.VMMGranularity <= 0 {
		c.VMMGranularity = 64 << 10
	}
	return c
}

// FakeBox is one emulated machine: its GPUs' memory, contexts, streams and peer
// mappings, shared by the FAKE libcuda and libnccl it hands out. Like a real driver
// it is driven from one OS thread; it is not safe for concurrent use.
type FakeBox struct {
	cfg   FakeConfig
	calls map[string]int // entry point -> calls so far, for Nth faults

	inited  bool
	current int // GPU ordinal of the current context; -1 none
	retain  []int
	peer    [][]bool // peer[dev][peer]: dev's context maps peer's memory
	next    []uint64 // bump allocator per GPU, physical offset
	allocs  []*alloc // live device allocations, sorted by address
	host    []*hostMem
	streams map[uintptr]*stream
	events  map[uintptr]*event
	modules map[uintptr]*module
	funcs   map[uintptr]*function
	handle  uintptr
	names   map[int32][]byte // cuGetErrorName strings, NUL-terminated
	nccl    *ncclState
	vmm     *vmmState
	ipcs    uint64 // legacy IPC handles taken, for their files' names

	// Launches counts kernel launches by entry name, for tests that check a path ran.
	Launches map[string]int
	// Grids is, by entry name, the grid (blocks) of that kernel's last launch: the
	// emulation does the whole work whatever the grid, so a test reads here the launch
	// shape a real GPU would have been given.
	Grids map[string]uint32
	// SpinClocks is, per GPU, the timeout in GPU clocks the last spin gate (pb_spin)
	// that ran there was given: FAKE time never lets the gate wait, so a test reads
	// here what a real kernel would have waited.
	SpinClocks map[int]uint64
}

// New builds a box from cfg.
func New(cfg FakeConfig) *FakeBox {
	cfg = cfg.withDefaults()
	n := len(cfg.GPUs)
	b := &FakeBox{
		cfg: cfg, calls: map[string]int{}, current: -1, retain: make([]int, n),
		peer: make([][]bool, n), next: make([]uint64, n),
		streams: map[uintptr]*stream{}, events: map[uintptr]*event{},
		modules: map[uintptr]*module{}, funcs: map[uintptr]*function{},
		names: map[int32][]byte{}, Launches: map[string]int{}, Grids: map[string]uint32{}, SpinClocks: map[int]uint64{},
	}
	for i := range b.peer {
		b.peer[i] = make([]bool, n)
	}
	return b
}

// Calls is how many times the FAKE entry point name (e.g. "cuMemcpyAsync") was
// called so far, failed calls included: for tests of how often the driver is asked.
func (b *FakeBox) Calls(name string) int { return b.calls[name] }

// Held counts what the FAKE driver still holds for its caller: device allocations
// (VMM mappings included), pinned host allocations, streams, events, loaded modules,
// primary-context retains, cuMemCreate (or imported) handles not released and
// cuMemAddressReserve ranges not freed. A caller that gave everything back leaves all
// of them 0.
func (b *FakeBox) Held() map[string]int {
	retained := 0
	for _, n := range b.retain {
		retained += n
	}
	held := map[string]int{"device memory": len(b.allocs), "host memory": len(b.host), "streams": len(b.streams),
		"events": len(b.events), "modules": len(b.modules), "contexts": retained, "vmm handles": 0, "address reservations": 0}
	if b.vmm != nil {
		held["vmm handles"], held["address reservations"] = len(b.vmm.phys), len(b.vmm.reserve)
	}
	return held
}

// fault returns the code an entry point should fail with, or 0.
func (b *FakeBox) fault(call string) int32 {
	b.calls[call]++
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultCode && f.Call == call && (f.Nth == 0 || f.Nth == b.calls[call]) {
			return int32(f.Code)
		}
	}
	return 0
}

// Device memory: GPU g's physical offset o lives at virtual address base(g) + o, so
// pointers of all GPUs share one address space, as with unified addressing.
const (
	vaBase  = 0x7f0000000000
	vaShift = 40
	vaAlign = 2 << 20
)

func base(gpu int) uint64 { return vaBase + uint64(gpu)<<vaShift }

type alloc struct {
	gpu  int
	addr uint64
	size uint64
	data []byte // made on first touch: ballast that is never written costs nothing
	mem  string // MemDevice, MemManaged, MemVMM
	// access is who may touch a MemVMM mapping (cuMemSetAccess); nil for other kinds.
	access map[int]bool
	// ipcPath is the shared file cuIpcGetMemHandle moved the bytes to (ipcN its
	// counter); ipcOpened marks another process's allocation opened by handle.
	ipcPath   string
	ipcN      uint64
	ipcOpened bool
}

func (a *alloc) bytes() []byte {
	if a.data == nil {
		a.data = make([]byte, a.size)
	}
	return a.data
}

// find returns the live allocation holding addr.
func (b *FakeBox) find(addr uint64) *alloc {
	i := sort.Search(len(b.allocs), func(i int) bool { return b.allocs[i].addr+b.allocs[i].size > addr })
	if i < len(b.allocs) && b.allocs[i].addr <= addr {
		return b.allocs[i]
	}
	return nil
}

// owner is the GPU whose memory addr is: the allocation's, else by the address bits.
func (b *FakeBox) owner(addr uint64) int {
	if a := b.find(addr); a != nil {
		return a.gpu
	}
	return b.ownerBits(addr)
}

// ownerBits is the GPU whose cuMemAlloc range holds addr, -1 none.
func (b *FakeBox) ownerBits(addr uint64) int {
	if addr < vaBase {
		return -1
	}
	g := int((addr - vaBase) >> vaShift)
	if g >= len(b.cfg.GPUs) {
		return -1
	}
	return g
}

func (b *FakeBox) used(gpu int) int64 {
	var n int64
	for _, a := range b.allocs {
		if a.gpu == gpu {
			n += int64(a.size)
		}
	}
	return n
}

// span is n bytes of device (or mapped host) memory at addr, nil when they are not
// all inside one live allocation.
func (b *FakeBox) span(addr, n uint64) []byte {
	if h := b.hostAt(addr); h != nil {
		off := addr - h.addr()
		if off+n <= uint64(len(h.b)) {
			return h.b[off : off+n]
		}
		return nil
	}
	a := b.find(addr)
	if a == nil || addr+n > a.addr+a.size {
		return nil
	}
	off := addr - a.addr
	return a.bytes()[off : off+n]
}

// peerTarget applies a window fault to an access from GPU from to addr.
func (b *FakeBox) peerTarget(from int, addr uint64) uint64 {
	g := b.ownerBits(addr)
	if g < 0 || g == from {
		return addr
	}
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultWindow && f.GPU == g && f.Window > 0 {
			if off := addr - base(g); off >= uint64(f.Window) {
				return base(g) + off%uint64(f.Window)
			}
		}
	}
	return addr
}

func (b *FakeBox) hasFault(kind string) bool {
	for _, f := range b.cfg.Faults {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func (b *FakeBox) windowed(g int) bool {
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultWindow && f.GPU == g {
			return true
		}
	}
	return false
}

// readWord and writeWord are one 32-bit access from GPU from (-1: the host); a word
// nothing backs reads 0 and a write to it is lost, as with a window mapped nowhere.
func (b *FakeBox) readWord(from int, addr uint64) uint32 {
	p := b.span(b.peerTarget(from, addr), 4)
	if p == nil {
		return 0
	}
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
}

func (b *FakeBox) writeWord(from int, addr uint64, v uint32) {
	if b.lost(from, addr) {
		return
	}
	p := b.span(b.peerTarget(from, addr), 4)
	if p == nil {
		return
	}
	p[0], p[1], p[2], p[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// lost applies the lost fault to a write from GPU from (-1: the host) to addr.
func (b *FakeBox) lost(from int, addr uint64) bool {
	a := b.faulted(FaultLost, from, addr)
	if a == nil {
		return false
	}
	off := int64(addr - a.addr)
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultLost && f.GPU == a.gpu && f.Mem == a.mem && off >= f.Offset && (f.Bytes <= 0 || off < f.Offset+f.Bytes) {
			return true
		}
	}
	return false
}

// faulted returns the allocation holding addr when a fault of kind names it for an
// access from another GPU (not the host), else nil.
func (b *FakeBox) faulted(kind string, from int, addr uint64) *alloc {
	if from < 0 {
		return nil
	}
	a := b.find(addr)
	if a == nil || a.gpu == from {
		return nil
	}
	for _, f := range b.cfg.Faults {
		if f.Kind == kind && f.GPU == a.gpu && f.Mem == a.mem {
			return a
		}
	}
	return nil
}

// accessible says whether a kernel on GPU from may touch addr: its own memory, mapped
// host memory, managed memory, a mapping cuMemSetAccess opened to it, or a peer it has
// peer access to.
func (b *FakeBox) accessible(from int, addr uint64) bool {
	if b.hostAt(addr) != nil {
		return true
	}
	if a := b.find(addr); a != nil && a.mem == MemManaged {
		return true
	} else if a != nil && a.mem == MemVMM {
		return a.access[from]
	}
	g := b.owner(addr)
	return g == from || (g >= 0 && b.peer[from][g])
}

// copyBytes moves n bytes from src to dst as GPU issuer's copy engine or SM kernel,
// with the copy faults applied, and returns the time it took in seconds.
func (b *FakeBox) copyBytes(issuer int, dst, src, n uint64, sm bool) (float64, int32) {
	sg, dg := b.owner(src), b.owner(dst)
	if sg < 0 || dg < 0 || b.find(src) == nil || b.find(dst) == nil {
		return 0, cudaErrorInvalidValue
	}
	if sm && (!b.accessible(issuer, src) || !b.accessible(issuer, dst)) {
		return 0, cudaErrorIllegalAddress
	}
	method := "ce"
	if sm {
		method = "sm"
	}
	key := fmt.Sprintf("%d->%d", sg, dg)
	moved := n
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultShort && matches(f, key, method) {
			short := uint64(f.Bytes)
			if f.Bytes <= 0 {
				short = n / 2
			}
			moved = min(moved, short&^3)
		}
	}
	staged := sg != dg && !(b.peer[dg][sg] || b.peer[sg][dg])
	from := issuer
	if staged {
		from = -1
	}
	if d, s := b.span(dst, moved), b.span(src, moved); d != nil && s != nil && !b.windowed(sg) && !b.windowed(dg) && !b.hasFault(FaultLost) {
		copy(d, s) // the common case, without per-word address translation
	} else {
		for o := uint64(0); o < moved; o += 4 {
			b.writeWord(from, dst+o, b.readWord(from, src+o))
		}
	}
	for _, f := range b.cfg.Faults {
		if f.Kind == FaultFlip && matches(f, key, method) {
			off := uint64(f.Offset)
			if f.Offset < 0 || off+4 > n {
				off = (n / 2) &^ 3
			}
			b.writeWord(dg, dst+off, ^b.readWord(dg, dst+off))
		}
	}
	rate := b.cfg.LocalGBps
	if sg != dg {
		rate = b.cfg.PeerGBps
		if sg < len(b.cfg.PairGBps) && dg < len(b.cfg.PairGBps[sg]) && b.cfg.PairGBps[sg][dg] > 0 {
			rate = b.cfg.PairGBps[sg][dg]
		}
		if staged {
			rate = b.cfg.StagedGBps
		}
	}
	if sm {
		rate *= b.cfg.SMFactor
	}
	return float64(n) / (rate * 1e9), 0
}

func matches(f Fault, key, method string) bool {
	return (f.Copy == "" || f.Copy == key) && (f.Method == "" || f.Method == method)
}
