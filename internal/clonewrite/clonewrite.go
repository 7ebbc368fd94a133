// Package clonewrite writes a file that starts as a copy-on-write clone of an
// earlier version of it (FICLONE: XFS, btrfs) and rewrites only the blocks
// whose bytes differ, so a rebuilt image that changed in a few places costs a
// few block writes and their fsync instead of the whole file (issue 34). The
// earlier file is only read: the clone is a new inode. Where the filesystem
// cannot clone (ext4, tmpfs, another filesystem), the file is written whole,
// as a plain os.Create would. Either way, once closed, the file holds exactly
// the bytes its caller wrote.
package clonewrite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"

	"golang.org/x/sys/unix"
)

// blockSize is the unit of comparison with the clone's bytes.
const blockSize = 64 << 10

// File is a file being written through Write (sequentially, from offset 0),
// WriteAt and Truncate, as an *os.File would be. Close makes it final.
type File struct {
	f       *os.File
	base    *os.File // what the clone started as, while cloned
	baseMap []byte   // base mapped read-only, nil if it could not be
	cloned  bool
	reason  string // why it is written whole, when not cloned

	off     int64  // where Write writes next
	size    int64  // the size the caller gave it (writes and Truncate)
	covered []span // what the caller wrote, sorted, disjoint, not touching
	dirty   []span // what may differ from base in f (never shrinks)
	buf     []byte

	written  int64
	baseSize int64
	zeroed   []span // what Close made zeros where the caller wrote nothing
	wrote    []span // what differed from the clone's bytes and was written
}

type span struct{ from, to int64 }

// Create creates path (mode perm) for writing. With base (a file on the same
// filesystem; "" for none) and a filesystem that clones, it starts as a clone
// of base; otherwise empty, and Reason says why.
func Create(path, base string, perm os.FileMode) (*File, error) {
	return create(path, base, perm, func(dst, src *os.File) error {
		return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	})
}

// create is Create with the clone operation given (tests clone by copying on
// filesystems without reflinks).
func create(path, base string, perm os.FileMode, clone func(dst, src *os.File) error) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return nil, err
	}
	w := &File{f: f}
	if base == "" {
		w.reason = "no previous output"
		return w, nil
	}
	b, err := os.Open(base)
	if err != nil {
		w.reason = fmt.Sprintf("no previous file (%v)", err)
		return w, nil
	}
	if err := clone(f, b); err != nil {
		b.Close()
		// EOPNOTSUPP (ext4, tmpfs), EXDEV (another filesystem), EINVAL: the
		// whole write, as without a base. A failed clone leaves nothing to keep.
		if terr := f.Truncate(0); terr != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, terr)
		}
		w.reason = fmt.Sprintf("no reflink here: %v", err)
		return w, nil
	}
	w.cloned, w.base, w.buf = true, b, make([]byte, blockSize)
	// Mapped read-only: the compare reads the base's pages in place, where a
	// pread would copy the ~250 MiB an image stage compares.
	if info, err := b.Stat(); err == nil && info.Size() > 0 {
		w.baseSize = info.Size()
		if m, err := unix.Mmap(int(b.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			w.baseMap = m
		}
	}
	return w, nil
}

// Cloned reports whether the file started as a clone of the base.
func (w *File) Cloned() bool { return w.cloned }

// Reason says why the file is written whole ("" when cloned).
func (w *File) Reason() string { return w.reason }

// Written is how many bytes went to the file: all of them when not cloned,
// the blocks that differed from the clone's when cloned.
func (w *File) Written() int64 {
	if !w.cloned {
		return w.size
	}
	return w.written
}

// Size is the file's size as written so far.
func (w *File) Size() int64 { return w.size }

// Name is the file's path.
func (w *File) Name() string { return w.f.Name() }

// Write writes p at the current offset (0 at first), like os.File's Write.
func (w *File) Write(p []byte) (int, error) {
	n, err := w.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

// WriteAt writes p at off. Cloned, it writes only the bytes of each block
// that differ from what the file holds there; a zero block over a hole is
// equal and stays a hole.
func (w *File) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%s: write at negative offset %d", w.f.Name(), off)
	}
	if len(p) == 0 {
		return 0, nil // as pwrite: an empty write does not grow the file
	}
	if !w.cloned {
		n, err := w.f.WriteAt(p, off)
		w.size = max(w.size, off+int64(n))
		return n, err
	}
	for done := 0; done < len(p); {
		pos := off + int64(done)
		n := int(min(int64(len(p)-done), blockSize-pos%blockSize))
		if err := w.writeChanged(p[done:done+n], pos); err != nil {
			return done, fmt.Errorf("%s: %w", w.f.Name(), err)
		}
		done += n
	}
	end := off + int64(len(p))
	w.covered = cover(w.covered, off, end)
	w.dirty = cover(w.dirty, off, end)
	w.size = max(w.size, end)
	return len(p), nil
}

// writeChanged writes the part of q (at most one block, at pos) that differs
// from the file's bytes there. Bytes past the file's end count as zeros: Close
// extends the file to its size with zeros.
func (w *File) writeChanged(q []byte, pos int64) error {
	if isZero(q) && w.hole(pos, int64(len(q))) {
		return nil
	}
	// Where nothing was written yet, the clone holds the base's bytes: read
	// them from the base, whose pages the previous build left in memory (the
	// new inode's are not).
	src := w.base
	if touches(w.dirty, pos, pos+int64(len(q))) {
		src = w.f
	}
	var cur []byte
	if end := pos + int64(len(q)); src == w.base && w.baseMap != nil && end <= int64(len(w.baseMap)) {
		cur = w.baseMap[pos:end]
	} else {
		cur = w.buf[:len(q)]
		n, err := src.ReadAt(cur, pos)
		if err != nil && err != io.EOF {
			return err
		}
		clear(cur[n:])
	}
	if bytes.Equal(q, cur) {
		return nil
	}
	first, last := 0, len(q)-1
	for q[first] == cur[first] {
		first++
	}
	for q[last] == cur[last] {
		last--
	}
	m, err := w.f.WriteAt(q[first:last+1], pos+int64(first))
	w.written += int64(m)
	w.wrote = cover(w.wrote, pos+int64(first), pos+int64(last+1))
	return err
}

// Assume counts [from, to) as written with the bytes the clone already holds
// there, unread: the caller knows them equal (the image stage carries the
// UKI's unchanged bytes into the disk this way). Parts written already are
// not assumed: they are returned, for the caller to write its bytes there.
// It fails on a file that is not a clone.
func (w *File) Assume(from, to int64) (written []Span, err error) {
	switch {
	case !w.cloned:
		return nil, fmt.Errorf("%s: assumes bytes of a clone, but it is written whole", w.f.Name())
	case from < 0 || to < from:
		return nil, fmt.Errorf("%s: assumes bytes [%d, %d)", w.f.Name(), from, to)
	}
	pos := from
	i := sort.Search(len(w.dirty), func(i int) bool { return w.dirty[i].to > from })
	for ; i < len(w.dirty) && w.dirty[i].from < to; i++ {
		d := w.dirty[i]
		if pos < d.from {
			w.covered = cover(w.covered, pos, d.from)
		}
		written = append(written, Span{max(d.from, from), min(d.to, to)})
		pos = min(d.to, to)
	}
	if pos < to {
		w.covered = cover(w.covered, pos, to)
	}
	w.size = max(w.size, to)
	return written, nil
}

// CopyFrom writes all of src at off. Written whole (no clone), the kernel
// copies it (copy_file_range: no trip through memory); cloned, it is read and
// written as WriteAt writes, only what differs.
func (w *File) CopyFrom(src *os.File, off int64) error {
	if !w.cloned {
		at, from := off, int64(0)
		for {
			n, err := unix.CopyFileRange(int(src.Fd()), &from, int(w.f.Fd()), &at, 1<<30, 0)
			if err != nil {
				break // EXDEV and the like: the plain copy below, from where it stopped
			}
			if n == 0 {
				if at > off { // as pwrite: copying nothing does not grow the file
					w.size = max(w.size, at)
				}
				return nil
			}
		}
		_, err := io.Copy(io.NewOffsetWriter(w, at), io.NewSectionReader(src, from, 1<<62))
		return err
	}
	_, err := io.Copy(io.NewOffsetWriter(w, off), src)
	return err
}

// Span is a byte range [From, To) of a file.
type Span struct{ From, To int64 }

// Changed lists, once the file is closed, the ranges where it may differ from
// the base it was cloned from: those written, those made zeros, and any size
// change. ok is false when it was not a clone (then all of it may differ).
func (w *File) Changed() (spans []Span, ok bool) {
	if !w.cloned {
		return nil, false
	}
	all := slices.Clone(w.wrote)
	for _, z := range w.zeroed {
		all = cover(all, z.from, z.to)
	}
	if w.baseSize != w.size {
		all = cover(all, min(w.baseSize, w.size), max(w.baseSize, w.size))
	}
	for _, c := range all {
		spans = append(spans, Span{c.from, c.to})
	}
	return spans, true
}

// Truncate sets the file's size, as os.File's Truncate: bytes past size are
// gone, and growing it adds zeros. Cloned, the file itself is only cut or
// grown at Close, so what the clone holds there can still be compared.
func (w *File) Truncate(size int64) error {
	if size < 0 {
		return fmt.Errorf("%s: truncate to negative size %d", w.f.Name(), size)
	}
	if !w.cloned {
		if err := w.f.Truncate(size); err != nil {
			return err
		}
		w.size = size
		return nil
	}
	// The spans before i end at or below size; span i may straddle it.
	i := sort.Search(len(w.covered), func(i int) bool { return w.covered[i].to > size })
	if i < len(w.covered) && w.covered[i].from < size {
		w.covered[i].to = size
		i++
	}
	w.covered = w.covered[:i]
	w.size = size
	return nil
}

// Close makes the file exactly what was written: every range the caller
// never wrote is zero (a hole, where the clone had data), and its size is
// the caller's. It does not fsync: the store's commit does.
func (w *File) Close() error {
	if !w.cloned {
		return w.f.Close()
	}
	err := w.finish()
	if w.baseMap != nil {
		unix.Munmap(w.baseMap)
	}
	w.base.Close()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.f.Name(), err)
	}
	return nil
}

func (w *File) finish() error {
	info, err := w.f.Stat()
	if err != nil {
		return err
	}
	onDisk := info.Size()
	var pos int64
	for _, s := range append(slices.Clone(w.covered), span{w.size, w.size}) {
		if from, to := pos, min(s.from, onDisk, w.size); from < to && !w.hole(from, to-from) {
			if err := w.zero(from, to); err != nil {
				return err
			}
			w.zeroed = cover(w.zeroed, from, to)
		}
		pos = s.to
	}
	if onDisk != w.size {
		return w.f.Truncate(w.size)
	}
	return nil
}

// zero makes [from, to) read as zeros: a punched hole, or zeros written
// where the filesystem cannot punch.
func (w *File) zero(from, to int64) error {
	err := unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("zeroing %d bytes at %d: %w", to-from, from, err)
	}
	clear(w.buf)
	for pos := from; pos < to; {
		n := min(int64(len(w.buf)), to-pos)
		if _, err := w.f.WriteAt(w.buf[:n], pos); err != nil {
			return err
		}
		w.written += n
		pos += n
	}
	return nil
}

// hole says whether [off, off+n) of the file holds no data (reads as zeros,
// or lies past its end); false when the filesystem cannot tell.
func (w *File) hole(off, n int64) bool {
	data, err := unix.Seek(int(w.f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true
	}
	return err == nil && data >= off+n
}

// cover adds [from, to) to spans, merging it with the spans it touches.
func cover(spans []span, from, to int64) []span {
	if from >= to {
		return spans
	}
	n := len(spans)
	switch {
	case n == 0 || from > spans[n-1].to:
		return append(spans, span{from, to})
	case from >= spans[n-1].from:
		spans[n-1].to = max(spans[n-1].to, to)
		return spans
	}
	i := sort.Search(n, func(i int) bool { return spans[i].to >= from })
	j := sort.Search(n, func(i int) bool { return spans[i].from > to })
	if i < j {
		from, to = min(from, spans[i].from), max(to, spans[j-1].to)
	}
	return slices.Replace(spans, i, j, span{from, to})
}

// touches says whether [from, to) overlaps one of spans.
func touches(spans []span, from, to int64) bool {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].to > from })
	return i < len(spans) && spans[i].from < to
}

func isZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
