package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// The peermem phase: the forms of peer memory the copy phase's cuMemAlloc buffers do
// not reach. Each takes its own driver path (issue 27):
//
//   - managed: cuMemAllocManaged memory is migrated and mapped by UVM itself
//     (nvidia-uvm), not through the peer mappings cuCtxEnablePeerAccess makes;
//     with SET_PREFERRED_LOCATION on the owner and SET_ACCESSED_BY for the peer, the
//     peer's kernels reach the owner's memory through UVM's own peer mapping;
//   - vmm: cuMemCreate + cuMemMap, peer access granted by cuMemSetAccess, is what
//     NCCL's P2P/CUMEM transport (its default between processes) maps;
//   - ipc: the same allocation exported as a POSIX file descriptor
//     (cuMemExportToShareableHandle) and imported (cuMemImportFromShareableHandle) by a
//     second process (MemOptions.Importer), or in this one without an importer;
//   - cudaipc: cuMemAlloc memory shared by cuIpcGetMemHandle and opened by a second
//     process with cuIpcOpenMemHandle (torch.multiprocessing, NCCL's P2P/IPC).
//
// Every check is the same: the owner's kernel writes a pattern, the peer's kernel
// checks it in place (a peer read) and writes another, the owner's kernel checks that
// (a peer write), and the peer's copy engine copies the memory into the peer's own
// buffer, checked there (a peer copy). With one GPU the owner is its own peer: the
// local form, which runs every call and data path except the peer mapping.

// Enum values from cuda.h 13.0.
const (
	memAttachGlobal         = 0x1
	adviseSetPreferredLoc   = 3 // CU_MEM_ADVISE_SET_PREFERRED_LOCATION
	adviseSetAccessedBy     = 5 // CU_MEM_ADVISE_SET_ACCESSED_BY
	attrManagedMemory       = 83
	attrConcurrentManaged   = 89
	memAllocationPinned     = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	memHandleNone           = 0
	memHandlePosixFD        = 1   // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	memLocationDevice       = 1   // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessReadWrite      = 3   // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memGranularityMinimum   = 0   // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	ipcLazyEnablePeerAccess = 0x1 // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
)

// MemProp is CUmemAllocationProp (cuda.h): 32 bytes, the location inline.
type MemProp struct {
	Type          int32 // CUmemAllocationType
	HandleTypes   int32 // CUmemAllocationHandleType bits that export must support
	LocType       int32 // CUmemLocation.type
	LocID         int32 // CUmemLocation.id: the CUdevice
	Win32Metadata uintptr
	Compression   uint8
	RDMACapable   uint8
	Usage         uint16
	Reserved      [4]uint8
}

// MemAccessDesc is CUmemAccessDesc (cuda.h): a location and its access flags, 12 bytes.
type MemAccessDesc struct {
	LocType int32
	LocID   int32
	Flags   uint32
}

// IPCHandle is CUipcMemHandle (cuda.h: char reserved[64]), as eight words so that it
// travels by value the way the C ABI passes a 64-byte struct (on the stack).
type IPCHandle struct{ W0, W1, W2, W3, W4, W5, W6, W7 uint64 }

// memAPI is the driver subset of the peermem phase, bound on first use so that a
// driver without it fails this phase only.
type memAPI struct {
	allocManaged   func(p *Ptr, n uintptr, flags uint32) int32
	advise         func(p Ptr, n uintptr, advice int32, dev int32) int32
	granularity    func(g *uintptr, prop *MemProp, option int32) int32
	create         func(h *uint64, n uintptr, prop *MemProp, flags uint64) int32
	release        func(h uint64) int32
	addressReserve func(p *Ptr, n, align uintptr, addr Ptr, flags uint64) int32
	addressFree    func(p Ptr, n uintptr) int32
	mapMem         func(p Ptr, n, offset uintptr, h uint64, flags uint64) int32
	unmap          func(p Ptr, n uintptr) int32
	setAccess      func(p Ptr, n uintptr, desc *MemAccessDesc, count uintptr) int32
	export         func(shareable unsafe.Pointer, h uint64, typ int32, flags uint64) int32
	importHandle   func(h *uint64, osHandle uintptr, typ int32) int32
	// The legacy IPC API; nil when the driver lacks it (the cudaipc form is refused).
	ipcGet   func(h *IPCHandle, p Ptr) int32
	ipcOpen  func(p *Ptr, h IPCHandle, flags uint32) int32
	ipcClose func(p Ptr) int32
}

func (d *Driver) bindMem() (*memAPI, error) {
	if d.mem != nil {
		return d.mem, nil
	}
	m := &memAPI{}
	for _, s := range []struct {
		name string
		fn   any
	}{
		{"cuMemAllocManaged", &m.allocManaged},
		{"cuMemGetAllocationGranularity", &m.granularity},
		{"cuMemCreate", &m.create},
		{"cuMemRelease", &m.release},
		{"cuMemAddressReserve", &m.addressReserve},
		{"cuMemAddressFree", &m.addressFree},
		{"cuMemMap", &m.mapMem},
		{"cuMemUnmap", &m.unmap},
		{"cuMemSetAccess", &m.setAccess},
		{"cuMemExportToShareableHandle", &m.export},
		{"cuMemImportFromShareableHandle", &m.importHandle},
	} {
		if err := d.lib.Bind(s.name, s.fn); err != nil {
			return nil, fmt.Errorf("loading %s: %w", d.Lib, err)
		}
	}
	// cuMemAdvise with a CUdevice is the symbol every driver since CUDA 8 exports (CUDA
	// 13's header maps the name to cuMemAdvise_v2, whose last argument is a
	// CUmemLocation); take the _v2 form only where the old one is gone. A CUmemLocation
	// {int type; int id} travels by value in one register, type in the low half.
	if d.lib.Bind("cuMemAdvise", &m.advise) != nil {
		var v2 func(p Ptr, n uintptr, advice int32, loc uint64) int32
		if err := d.lib.Bind("cuMemAdvise_v2", &v2); err != nil {
			return nil, fmt.Errorf("loading %s: %w", d.Lib, err)
		}
		m.advise = func(p Ptr, n uintptr, advice int32, dev int32) int32 {
			return v2(p, n, advice, uint64(memLocationDevice)|uint64(uint32(dev))<<32)
		}
	}
	// cuIpcOpenMemHandle is _v2 in every header since CUDA 11 (the same signature).
	if d.lib.Bind("cuIpcGetMemHandle", &m.ipcGet) != nil || d.lib.Bind("cuIpcCloseMemHandle", &m.ipcClose) != nil ||
		(d.lib.Bind("cuIpcOpenMemHandle_v2", &m.ipcOpen) != nil && d.lib.Bind("cuIpcOpenMemHandle", &m.ipcOpen) != nil) {
		m.ipcGet, m.ipcOpen, m.ipcClose = nil, nil, nil
	}
	d.mem = m
	return m, nil
}

// MemOptions configure RunPeerMem. Zero values take the defaults in brackets.
type MemOptions struct {
	Lib     string  // ["libcuda.so.1"]
	Library Library // a FAKE stand-in instead of dlopening Lib (tests)
	// Bytes per check, rounded up to 16 and, for vmm and ipc, to the allocation
	// granularity [32 MiB: 16 of UVM's 2 MiB pages].
	Bytes int64
	Kinds []string // forms to check, in order [managed, vmm, ipc, and cudaipc with an Importer]
	// Corrupt is a test hook: in the first check of this kind, one word of the memory
	// is inverted after the peer's write and before the owner checks it, which must then
	// report a mismatch. MemResult.Injected says where. "": none.
	Corrupt string
	// Importer, when set, runs the ipc and cudaipc forms' peer side in another process:
	// it is given the exported descriptor (-1 for cudaipc, whose handle is in the
	// request) and the request, and that process calls RunImport. nil: ipc imports in
	// this process (its local form) and cudaipc is not checked.
	Importer func(ctx context.Context, fd int, req ImportRequest) (*ImportResult, error)
}

// ImportRequest is what the importing process of the ipc (cudaipc) form is asked to do
// with the descriptor (the handle): import (open) it, map it for Peer, check ReadSeed's pattern in place with
// Peer's kernel (the peer read) and write WriteSeed's (the peer write).
type ImportRequest struct {
	Peer      int    `json:"peer"`
	Bytes     int64  `json:"bytes"`
	ReadSeed  uint32 `json:"read_seed"`
	WriteSeed uint32 `json:"write_seed"`
	// Handle, when set, is a cuIpcGetMemHandle handle to open (the cudaipc form)
	// instead of the descriptor.
	Handle *IPCHandle `json:"ipc_handle,omitempty"`
}

// ImportResult is the importing process's answer.
type ImportResult struct {
	Calls    []string           `json:"calls"`
	Mismatch *selftest.Mismatch `json:"mismatch,omitempty"` // of the peer read
	Refused  string             `json:"refused,omitempty"`  // a setup call declined
	Error    string             `json:"error,omitempty"`    // a call failed after data moved
	Step     string             `json:"step,omitempty"`     // the step of Error: peer read or peer write
}

// MemResult is what the peermem phase found, filled as far as the run got.
type MemResult struct {
	CUDA     selftest.CUDA      `json:"cuda"`
	Checks   []selftest.PeerMem `json:"checks"`
	Injected string             `json:"injected,omitempty"`
}

// RunPeerMem loads the driver and checks every form in o.Kinds for every ordered pair
// of GPUs with peer access both ways (one GPU, or no such pair: the local form on GPU
// 0). A check that fails or is refused is recorded in its PeerMem; the error is for
// what stops the phase.
func RunPeerMem(ctx context.Context, o MemOptions) (*MemResult, error) {
	if o.Bytes <= 0 {
		o.Bytes = 32 << 20
	}
	o.Bytes = (o.Bytes + 15) &^ 15
	if len(o.Kinds) == 0 {
		o.Kinds = []string{selftest.MemManaged, selftest.MemVMM, selftest.MemIPC}
		if o.Importer != nil {
			o.Kinds = append(o.Kinds, selftest.MemCUDAIPC) // it needs a second process
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &MemResult{Checks: []selftest.PeerMem{}}
	d, n, err := openDevices(Options{Lib: o.Lib, Library: o.Library}.withDefaults(), &r.CUDA)
	if d != nil {
		defer d.Close()
	}
	fail := func(err error) (*MemResult, error) {
		if r.CUDA.Error == "" {
			r.CUDA.Error = err.Error()
		}
		return r, err
	}
	if err != nil {
		return fail(err)
	}
	pairs := [][2]int{{0, 0}}
	if n > 1 {
		pairs = nil
		for a := 0; a < n; a++ {
			for b := 0; b < n; b++ {
				if a == b {
					continue
				}
				ab, err := d.CanAccessPeer(a, b)
				if err != nil {
					return fail(err)
				}
				ba, err := d.CanAccessPeer(b, a)
				if err != nil {
					return fail(err)
				}
				if ab && ba {
					pairs = append(pairs, [2]int{a, b})
				}
			}
		}
	}
	if len(pairs) == 0 {
		// No pair has peer access: the forms still run locally on GPU 0, so a refusal
		// of the calls themselves shows.
		pairs = [][2]int{{0, 0}}
	}
	m := &memRun{ctx: ctx, d: d, o: o, r: r, streams: map[int]Stream{}}
	defer func() {
		for g, s := range m.streams {
			_ = errors.Join(d.StreamSync(g, s), d.DestroyStream(g, s))
		}
	}()
	ring := ringPairs(pairs, n)
	for _, kind := range o.Kinds {
		kindPairs := pairs
		if (kind == selftest.MemIPC || kind == selftest.MemCUDAIPC) && o.Importer != nil {
			// Each of these checks starts a process (cuInit, a context, the JIT): on
			// a ring each GPU exports once and imports once, 2n processes rather than
			// n(n-1); the mapping itself is checked on every pair by vmm.
			kindPairs = ring
		}
		for _, p := range kindPairs {
			if err := ctx.Err(); err != nil {
				return fail(fmt.Errorf("peermem phase stopped before the %s check GPU %d -> GPU %d: %w", kind, p[0], p[1], err))
			}
			r.Checks = append(r.Checks, m.check(kind, p[0], p[1]))
		}
	}
	return r, nil
}

// ringPairs keeps, for each owner, the pair whose peer follows it most closely in
// ordinal order (GPU i with GPU i+1 where they have peer access): every GPU appears
// once as owner and, on a full mesh, once as peer.
func ringPairs(pairs [][2]int, n int) [][2]int {
	var out [][2]int
	for _, p := range pairs {
		i := len(out) - 1
		switch {
		case i < 0 || out[i][0] != p[0]:
			out = append(out, p)
		case (p[1]-p[0]+n)%n < (out[i][1]-out[i][0]+n)%n:
			out[i] = p
		}
	}
	return out
}

// openDevices loads the library, calls cuInit, lists the devices and loads the
// kernels on each, recording what it learns in c. n is the device count.
func openDevices(o Options, c *selftest.CUDA) (*Driver, int, error) {
	return openDevicesKernels(o, c, true)
}

// openDevicesKernels is openDevices; without kernels the PTX is left to load on
// first use, on the GPUs that use it (an importing process needs one).
func openDevicesKernels(o Options, c *selftest.CUDA, kernels bool) (*Driver, int, error) {
	c.Library = o.Lib
	c.Devices = []selftest.CUDADevice{}
	var d *Driver
	var err error
	if o.Library != nil {
		c.Library = o.Library.Name()
		d, err = Open(o.Library)
	} else {
		d, err = Load(o.Lib)
	}
	if err != nil {
		return nil, 0, err
	}
	c.Loaded = true
	st, err := d.Init()
	c.CuInit = &st
	if v, verr := d.DriverVersion(); verr == nil {
		c.DriverVersion = v
	}
	if err != nil {
		return d, 0, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return d, 0, err
	}
	if n == 0 {
		return d, 0, errors.New("cuDeviceGetCount: no CUDA device")
	}
	for i := 0; i < n; i++ {
		dev, err := d.Device(i)
		if err != nil {
			return d, 0, err
		}
		c.Devices = append(c.Devices, dev)
	}
	if !kernels {
		return d, n, nil
	}
	ptx := selftest.Status{Name: "CUDA_SUCCESS", Code: 0}
	c.PTX = &ptx
	for i := 0; i < n; i++ {
		if _, err := d.Kernels(i); err != nil {
			var pe *PTXError
			if errors.As(err, &pe) {
				c.PTXLog = pe.Log
			}
			if code := Code(err); code >= 0 {
				*c.PTX = d.Status(code)
			}
			return d, 0, err
		}
	}
	return d, n, nil
}

// memRun holds one peermem phase's state.
type memRun struct {
	ctx      context.Context
	d        *Driver
	o        MemOptions
	r        *MemResult
	streams  map[int]Stream
	injected bool
}

func (m *memRun) stream(g int) (Stream, error) {
	if s, ok := m.streams[g]; ok {
		return s, nil
	}
	s, err := m.d.NewStream(g)
	if err != nil {
		return 0, err
	}
	m.streams[g] = s
	return s, nil
}

// Seeds of the peermem patterns: the owner's, then the peer's.
const (
	seedMemOwner = 0x0A11CE55
	seedMemPeer  = 0x9EE2B0B5
)

// region is mapped memory under check and how to give it back.
type region struct {
	ptr   Ptr
	bytes int64
	free  func() error
	// remote, when set, does the peer read and the peer write in another process.
	remote func(readSeed, writeSeed uint32) (*ImportResult, error)
}

// check runs one form for one (owner, peer) pair.
func (m *memRun) check(kind string, owner, peer int) selftest.PeerMem {
	pm := selftest.PeerMem{Kind: kind, Owner: owner, Peer: peer, Bytes: m.o.Bytes, Calls: []string{}}
	var reg region
	var err error
	switch kind {
	case selftest.MemManaged:
		reg, err = m.managed(&pm, owner, peer)
	case selftest.MemVMM:
		reg, err = m.vmm(&pm, owner, peer, false)
	case selftest.MemIPC:
		reg, err = m.vmm(&pm, owner, peer, true)
	case selftest.MemCUDAIPC:
		reg, err = m.cudaIPC(&pm, owner, peer)
	default:
		err = fmt.Errorf("unknown peer-memory form %q", kind)
	}
	if err != nil {
		// Nothing moved yet: the driver declined the form (or one of its calls).
		pm.Step, pm.Refused = selftest.StepSetup, err.Error()
		if reg.free != nil {
			_ = reg.free()
		}
		return pm
	}
	pm.Bytes = reg.bytes
	step, err := m.exercise(&pm, owner, peer, reg)
	if ferr := reg.free(); err == nil && ferr != nil {
		step, err = selftest.StepSetup, fmt.Errorf("releasing the memory: %w", ferr)
	}
	if err != nil {
		pm.Step, pm.Error = step, err.Error()
		return pm
	}
	pm.Verified = pm.Mismatch == nil && pm.Refused == ""
	return pm
}

// managed allocates managed memory in the owner's context, prefers it on the owner
// and makes it accessed by the peer (and the owner).
func (m *memRun) managed(pm *selftest.PeerMem, owner, peer int) (region, error) {
	d := m.d
	api, err := d.bindMem()
	if err != nil {
		return region{}, err
	}
	for _, g := range []int{owner, peer} {
		dev, err := d.device(g)
		if err != nil {
			return region{}, err
		}
		for _, a := range []struct {
			attr int
			name string
		}{{attrManagedMemory, "MANAGED_MEMORY"}, {attrConcurrentManaged, "CONCURRENT_MANAGED_ACCESS"}} {
			v, err := d.attr(dev, g, a.attr)
			if err != nil {
				return region{}, err
			}
			if v == 0 {
				return region{}, fmt.Errorf("GPU %d: CU_DEVICE_ATTRIBUTE_%s = 0: the driver offers no managed memory a peer can access concurrently", g, a.name)
			}
		}
	}
	if err := d.SetCurrent(owner); err != nil {
		return region{}, err
	}
	var p Ptr
	call := fmt.Sprintf("cuMemAllocManaged(%s, CU_MEM_ATTACH_GLOBAL) on GPU %d", Size(m.o.Bytes), owner)
	if err := d.check(api.allocManaged(&p, uintptr(m.o.Bytes), memAttachGlobal), "%s", call); err != nil {
		return region{}, err
	}
	pm.Calls = append(pm.Calls, call)
	reg := region{ptr: p, bytes: m.o.Bytes, free: func() error { return d.Free(owner, p) }}
	advise := func(advice int32, name string, g int) error {
		dev, err := d.device(g)
		if err != nil {
			return err
		}
		call := fmt.Sprintf("cuMemAdvise(%s, GPU %d)", name, g)
		if err := d.check(api.advise(p, uintptr(m.o.Bytes), advice, dev), "%s", call); err != nil {
			return err
		}
		pm.Calls = append(pm.Calls, call)
		return nil
	}
	if err := advise(adviseSetPreferredLoc, "SET_PREFERRED_LOCATION", owner); err != nil {
		return reg, err
	}
	for _, g := range uniq(owner, peer) {
		if err := advise(adviseSetAccessedBy, "SET_ACCESSED_BY", g); err != nil {
			return reg, err
		}
	}
	return reg, nil
}

func uniq(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

// vmm creates physical memory on the owner, maps it at a reserved address and grants
// the owner and the peer read-write access. With exported, the allocation is first
// exported as a POSIX file descriptor and the import of that descriptor is mapped.
func (m *memRun) vmm(pm *selftest.PeerMem, owner, peer int, exported bool) (region, error) {
	d := m.d
	api, err := d.bindMem()
	if err != nil {
		return region{}, err
	}
	dev, err := d.device(owner)
	if err != nil {
		return region{}, err
	}
	if err := d.SetCurrent(owner); err != nil {
		return region{}, err
	}
	prop := MemProp{Type: memAllocationPinned, HandleTypes: memHandleNone, LocType: memLocationDevice, LocID: dev}
	if exported {
		prop.HandleTypes = memHandlePosixFD
	}
	var gran uintptr
	if err := d.check(api.granularity(&gran, &prop, memGranularityMinimum), "cuMemGetAllocationGranularity on GPU %d", owner); err != nil {
		return region{}, err
	}
	size := m.o.Bytes
	if g := int64(gran); g > 0 {
		size = (size + g - 1) / g * g
	}
	var undo []func() error
	reg := region{bytes: size, free: func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}}
	var h uint64
	call := fmt.Sprintf("cuMemCreate(%s, pinned on GPU %d", Size(size), owner)
	if exported {
		call += ", exportable as a POSIX fd"
	}
	call += ")"
	if err := d.check(api.create(&h, uintptr(size), &prop, 0), "%s", call); err != nil {
		return reg, err
	}
	pm.Calls = append(pm.Calls, call)
	undo = append(undo, func() error { return d.check(api.release(h), "cuMemRelease on GPU %d", owner) })
	mapped := h
	if exported && m.o.Importer != nil {
		// The peer side runs in another process: export now, import there (exercise).
		var fd int32
		call := "cuMemExportToShareableHandle(POSIX fd)"
		if err := d.check(api.export(unsafe.Pointer(&fd), h, memHandlePosixFD, 0), "%s on GPU %d", call, owner); err != nil {
			return reg, err
		}
		pm.Calls = append(pm.Calls, call)
		undo = append(undo, func() error {
			if err := unix.Close(int(fd)); err != nil {
				return fmt.Errorf("closing the exported descriptor: %w", err)
			}
			return nil
		})
		reg.remote = func(readSeed, writeSeed uint32) (*ImportResult, error) {
			return m.o.Importer(m.ctx, int(fd), ImportRequest{Peer: peer, Bytes: size, ReadSeed: readSeed, WriteSeed: writeSeed})
		}
	} else if exported {
		var fd int32
		call := "cuMemExportToShareableHandle(POSIX fd)"
		if err := d.check(api.export(unsafe.Pointer(&fd), h, memHandlePosixFD, 0), "%s on GPU %d", call, owner); err != nil {
			return reg, err
		}
		pm.Calls = append(pm.Calls, call)
		var imp uint64
		rc := api.importHandle(&imp, uintptr(fd), memHandlePosixFD)
		closeErr := unix.Close(int(fd))
		call = "cuMemImportFromShareableHandle(POSIX fd)"
		if err := d.check(rc, "%s on GPU %d", call, owner); err != nil {
			return reg, err
		}
		pm.Calls = append(pm.Calls, call)
		undo = append(undo, func() error { return d.check(api.release(imp), "cuMemRelease of the imported handle on GPU %d", owner) })
		if closeErr != nil {
			return reg, fmt.Errorf("closing the exported descriptor: %w", closeErr)
		}
		mapped = imp
	}
	var va Ptr
	if err := d.check(api.addressReserve(&va, uintptr(size), 0, 0, 0), "cuMemAddressReserve(%s)", Size(size)); err != nil {
		return reg, err
	}
	pm.Calls = append(pm.Calls, fmt.Sprintf("cuMemAddressReserve(%s)", Size(size)))
	undo = append(undo, func() error { return d.check(api.addressFree(va, uintptr(size)), "cuMemAddressFree") })
	if err := d.check(api.mapMem(va, uintptr(size), 0, mapped, 0), "cuMemMap(%s)", Size(size)); err != nil {
		return reg, err
	}
	pm.Calls = append(pm.Calls, fmt.Sprintf("cuMemMap(%s)", Size(size)))
	undo = append(undo, func() error { return d.check(api.unmap(va, uintptr(size)), "cuMemUnmap") })
	var descs []MemAccessDesc
	var who string
	for _, g := range uniq(owner, peer) {
		gd, err := d.device(g)
		if err != nil {
			return reg, err
		}
		descs = append(descs, MemAccessDesc{LocType: memLocationDevice, LocID: gd, Flags: memAccessReadWrite})
		who += fmt.Sprintf(", GPU %d read-write", g)
	}
	call = "cuMemSetAccess(" + who[2:] + ")"
	rc := api.setAccess(va, uintptr(size), &descs[0], uintptr(len(descs)))
	runtime.KeepAlive(descs)
	if err := d.check(rc, "%s", call); err != nil {
		return reg, err
	}
	pm.Calls = append(pm.Calls, call)
	reg.ptr = va
	return reg, nil
}

// cudaIPC allocates plain device memory on the owner and takes its legacy IPC handle;
// the peer side opens the handle in the importing process (the driver refuses to open
// a handle in the process that made it, so without an importer the form is refused).
func (m *memRun) cudaIPC(pm *selftest.PeerMem, owner, peer int) (region, error) {
	d := m.d
	api, err := d.bindMem()
	if err != nil {
		return region{}, err
	}
	if api.ipcGet == nil {
		return region{}, fmt.Errorf("%s has no cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle", d.Lib)
	}
	if m.o.Importer == nil {
		return region{}, errors.New("cuIpcOpenMemHandle opens a handle only in another process, and no importing process was given")
	}
	p, err := d.Alloc(owner, m.o.Bytes)
	if err != nil {
		return region{}, err
	}
	pm.Calls = append(pm.Calls, fmt.Sprintf("cuMemAlloc_v2(%s) on GPU %d", Size(m.o.Bytes), owner))
	reg := region{ptr: p, bytes: m.o.Bytes, free: func() error { return d.Free(owner, p) }}
	var h IPCHandle
	if err := d.check(api.ipcGet(&h, p), "cuIpcGetMemHandle on GPU %d", owner); err != nil {
		return reg, err
	}
	pm.Calls = append(pm.Calls, "cuIpcGetMemHandle")
	reg.remote = func(readSeed, writeSeed uint32) (*ImportResult, error) {
		return m.o.Importer(m.ctx, -1, ImportRequest{Peer: peer, Bytes: m.o.Bytes, ReadSeed: readSeed, WriteSeed: writeSeed, Handle: &h})
	}
	return reg, nil
}

// exercise moves data through the region: owner writes, peer reads in place, peer
// writes, owner reads, peer's copy engine copies out. It returns the step of an error.
func (m *memRun) exercise(pm *selftest.PeerMem, owner, peer int, reg region) (step string, err error) {
	d := m.d
	words := reg.bytes / 4
	so, err := m.stream(owner)
	if err != nil {
		return selftest.StepSetup, err
	}
	sp, err := m.stream(peer)
	if err != nil {
		return selftest.StepSetup, err
	}

	// 1. The owner's kernel writes; the peer's kernel checks in place.
	if err := d.Fill(owner, so, reg.ptr, words, seedMemOwner); err != nil {
		return selftest.StepPeerRead, err
	}
	if err := d.StreamSync(owner, so); err != nil {
		return selftest.StepPeerRead, err
	}
	if reg.remote != nil {
		// Steps 1 and 2's peer side in the importing process.
		ir, err := reg.remote(seedMemOwner, seedMemPeer)
		if err != nil {
			return selftest.StepPeerRead, fmt.Errorf("the importing process: %w", err)
		}
		for _, c := range ir.Calls {
			pm.Calls = append(pm.Calls, "importer: "+c)
		}
		switch {
		case ir.Refused != "":
			pm.Step, pm.Refused = selftest.StepSetup, "in the importing process: "+ir.Refused
			return selftest.StepSetup, nil
		case ir.Mismatch != nil:
			pm.Step, pm.Mismatch = selftest.StepPeerRead, ir.Mismatch
			return selftest.StepPeerRead, nil
		case ir.Error != "":
			step := ir.Step
			if step != selftest.StepPeerRead {
				step = selftest.StepPeerWrite
			}
			return step, fmt.Errorf("the importing process: %s", ir.Error)
		}
		return m.afterPeerWrite(pm, owner, peer, reg, so, sp)
	}
	v, err := d.Verify(peer, sp, reg.ptr, words, seedMemOwner)
	if err != nil {
		return selftest.StepPeerRead, err
	}
	if err := m.found(pm, selftest.StepPeerRead, peer, reg.ptr, v, seedMemOwner); err != nil || pm.Mismatch != nil {
		return selftest.StepPeerRead, err
	}

	// 2. The peer's kernel writes; the owner's kernel checks.
	if err := d.Fill(peer, sp, reg.ptr, words, seedMemPeer); err != nil {
		return selftest.StepPeerWrite, err
	}
	if err := d.StreamSync(peer, sp); err != nil {
		return selftest.StepPeerWrite, err
	}
	return m.afterPeerWrite(pm, owner, peer, reg, so, sp)
}

// found records a verification's first wrong word (read back from GPU g) as pm's
// mismatch at step; a clean verification records nothing.
func (m *memRun) found(pm *selftest.PeerMem, step string, g int, p Ptr, v Verification, seed uint32) error {
	if v.Wrong == 0 {
		return nil
	}
	got, err := m.d.ReadWords(g, p+Ptr(4*v.FirstBad), 1)
	if err != nil {
		return err
	}
	pm.Step = step
	pm.Mismatch = &selftest.Mismatch{Offset: 4 * v.FirstBad, Want: Pattern(uint64(v.FirstBad), seed), Got: got[0], Words: v.Wrong}
	return nil
}

// afterPeerWrite is the rest of a check once the peer has written: the owner checks
// the peer's write, and the peer's copy engine copies the memory out.
func (m *memRun) afterPeerWrite(pm *selftest.PeerMem, owner, peer int, reg region, so, sp Stream) (step string, err error) {
	d := m.d
	words := reg.bytes / 4
	if m.o.Corrupt == pm.Kind && !m.injected {
		idx := words/2 + 5
		p := reg.ptr + Ptr(4*idx)
		w, err := d.ReadWords(owner, p, 1)
		if err != nil {
			return selftest.StepPeerWrite, err
		}
		if err := d.WriteWords(owner, p, []uint32{^w[0]}); err != nil {
			return selftest.StepPeerWrite, err
		}
		m.injected = true
		m.r.Injected = fmt.Sprintf("Corrupt test hook: in the %s check GPU %d -> GPU %d, after the peer's write the word at byte offset %d of GPU %d's memory was inverted on purpose (0x%08x -> 0x%08x); verification must report it as a mismatch",
			pm.Kind, owner, peer, 4*idx, owner, w[0], ^w[0])
	}
	v, err := d.Verify(owner, so, reg.ptr, words, seedMemPeer)
	if err != nil {
		return selftest.StepPeerWrite, err
	}
	if err := m.found(pm, selftest.StepPeerWrite, owner, reg.ptr, v, seedMemPeer); err != nil || pm.Mismatch != nil {
		return selftest.StepPeerWrite, err
	}

	// 3. The peer's copy engine copies it into the peer's own memory.
	dst, err := d.Alloc(peer, reg.bytes)
	if err != nil {
		return selftest.StepPeerCopy, err
	}
	defer func() {
		if ferr := d.Free(peer, dst); err == nil && ferr != nil {
			step, err = selftest.StepPeerCopy, ferr
		}
	}()
	if err := d.Fill(peer, sp, dst, words, seedDst); err != nil {
		return selftest.StepPeerCopy, err
	}
	if err := d.CopyAsync(peer, dst, reg.ptr, reg.bytes, sp); err != nil {
		return selftest.StepPeerCopy, err
	}
	pm.Calls = append(pm.Calls, fmt.Sprintf("cuMemcpyAsync(%s) on GPU %d", Size(reg.bytes), peer))
	if err := d.StreamSync(peer, sp); err != nil {
		return selftest.StepPeerCopy, err
	}
	v, err = d.Verify(peer, sp, dst, words, seedMemPeer)
	if err != nil {
		return selftest.StepPeerCopy, err
	}
	if err := m.found(pm, selftest.StepPeerCopy, peer, dst, v, seedMemPeer); err != nil {
		return selftest.StepPeerCopy, err
	}
	return "", nil
}

// RunImport is the importing process's side of the ipc form (MemOptions.Importer): it
// imports the descriptor fd (cuMemImportFromShareableHandle), maps it for req.Peer,
// checks req.ReadSeed's pattern in place with the peer's kernel and writes
// req.WriteSeed's. A declined setup call is Refused, a failure after data moved is
// Error; the error return is for what stops it before it could try (no driver).
func RunImport(ctx context.Context, o MemOptions, fd int, req ImportRequest) (*ImportResult, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	res := &ImportResult{Calls: []string{}}
	var c selftest.CUDA
	d, n, err := openDevicesKernels(Options{Lib: o.Lib, Library: o.Library}.withDefaults(), &c, false)
	if d != nil {
		defer d.Close()
	}
	if err != nil {
		return res, err
	}
	g := req.Peer
	if g < 0 || g >= n || req.Bytes <= 0 || req.Bytes%4 != 0 {
		return res, fmt.Errorf("import request for GPU %d of %d, %d bytes: out of range", g, n, req.Bytes)
	}
	refuse := func(err error) (*ImportResult, error) {
		res.Refused = err.Error()
		return res, nil
	}
	api, err := d.bindMem()
	if err != nil {
		return refuse(err)
	}
	dev, err := d.device(g)
	if err != nil {
		return refuse(err)
	}
	if err := d.SetCurrent(g); err != nil {
		return refuse(err)
	}
	size := uintptr(req.Bytes)
	var va Ptr
	if req.Handle != nil {
		if api.ipcOpen == nil {
			return refuse(fmt.Errorf("%s has no cuIpcOpenMemHandle", d.Lib))
		}
		call := fmt.Sprintf("cuIpcOpenMemHandle(LAZY_ENABLE_PEER_ACCESS) on GPU %d in process %d", g, os.Getpid())
		if err := d.check(api.ipcOpen(&va, *req.Handle, ipcLazyEnablePeerAccess), "%s", call); err != nil {
			return refuse(err)
		}
		res.Calls = append(res.Calls, call)
		defer api.ipcClose(va)
		return importedRW(ctx, d, res, g, va, req)
	}
	var h uint64
	call := fmt.Sprintf("cuMemImportFromShareableHandle(POSIX fd) in process %d", os.Getpid())
	if err := d.check(api.importHandle(&h, uintptr(fd), memHandlePosixFD), "%s", call); err != nil {
		return refuse(err)
	}
	res.Calls = append(res.Calls, call)
	defer api.release(h)
	if err := d.check(api.addressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve(%s)", Size(req.Bytes)); err != nil {
		return refuse(err)
	}
	defer api.addressFree(va, size)
	if err := d.check(api.mapMem(va, size, 0, h, 0), "cuMemMap(%s)", Size(req.Bytes)); err != nil {
		return refuse(err)
	}
	defer api.unmap(va, size)
	desc := []MemAccessDesc{{LocType: memLocationDevice, LocID: dev, Flags: memAccessReadWrite}}
	call = fmt.Sprintf("cuMemSetAccess(GPU %d read-write)", g)
	rc := api.setAccess(va, size, &desc[0], 1)
	runtime.KeepAlive(desc)
	if err := d.check(rc, "%s", call); err != nil {
		return refuse(err)
	}
	res.Calls = append(res.Calls, fmt.Sprintf("cuMemAddressReserve(%s)", Size(req.Bytes)), fmt.Sprintf("cuMemMap(%s)", Size(req.Bytes)), call)
	return importedRW(ctx, d, res, g, va, req)
}

// importedRW is the importing process's peer read and peer write of the mapped memory.
func importedRW(ctx context.Context, d *Driver, res *ImportResult, g int, va Ptr, req ImportRequest) (*ImportResult, error) {
	step := selftest.StepPeerRead
	fail := func(err error) (*ImportResult, error) {
		res.Error, res.Step = err.Error(), step
		return res, nil
	}
	s, err := d.NewStream(g)
	if err != nil {
		return fail(err)
	}
	defer d.DestroyStream(g, s)
	words := req.Bytes / 4
	v, err := d.Verify(g, s, va, words, req.ReadSeed)
	if err != nil {
		return fail(err)
	}
	if v.Wrong > 0 {
		got, err := d.ReadWords(g, va+Ptr(4*v.FirstBad), 1)
		if err != nil {
			return fail(err)
		}
		res.Mismatch = &selftest.Mismatch{Offset: 4 * v.FirstBad, Want: Pattern(uint64(v.FirstBad), req.ReadSeed), Got: got[0], Words: v.Wrong}
		return res, nil
	}
	step = selftest.StepPeerWrite
	if err := d.Fill(g, s, va, words, req.WriteSeed); err != nil {
		return fail(err)
	}
	if err := d.StreamSync(g, s); err != nil {
		return fail(err)
	}
	res.Calls = append(res.Calls, fmt.Sprintf("pb_verify and pb_fill on GPU %d", g))
	return res, ctx.Err()
}
