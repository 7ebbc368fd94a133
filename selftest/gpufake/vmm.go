package gpufake

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

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
	gpu   int
	data  []byte
	memfd int // the shared pages of an exportable allocation; -1 none
}

type vmmState struct {
	phys    map[uint64]*physMem // by handle
	next    uint64              // next reservation offset above vmmBase
	reserve map[uint64]uint64   // reserved address -> size
}

func (b *FakeBox) vmmInit() *vmmState {
	if b.vmm == nil {
		b.vmm = &vmmState{phys: map[uint64]*physMem{}, reserve: map[uint64]uint64{}}
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
	pm := &physMem{gpu: g, data: make([]byte, n), memfd: -1}
	if prop.HandleTypes&1 != 0 {
		fd, err := unix.MemfdCreate(fmt.Sprintf("gpufake-gpu%d", g), unix.MFD_CLOEXEC)
		if err != nil {
			return cudaErrorOutOfMemory
		}
		data, err := mapFD(fd, int(n))
		if err != nil {
			unix.Close(fd)
			return cudaErrorOutOfMemory
		}
		pm.data, pm.memfd = data, fd
	}
	hd := uint64(b.newHandle())
	v.phys[hd] = pm
	*h = hd
	return 0
}

// mapFD sizes the memfd to n bytes (when it is smaller) and maps it shared.
func mapFD(fd, n int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < int64(n) {
		if err := unix.Ftruncate(fd, int64(n)); err != nil {
			return nil, err
		}
	}
	return unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func (b *FakeBox) cuMemRelease(h uint64) int32 {
	if rc := b.ready("cuMemRelease"); rc != 0 {
		return rc
	}
	v := b.vmmInit()
	if _, ok := v.phys[h]; !ok {
		return cudaErrorInvalidValue
	}
	if pm := v.phys[h]; pm.memfd >= 0 {
		unix.Close(pm.memfd) // the pages stay mapped where they are mapped
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
	if typ != 1 || flags != 0 || pm.memfd < 0 {
		return cudaErrorInvalidValue
	}
	// The caller owns the descriptor and closes it, as with the driver's.
	fd, err := unix.Dup(pm.memfd)
	if err != nil {
		return cudaErrorInvalidValue
	}
	*(*int32)(shareable) = int32(fd)
	return 0
}

// memfdGPU is the GPU a gpufake memfd was created for, from its name
// ("/memfd:gpufake-gpu1 (deleted)"), or -1.
func memfdGPU(fd int) int {
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return -1
	}
	var g int
	if _, err := fmt.Sscanf(strings.TrimPrefix(link, "/memfd:"), "gpufake-gpu%d", &g); err != nil {
		return -1
	}
	return g
}

func (b *FakeBox) cuMemImportFromShareableHandle(h *uint64, osHandle uintptr, typ int32) int32 {
	if rc := b.ready("cuMemImportFromShareableHandle"); rc != 0 {
		return rc
	}
	fd := int(osHandle)
	g := memfdGPU(fd)
	if typ != 1 || !b.valid(int32(g)) {
		return cudaErrorInvalidValue
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size <= 0 {
		return cudaErrorInvalidValue
	}
	// A descriptor of our own keeps the pages once the caller closes its one.
	own, err := unix.Dup(fd)
	if err != nil {
		return cudaErrorInvalidValue
	}
	data, err := mapFD(own, int(st.Size))
	if err != nil {
		unix.Close(own)
		return cudaErrorInvalidValue
	}
	hd := uint64(b.newHandle())
	b.vmmInit().phys[hd] = &physMem{gpu: g, data: data, memfd: own}
	*h = hd
	return 0
}
