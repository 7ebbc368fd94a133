package gpufake

import (
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest/cuda"
)

// The legacy IPC API (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle).
// Taking a handle moves the allocation's bytes into a file of its own under the
// temporary directory, mapped shared, whose name the handle carries (the process id and
// a counter); opening the handle in another process's FakeBox maps the same file, so
// what one process writes the other reads. The exporter's cuMemFree removes the file.

const ipcMagic = 0x67707566616b6569 // "gpufakei"

// ipcPath names a handle's file: the exporting process, its box (boxes of one test
// process must not collide) and the box's count of handles.
func ipcPath(pid, box, n uint64) string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("gpufake-ipc-%d-%x-%d", pid, box, n))
}

func (b *FakeBox) cuIpcGetMemHandle(h *cuda.IPCHandle, p cuda.Ptr) int32 {
	if _, rc := b.cur("cuIpcGetMemHandle"); rc != 0 {
		return rc
	}
	a := b.find(uint64(p))
	if a == nil || a.addr != uint64(p) || a.mem != MemDevice {
		return cudaErrorInvalidValue
	}
	box := uint64(uintptr(unsafe.Pointer(b)))
	if a.ipcPath == "" {
		b.ipcs++
		path := ipcPath(uint64(os.Getpid()), box, b.ipcs)
		if err := os.WriteFile(path, a.bytes(), 0o600); err != nil {
			return cudaErrorOutOfMemory
		}
		data, err := mapFile(path, int(a.size))
		if err != nil {
			os.Remove(path)
			return cudaErrorOutOfMemory
		}
		a.data, a.ipcPath, a.ipcN = data, path, b.ipcs
	}
	*h = cuda.IPCHandle{W0: ipcMagic, W1: uint64(a.gpu), W2: a.size, W3: uint64(os.Getpid()), W4: a.ipcN, W5: box}
	return 0
}

// mapFile maps n bytes of the file at path shared.
func mapFile(path string, n int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func (b *FakeBox) cuIpcOpenMemHandle(p *cuda.Ptr, h cuda.IPCHandle, flags uint32) int32 {
	g, rc := b.cur("cuIpcOpenMemHandle_v2")
	if rc != 0 {
		return rc
	}
	owner := int(h.W1)
	switch {
	case h.W0 != ipcMagic || !b.valid(int32(owner)) || flags&^1 != 0:
		return cudaErrorInvalidValue
	case h.W3 == uint64(os.Getpid()) && h.W5 == uint64(uintptr(unsafe.Pointer(b))):
		return cudaErrorInvalidContext // the driver opens a handle only in another process
	case owner != g && (flags&1 == 0 || !b.canAccess(g, owner)):
		return cudaErrorPeerUnsupported
	}
	data, err := mapFile(ipcPath(h.W3, h.W5, h.W4), int(h.W2))
	if err != nil {
		return cudaErrorInvalidValue
	}
	if owner != g {
		b.peer[g][owner] = true // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
	}
	v := b.vmmInit()
	addr := vmmBase + v.next
	v.next += (h.W2 + vaAlign - 1) / vaAlign * vaAlign
	b.insert(&alloc{gpu: owner, addr: addr, size: h.W2, data: data, mem: MemDevice, ipcOpened: true})
	*p = cuda.Ptr(addr)
	return 0
}

func (b *FakeBox) cuIpcCloseMemHandle(p cuda.Ptr) int32 {
	if rc := b.ready("cuIpcCloseMemHandle"); rc != 0 {
		return rc
	}
	for i, a := range b.allocs {
		if a.addr == uint64(p) && a.ipcOpened {
			b.allocs = append(b.allocs[:i], b.allocs[i+1:]...)
			return 0
		}
	}
	return cudaErrorInvalidValue
}
