package gpufake

import (
	"os"
	"syscall"
	"unsafe"

	"github.com/peerboot/peerboot/selftest/cuda"
)

// Managed memory and the virtual memory management API (cuMemCreate, cuMemMap,
// cuMemSetAccess, shareable handles), for selftest/cuda's peermem phase.
//
// Managed memory is a device allocation of the current GPU that every GPU's kernels
// may touch (UVM migrates or maps it on demand; where it lives does not change what a
// kernel reads). A cuMemCreate handle is physical memory of one GPU; cuMemMap puts it
// at a reserved address, where only the GPUs cuMemSetAccess granted may touch it. A
// handle exported as a POSIX file descriptor is a real descriptor (of /dev/null) the
// caller closes; importing it gives a second handle to the same memory.

// Memory kinds of an allocation (alloc.mem) and of the lost and mmu faults' Mem.
const (
	MemDevice  = ""        // cuMemAlloc
	MemManaged = "managed" // cuMemAllocManaged
	MemVMM     = "vmm"     // cuMemCreate + cuMemMap
)

// vmmBase is where cuMemAddressReserve hands out addresses: above every GPU's
// cuMemAlloc range, so an address says by its allocation, not its bits, whose it is.
const vmmBase = vaBase + 0x80<<vaShift

// physMem is one cuMemCreate allocation.
type physMem struct {
	gpu  int
	data []byte
	fdOK bool // created exportable as a POSIX file descriptor
}

type vmmState struct {
	phys    map[uint64]*physMem // by handle
	next    uint64              // next reservation offset above vmmBase
	reserve map[uint64]uint64   // reserved address -> size
	fds     map[int32]*physMem  // exported descriptors
}

func (b *FakeBox) vmmInit() *vmmState {
	if b.vmm == nil {
		b.vmm = &vmmState{phys: map[uint64]*physMem{}, reserve: map[uint64]uint64{}, fds: map[int32]*physMem{}}
	}
	return b.vmm
}

func (b *FakeBox) granularity() uint64 { return uint64(b.cfg.VMMGranularity) }

// insert adds a to the sorted allocation list.
func (b *FakeBox) insert(a *alloc) {
	i := 0
	for i < len(b.allocs) && b.allocs[i].addr < a.addr {
		i++
	}
	b.allocs = append(b.allocs[:i], append([]*alloc{a}, b.allocs[i:]...)...)
}

func (b *FakeBox) cuMemAllocManaged(p *cuda.Ptr, n uintptr, flags uint32) int32 {
	g, rc := b.cur("cuMemAllocManaged")
	if rc != 0 {
		return rc
	}
	if flags != 1 && flags != 2 { // CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST
		return cudaErrorInvalidValue
	}
	return b.allocate(p, g, n, MemManaged)
}

func (b *FakeBox) cuMemAdvise(p cuda.Ptr, n uintptr, advice int32, dev int32) int32 {
	if rc := b.ready("cuMemAdvise"); rc != 0 {
		return rc
	}
	a := b.find(uint64(p))
	switch {
	case a == nil || a.mem != MemManaged || uint64(p)+uint64(n) > a.addr+a.size:
		return cudaErrorInvalidValue
	case advice < 1 || advice > 6:
		return cudaErrorInvalidValue
	case !b.valid(dev):
		return cudaErrorInvalidDevice
	}
	return 0
}

func (b *FakeBox) cuMemGetAllocationGranularity(g *uintptr, prop *cuda.MemProp, option int32) int32 {
	if rc := b.ready("cuMemGetAllocationGranularity"); rc != 0 {
		return rc
	}
	if prop.Type != 1 || prop.LocType != 1 || !b.valid(prop.LocID) || option < 0 || option > 1 {
		return cudaErrorInvalidValue
	}
	*g = uintptr(b.granularity())
	return 0
}

func (b *FakeBox) cuMemCreate(h *uint64, n uintptr, prop *cuda.MemProp, flags uint64) int32 {
	if _, rc := b.cur("cuMemCreate"); rc != 0 {
		return rc
	}
	if prop.Type != 1 || prop.LocType != 1 || !b.valid(prop.LocID) || flags != 0 || n == 0 || uint64(n)%b.granularity() != 0 || prop.HandleTypes&^1 != 0 {
		return cudaErrorInvalidValue
	}
	g := int(prop.LocID)
	if b.used(g)+int64(n) > b.cfg.GPUs[g].MemBytes {
		return cudaErrorOutOfMemory
	}
	v := b.vmmInit()
	hd := uint64(b.newHandle())
	v.phys[hd] = &physMem{gpu: g, data: make([]byte, n), fdOK: prop.HandleTypes&1 != 0}
	*h = hd
	return 0
}

func (b *FakeBox) cuMemRelease(h uint64) int32 {
	if rc := b.ready("cuMemRelease"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	if _, ok := v.phys[h]; !ok {
		return cudaErrorInvalidValue
	}
	delete(v.phys, h) // mappings keep the memory until unmapped, as the driver does
	return 0
}

func (b *FakeBox) cuMemAddressReserve(p *cuda.Ptr, n, align uintptr, addr cuda.Ptr, flags uint64) int32 {
	if rc := b.ready("cuMemAddressReserve"); rc != 0 {
		return rc
	}
	if n == 0 || uint64(n)%b.granularity() != 0 || flags != 0 {
		return cudaErrorInvalidValue
	}
	v := b.vmmInit()
	a := vmmBase + v.next
	v.next += (uint64(n) + vaAlign - 1) / vaAlign * vaAlign
	v.reserve[a] = uint64(n)
	*p = cuda.Ptr(a)
	return 0
}

func (b *FakeBox) cuMemAddressFree(p cuda.Ptr, n uintptr) int32 {
	if rc := b.ready("cuMemAddressFree"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	if v.reserve[uint64(p)] != uint64(n) {
		return cudaErrorInvalidValue
	}
	delete(v.reserve, uint64(p))
	return 0
}

func (b *FakeBox) cuMemMap(p cuda.Ptr, n, offset uintptr, h uint64, flags uint64) int32 {
	if rc := b.ready("cuMemMap"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	pm, ok := v.phys[h]
	size, reserved := v.reserve[uint64(p)]
	switch {
	case !ok:
		return cudaErrorInvalidHandle
	case !reserved || uint64(n) > size || flags != 0 || uint64(offset)+uint64(n) > uint64(len(pm.data)):
		return cudaErrorInvalidValue
	case b.find(uint64(p)) != nil:
		return cudaErrorInvalidValue // already mapped
	}
	b.insert(&alloc{gpu: pm.gpu, addr: uint64(p), size: uint64(n), data: pm.data[offset : uint64(offset)+uint64(n)], mem: MemVMM, access: map[int]bool{}})
	return 0
}

func (b *FakeBox) cuMemUnmap(p cuda.Ptr, n uintptr) int32 {
	if rc := b.ready("cuMemUnmap"); rc != 0 {
		return rc
	}
	for i, a := range b.allocs {
		if a.addr == uint64(p) && a.mem == MemVMM && a.size == uint64(n) {
			b.allocs = append(b.allocs[:i], b.allocs[i+1:]...)
			return 0
		}
	}
	return cudaErrorInvalidValue
}

func (b *FakeBox) cuMemSetAccess(p cuda.Ptr, n uintptr, desc *cuda.MemAccessDesc, count uintptr) int32 {
	if rc := b.ready("cuMemSetAccess"); rc != 0 {
		return rc
	}
	a := b.find(uint64(p))
	if a == nil || a.mem != MemVMM || count == 0 || uint64(p)+uint64(n) > a.addr+a.size {
		return cudaErrorInvalidValue
	}
	for _, d := range unsafe.Slice(desc, int(count)) {
		if d.LocType != 1 || !b.valid(d.LocID) || d.Flags > 3 || d.Flags == 2 {
			return cudaErrorInvalidValue
		}
		if int(d.LocID) != a.gpu && !b.canAccess(int(d.LocID), a.gpu) {
			// No P2P between the two: the driver cannot map the memory for that GPU.
			return cudaErrorInvalidDevice
		}
		a.access[int(d.LocID)] = d.Flags == 3
	}
	return 0
}

func (b *FakeBox) cuMemExportToShareableHandle(shareable unsafe.Pointer, h uint64, typ int32, flags uint64) int32 {
	if rc := b.ready("cuMemExportToShareableHandle"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	pm, ok := v.phys[h]
	if !ok {
		return cudaErrorInvalidHandle
	}
	if typ != 1 || flags != 0 || !pm.fdOK {
		return cudaErrorInvalidValue
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		return cudaErrorInvalidValue
	}
	// The caller owns the descriptor and closes it, as with the driver's.
	fd := int32(f.Fd())
	dup, err := dupFD(fd)
	f.Close()
	if err != nil {
		return cudaErrorInvalidValue
	}
	v.fds[dup] = pm
	*(*int32)(shareable) = dup
	return 0
}

func (b *FakeBox) cuMemImportFromShareableHandle(h *uint64, osHandle uintptr, typ int32) int32 {
	if rc := b.ready("cuMemImportFromShareableHandle"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	pm, ok := v.fds[int32(osHandle)]
	if !ok || typ != 1 {
		return cudaErrorInvalidValue
	}
	delete(v.fds, int32(osHandle)) // a descriptor number may be reused once closed
	hd := uint64(b.newHandle())
	v.phys[hd] = pm
	*h = hd
	return 0
}

func dupFD(fd int32) (int32, error) {
	n, err := syscall.Dup(int(fd))
	return int32(n), err
}
