package flash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/progress"
)

// DefaultBlockSize is the size of one write: large enough that per-call cost
// vanishes, small enough that three buffers stay cheap.
const DefaultBlockSize = 4 << 20

// Options controls Flash.
type Options struct {
	Force       bool // allow a non-removable disk (or a non-512-byte one)
	Yes         bool // do not ask
	GrowReports bool // grow the PEERBOOT partition to fill the device afterwards
	// Confirm is asked (unless Yes) after the checks pass, with the device
	// line; false or an error refuses. Nil refuses unless Yes.
	Confirm   func(d *Device) (bool, error)
	Log       io.Writer // progress and messages; nil discards
	BlockSize int       // default DefaultBlockSize; a multiple of 4096
	Env       Env

	// readBack, when set, sees every block read back before it is hashed:
	// the tests corrupt one byte to prove a mismatch is caught.
	readBack func(off int64, b []byte)
}

// Result is what a flash did and how fast.
type Result struct {
	Device  *Device
	Bytes   int64
	SHA256  string        // of the image, and of what was read back
	Direct  bool          // O_DIRECT was used
	Write   time.Duration // including the final fsync
	Verify  time.Duration
	Reports *GrowResult // set with GrowReports
}

// WriteRate and VerifyRate are in bytes per second.
func (r *Result) WriteRate() float64  { return rate(r.Bytes, r.Write) }
func (r *Result) VerifyRate() float64 { return rate(r.Bytes, r.Verify) }

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// MismatchError says the device does not hold what was written.
type MismatchError struct {
	Device, Image string
	Want, Got     string // sha256 hex
	Offset        int64  // first differing byte, -1 when the second pass found none
	imageChanged  bool
}

func (e *MismatchError) Error() string {
	if e.imageChanged {
		return fmt.Sprintf("%s has sha256 %s, but %s lists %s: the image changed after it was built (the device holds the changed image)", e.Device, e.Got, e.Image, e.Want)
	}
	s := fmt.Sprintf("%s does not hold %s after writing: read back sha256 %s, want %s", e.Device, e.Image, e.Got, e.Want)
	if e.Offset >= 0 {
		s += fmt.Sprintf("; first difference at byte %d (%s in)", e.Offset, progress.Bytes(e.Offset))
	}
	return s + ": the stick may be failing or counterfeit (smaller than it claims)"
}

// Flash writes image to device after the safety checks, fsyncs, reads it back
// and compares hashes, then grows the report partition when asked.
func Flash(ctx context.Context, image, device string, opt Options) (*Result, error) {
	log := opt.Log
	if log == nil {
		log = io.Discard
	}
	bs := opt.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs <= 0 || bs%4096 != 0 {
		return nil, fmt.Errorf("block size %d is not a positive multiple of 4096", bs)
	}
	img, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	defer img.Close()
	info, err := img.Stat()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if !info.Mode().IsRegular() || info.Size() == 0 {
		return nil, fmt.Errorf("image %s is not a non-empty regular file", image)
	}
	size := info.Size()

	// 1. Open the disk once; the safety checks, the person at the keyboard,
	// the write, the read-back and the grow all go through this descriptor.
	if err := isBlockDevice(device); err != nil {
		return nil, err
	}
	dev, direct, err := openDisk(device)
	if err != nil {
		return nil, refuseUnopened(device, size, opt, err)
	}
	defer dev.Close()
	d, err := inspect(dev, device, opt.Env)
	if err != nil {
		return nil, err
	}
	if err := d.Check(size, opt.Force, opt.Env); err != nil {
		return nil, err
	}
	fmt.Fprintln(log, d.String())
	if !opt.Yes {
		ok := false
		if opt.Confirm != nil {
			if ok, err = opt.Confirm(d); err != nil {
				return nil, &Refused{Device: d.Path, Reasons: []string{fmt.Sprintf("no confirmation: %v", err)}}
			}
		}
		if !ok {
			return nil, &Refused{Device: d.Path, Reasons: []string{"not confirmed (pass --yes to skip the question)"}}
		}
	}

	// 2. Write. The O_EXCL descriptor held since the checks means nothing
	// has mounted or claimed the disk meanwhile.
	res := &Result{Device: d, Bytes: size, Direct: direct}
	start := time.Now()
	if err := write(ctx, img, dev, direct, d, size, bs, log); err != nil {
		return nil, err
	}
	res.Write = time.Since(start)

	// 3. Read back from the device itself, not the page cache, and compare
	// with the image's hash, computed meanwhile on another core through the
	// descriptor the write read (the path may name a newer build by now).
	start = time.Now()
	imgSum := make(chan error, 1)
	go func() {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(img, 0, size)); err != nil {
			imgSum <- fmt.Errorf("hashing %s: %w", image, err)
			return
		}
		res.SHA256 = hex.EncodeToString(h.Sum(nil))
		imgSum <- nil
	}()
	got, err := readBack(ctx, dev, direct, d, size, bs, log, opt.readBack)
	if herr := <-imgSum; herr != nil && err == nil {
		err = herr
	}
	if err != nil {
		return nil, err
	}
	res.Verify = time.Since(start)
	sum := res.SHA256
	if want, ok := listedSum(image); ok && want != sum {
		return res, &MismatchError{Device: image, Image: filepath.Join(filepath.Dir(image), output.SumsFile), Want: want, Got: sum, Offset: -1, imageChanged: true}
	}
	if got != sum {
		off, ferr := firstDifference(img, dev, size, bs)
		if ferr != nil {
			off = -1
		}
		return res, &MismatchError{Device: d.Path, Image: image, Want: sum, Got: got, Offset: off}
	}
	// 4. Optionally, give the reports the rest of the stick; before the kernel
	// is told about the new partitions, so a desktop's automounter cannot
	// claim them first. Either way the kernel re-reads the table at the end.
	if opt.GrowReports {
		g, err := growReports(dev, d.Path, log)
		if err != nil {
			return res, err
		}
		res.Reports = g
	}
	if err := rereadPartitions(dev, d.Path); err != nil {
		fmt.Fprintf(log, "warning: %v: replug the stick to see its partitions\n", err)
	}
	return res, nil
}

// refuseUnopened explains why the disk could not be opened for writing:
// inspected through a read-only descriptor (which writes nothing), with every
// reason the checks find, such as where it is mounted, besides the kernel's.
func refuseUnopened(path string, size int64, opt Options, openErr error) error {
	var why string
	switch {
	case errors.Is(openErr, unix.EBUSY):
		why = "the kernel says it is busy (mounted, or claimed by another program)"
	case errors.Is(openErr, unix.EROFS), errors.Is(openErr, unix.EACCES), errors.Is(openErr, unix.EPERM):
		why = fmt.Sprintf("it cannot be opened for writing: %v", errors.Unwrap(openErr))
	default:
		return fmt.Errorf("opening %s: %w", path, openErr)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return &Refused{Device: path, Reasons: []string{why}}
	}
	defer f.Close()
	d, err := inspect(f, path, opt.Env)
	if err != nil {
		return err
	}
	var r *Refused
	if err := d.Check(size, opt.Force, opt.Env); errors.As(err, &r) {
		if !d.ReadOnly || errors.Is(openErr, unix.EBUSY) {
			r.Reasons = append(r.Reasons, why)
		}
		return r
	}
	return &Refused{Device: d.Path, Reasons: []string{why}}
}

// block is one buffer in flight between the reader and the writer.
type block struct {
	buf []byte
	n   int
	off int64
}

// pipeline fills the buffers in order with read (which returns how many bytes of the
// block at off it produced) in its own goroutine, so the consumer of full (writing to
// the device, or hashing what was read back) overlaps with the next read. Consumers
// hand each buffer back on empty; readErr gets exactly one value when reading ends.
func pipeline(ctx context.Context, bufs [][]byte, size int64, read func(buf []byte, off int64) (int, error)) (empty chan []byte, full chan block, readErr chan error) {
	empty = make(chan []byte, len(bufs))
	full = make(chan block, len(bufs))
	readErr = make(chan error, 1)
	for _, b := range bufs {
		empty <- b
	}
	go func() {
		defer close(full)
		for off := int64(0); off < size; {
			var buf []byte
			select {
			case buf = <-empty:
			case <-ctx.Done():
				readErr <- ctx.Err()
				return
			}
			n, err := read(buf, off)
			if err != nil {
				readErr <- err
				return
			}
			full <- block{buf, n, off}
			off += int64(n)
		}
		readErr <- nil
	}()
	return empty, full, readErr
}

// alignedBuffers returns n page-aligned buffers of size bs (O_DIRECT wants
// the memory aligned to the logical block size; a page covers every disk).
func alignedBuffers(n, bs int) ([][]byte, func(), error) {
	mem, err := unix.Mmap(-1, 0, n*bs, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("allocating %d buffers of %d bytes: %w", n, bs, err)
	}
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = mem[i*bs : (i+1)*bs : (i+1)*bs]
	}
	return bufs, func() { unix.Munmap(mem) }, nil
}

// writers is how many writes are in flight at once: two keep the device
// busy while the next block is handed over, and USB sticks gain from it.
const writers = 2

// write copies the image to the device, reading block i+2 while blocks i and
// i+1 are written, then fsyncs. It does not hash: the verify pass hashes the
// image and the read-back side by side, so the write runs at the device's pace.
func write(ctx context.Context, img, dev *os.File, direct bool, d *Device, size int64, bs int, log io.Writer) error {
	bufs, free, err := alignedBuffers(writers+2, bs)
	if err != nil {
		return err
	}
	defer free()
	lbs := int64(max(d.LogicalBlock, 512))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	empty, full, readErr := pipeline(ctx, bufs, size, func(buf []byte, off int64) (int, error) {
		n, err := io.ReadFull(img, buf[:min(int64(bs), size-off)])
		if err != nil {
			return 0, fmt.Errorf("reading %s: %w", img.Name(), err)
		}
		return n, nil
	})

	m := progress.New(log, "writing "+d.Path, "B", size)
	var mu sync.Mutex
	var tail []byte // an unaligned end, written without O_DIRECT
	var werr error
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range full {
				if ctx.Err() != nil {
					empty <- b.buf
					continue
				}
				n := b.n
				if direct && int64(n)%lbs != 0 {
					aligned := int64(n) / lbs * lbs
					mu.Lock()
					tail = append([]byte(nil), b.buf[aligned:n]...)
					mu.Unlock()
					n = int(aligned)
				}
				if n > 0 {
					if _, err := dev.WriteAt(b.buf[:n], b.off); err != nil {
						mu.Lock()
						if werr == nil {
							werr = fmt.Errorf("writing %s at byte %d: %w", d.Path, b.off, err)
						}
						mu.Unlock()
						cancel()
					}
				}
				m.Add(int64(b.n))
				empty <- b.buf
			}
		}()
	}
	wg.Wait()
	rerr := <-readErr
	if werr != nil {
		return werr
	}
	if rerr != nil {
		return rerr
	}
	if tail != nil {
		if err := writeTail(dev, d.Path, tail, size-int64(len(tail))); err != nil {
			return err
		}
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", d.Path, err)
	}
	m.Done()
	return nil
}

// writeTail writes an end shorter than a logical block through the same
// descriptor, with O_DIRECT switched off for that one write and on again.
func writeTail(dev *os.File, path string, b []byte, off int64) error {
	if err := setDirect(dev, false); err != nil {
		return fmt.Errorf("writing the last %d bytes of %s: %w", len(b), path, err)
	}
	if _, err := dev.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing %s at byte %d: %w", path, off, err)
	}
	if err := setDirect(dev, true); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// setDirect turns O_DIRECT on or off on an open descriptor (F_SETFL).
func setDirect(f *os.File, on bool) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			ferr = err
			return
		}
		if on {
			fl |= unix.O_DIRECT
		} else {
			fl &^= unix.O_DIRECT
		}
		_, ferr = unix.FcntlInt(fd, unix.F_SETFL, fl)
	}); err != nil {
		return err
	}
	if ferr != nil {
		return fmt.Errorf("setting O_DIRECT to %v: %w", on, ferr)
	}
	return nil
}

// readBack hashes the first size bytes of the device, reading with O_DIRECT
// (and after dropping the device's page cache) so the bytes come from the medium.
func readBack(ctx context.Context, dev *os.File, direct bool, d *Device, size int64, bs int, log io.Writer, hook func(int64, []byte)) (string, error) {
	dropCache(dev)
	bufs, free, err := alignedBuffers(3, bs)
	if err != nil {
		return "", err
	}
	defer free()
	lbs := int64(max(d.LogicalBlock, 512))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	empty, full, readErr := pipeline(ctx, bufs, size, func(buf []byte, off int64) (int, error) {
		want := min(int64(bs), size-off)
		ask := want
		if direct && ask%lbs != 0 {
			ask = (ask + lbs - 1) / lbs * lbs // the device is a whole number of blocks
		}
		n, err := dev.ReadAt(buf[:ask], off)
		if int64(n) < want {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("reading back %s at byte %d: %w", d.Path, off, err)
		}
		return int(want), nil
	})
	h := sha256.New()
	m := progress.New(log, "verifying "+d.Path, "B", size)
	for b := range full {
		if hook != nil {
			hook(b.off, b.buf[:b.n])
		}
		h.Write(b.buf[:b.n])
		m.Add(int64(b.n))
		empty <- b.buf
	}
	if err := <-readErr; err != nil {
		return "", err
	}
	m.Done()
	return hex.EncodeToString(h.Sum(nil)), nil
}

// dropCache flushes the device's buffer cache (BLKFLSBUF) and tells the
// kernel the cached pages are not needed; a read without O_DIRECT then still
// goes to the medium.
func dropCache(f *os.File) {
	unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKFLSBUF, 0)
	unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// rereadPartitions asks the kernel to re-read the partition table, so the
// stick's partitions appear (and fsck or mount can use them) without
// replugging. The kernel allows it on the O_EXCL descriptor flash holds.
func rereadPartitions(f *os.File, path string) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKRRPART, 0); e != 0 {
		return fmt.Errorf("re-reading the partition table of %s: %w", path, e)
	}
	return nil
}

// listedSum returns the image's sha256 from a SHA256SUMS beside it (a build
// output directory), if there is one that lists it.
func listedSum(image string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(image), output.SumsFile))
	if err != nil {
		return "", false
	}
	sums, err := output.ParseSums(b)
	if err != nil {
		return "", false
	}
	return output.Lookup(sums, filepath.Base(image))
}

// firstDifference compares image and device block by block, for the error
// message; it reads the device with O_DIRECT off (its buffers are not aligned).
func firstDifference(img, f *os.File, size int64, bs int) (int64, error) {
	if err := setDirect(f, false); err != nil {
		return -1, err
	}
	dropCache(f)
	a, b := make([]byte, bs), make([]byte, bs)
	for off := int64(0); off < size; off += int64(bs) {
		n := int(min(int64(bs), size-off))
		if _, err := img.ReadAt(a[:n], off); err != nil {
			return -1, err
		}
		if _, err := f.ReadAt(b[:n], off); err != nil {
			return -1, err
		}
		if !bytes.Equal(a[:n], b[:n]) {
			for i := range n {
				if a[i] != b[i] {
					return off + int64(i), nil
				}
			}
		}
	}
	return -1, nil
}
