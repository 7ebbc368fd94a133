package store

import (
	"encoding/binary"
	"os"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FIEMAP (include/uapi/linux/fiemap.h, linux/fs.h): the file's extents with
// their physical addresses. x/sys/unix does not carry it.
const (
	fsIocFiemap      = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync   = 0x1        // write dirty pages back before mapping
	fiemapHeaderSize = 32
	fiemapExtentSize = 56
	fiemapBatch      = 256

	fiemapExtentLast = 0x1
	// Extents whose bytes are not plainly at their physical address: unknown
	// or delayed allocation, encoded, encrypted, inline, tail-packed, unaligned.
	fiemapExtentOpaque    = 0x2 | 0x4 | 0x8 | 0x80 | 0x100 | 0x200 | 0x400
	fiemapExtentUnwritten = 0x800
)

// extent is one FIEMAP extent: logical [off, off+n) at physical phys.
type extent struct {
	off, n, phys int64
	flags        uint32
}

// fileExtents maps f (synced first), or nil when the file system cannot say.
func fileExtents(f *os.File) []extent {
	buf := make([]uint64, (fiemapHeaderSize+fiemapBatch*fiemapExtentSize)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	var out []extent
	var start uint64
	for {
		clear(b)
		binary.NativeEndian.PutUint64(b[0:], start)
		binary.NativeEndian.PutUint64(b[8:], ^uint64(0)-start)
		binary.NativeEndian.PutUint32(b[16:], fiemapFlagSync)
		binary.NativeEndian.PutUint32(b[24:], fiemapBatch)
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
			return nil
		}
		n := int(binary.NativeEndian.Uint32(b[20:]))
		if n == 0 {
			return out
		}
		for i := range n {
			e := b[fiemapHeaderSize+i*fiemapExtentSize:]
			x := extent{
				off:   int64(binary.NativeEndian.Uint64(e[0:])),
				phys:  int64(binary.NativeEndian.Uint64(e[8:])),
				n:     int64(binary.NativeEndian.Uint64(e[16:])),
				flags: binary.NativeEndian.Uint32(e[40:]),
			}
			out = append(out, x)
			if x.flags&fiemapExtentLast != 0 {
				return out
			}
			start = uint64(x.off + x.n)
		}
	}
}

// sharedMap says which ranges of two files are the same blocks of the file
// system at the same offsets: a reflink clone's untouched ranges. Those bytes
// are equal without reading them (after both files' dirty pages were written
// back: FIEMAP_FLAG_SYNC).
type sharedMap struct{ a, b []extent }

func newSharedMap(a, b *os.File) *sharedMap {
	ea := fileExtents(a)
	if ea == nil {
		return nil
	}
	eb := fileExtents(b)
	if eb == nil {
		return nil
	}
	return &sharedMap{ea, eb}
}

// same reports whether [off, off+n) is stored in the same physical blocks
// in both files, or is a hole in both.
func (m *sharedMap) same(off, n int64) bool {
	if m == nil {
		return false
	}
	for end := off + n; off < end; {
		x, nextA, okA := find(m.a, off)
		y, nextB, okB := find(m.b, off)
		switch {
		case !okA && !okB: // a hole in both, up to the next extent of either
			off = min(nextA, nextB, end)
			continue
		case !okA || !okB, x.flags&fiemapExtentOpaque != 0, y.flags&fiemapExtentOpaque != 0,
			x.flags&fiemapExtentUnwritten != y.flags&fiemapExtentUnwritten, x.phys-x.off != y.phys-y.off:
			return false
		}
		off = min(x.off+x.n, y.off+y.n, end)
	}
	return true
}

// find is the extent of es holding offset off, or where the next one starts
// (past the end: none).
func find(es []extent, off int64) (extent, int64, bool) {
	i := sort.Search(len(es), func(i int) bool { return es[i].off+es[i].n > off })
	if i == len(es) {
		return extent{}, 1<<63 - 1, false
	}
	if es[i].off > off {
		return extent{}, es[i].off, false
	}
	return es[i], 0, true
}
