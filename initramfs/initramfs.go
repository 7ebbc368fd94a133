// Package initramfs turns a rootfs layer's directory tree into an initrd segment
// the kernel unpacks: a newc cpio archive compressed with zstd.
//
// The output is a pure function of the tree's paths, file types, contents,
// owner-exec bits and symlink targets, plus the epoch. Everything a build
// machine can vary without meaning to — umask, the building user, file
// mtimes, inode numbers, hardlinks, directory read order, GOMAXPROCS — is
// normalized away, so two machines building the same tree produce the same
// bytes.
package initramfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"
)

// ErrUnsupportedType is returned (wrapped, naming the path) for fifos,
// sockets and device nodes: devtmpfs provides device nodes at boot, and the
// others have no business in an image.
var ErrUnsupportedType = errors.New("unsupported file type")

// Stats counts what Pack wrote.
type Stats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64 // size of the uncompressed cpio stream
}

// Limits shared by Pack and List, so List can read everything Pack writes
// and Pack refuses what the kernel would refuse.
const (
	// maxName is PATH_MAX including the terminating NUL: the kernel's
	// initramfs unpacker rejects longer names.
	maxName = 4096
	// maxFileSize is what newc's 8 hex digits can hold.
	maxFileSize = math.MaxUint32
)

// Zstd settings. They are all pinned explicitly so that a change of the
// library's defaults shows up as a reviewed diff here, not as silently
// different image bytes.
const (
	// zstdLevel is the library's equivalent of `zstd -3`.
	zstdLevel = zstd.SpeedDefault
	// zstdWindow is 8 MiB: the library's own default for SpeedDefault, well
	// under the kernel's 128 MiB limit, and small enough that the boot-time
	// decompressor's allocation (about the window size) is harmless.
	// It also fixes the parallel job size (4 windows = 32 MiB), which is what
	// makes the output independent of the worker count (see zstdWorkers).
	zstdWindow = 8 << 20
	// zstdCRC appends the xxhash64 content checksum. The kernel's unzstd
	// verifies it (lib/decompress_unzstd.c maps ZSTD_error_checksum_wrong),
	// and the kernel's own `zstd` CLI-built initramfs images carry it,
	// so a corrupted initrd fails loudly at boot instead of unpacking junk.
	zstdCRC = true
)

// zstdWorkers picks how many goroutines compress. With WithConcurrentBlocks
// the library cuts the stream into fixed 32 MiB jobs (4 windows) with a fixed
// overlap, so every worker count >= 2 yields the same bytes; a count of 1
// falls back to the serial encoder, whose bytes differ. So we never go below
// 2, and cap at 4 to bound memory (each job in flight holds ~33 MiB of input
// plus its output). TestWorkerCountIndependence guards this property.
func zstdWorkers() int {
	return min(max(runtime.GOMAXPROCS(0), 2), 4)
}

// Pack writes root (a directory) as a zstd-compressed newc cpio to w.
//
// Entries come in path order compared component by component, so every
// directory directly precedes its contents; the first entry is root itself,
// named ".", because a tmpfs rootfs starts out mode 1777 and the entry pins
// it to 0755. On error, w may hold a partial stream; write to a temporary
// file and rename on success.
func Pack(ctx context.Context, root string, epoch int64, w io.Writer) (Stats, error) {
	return pack(ctx, root, epoch, w, zstdWorkers())
}

func pack(ctx context.Context, root string, epoch int64, w io.Writer, workers int) (Stats, error) {
	if epoch < 0 || epoch > math.MaxUint32 {
		return Stats{}, fmt.Errorf("initramfs: epoch %d does not fit newc's 32-bit mtime", epoch)
	}
	// Walk first, write second: a fifo deep in the tree should fail the
	// stage before any bytes reach w.
	entries, err := walk(ctx, root)
	if err != nil {
		return Stats{}, err
	}
	enc, err := zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstdLevel),
		zstd.WithWindowSize(zstdWindow),
		zstd.WithEncoderCRC(zstdCRC),
		zstd.WithEncoderConcurrency(workers),
		zstd.WithConcurrentBlocks(true),
	)
	if err != nil {
		return Stats{}, fmt.Errorf("initramfs: zstd encoder: %w", err)
	}
	cw := &cpioWriter{w: enc, buf: make([]byte, 1<<20)}
	st, err := cw.writeAll(ctx, root, uint32(epoch), entries)
	if cerr := enc.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("initramfs: finishing zstd stream: %w", cerr)
	}
	return st, err
}

// entry is one walked path, described by what survives normalization.
type entry struct {
	rel    string // slash-separated, relative to root; "." for root
	kind   fs.FileMode
	exec   bool   // regular file with the owner-exec bit
	size   int64  // regular files: size at walk time
	target string // symlinks
}

// walk lists root in archive order. Recursing over each directory's sorted
// names yields component-wise order ("a", "a/c", "a-b"), which sorting full
// paths byte-wise would not ("a-b" < "a/c").
func walk(ctx context.Context, root string) ([]entry, error) {
	fi, err := os.Lstat(root)
	if err != nil {
		return nil, fmt.Errorf("initramfs: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("initramfs: root %s is not a directory", root)
	}
	entries := []entry{{rel: ".", kind: fs.ModeDir}}
	var rec func(dir, rel string) error
	rec = func(dir, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// os.ReadDir sorts by name byte-wise, independent of the order the
		// filesystem returns them in.
		des, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
		for _, de := range des {
			name := de.Name()
			full := filepath.Join(dir, name)
			r := name
			if rel != "" {
				r = rel + "/" + name
			}
			if len(r)+1 > maxName {
				return fmt.Errorf("initramfs: %s: path longer than %d bytes", r, maxName-1)
			}
			// Lstat, not the DirEntry's type: we need size and permission
			// bits, and a symlink must never be followed.
			fi, err := os.Lstat(full)
			if err != nil {
				return fmt.Errorf("initramfs: %w", err)
			}
			e := entry{rel: r, kind: fi.Mode().Type()}
			switch e.kind {
			case 0:
				if fi.Size() > maxFileSize {
					return fmt.Errorf("initramfs: %s: %d bytes exceeds newc's 4 GiB limit", r, fi.Size())
				}
				e.size = fi.Size()
				e.exec = fi.Mode().Perm()&0o100 != 0
				entries = append(entries, e)
			case fs.ModeSymlink:
				t, err := os.Readlink(full)
				if err != nil {
					return fmt.Errorf("initramfs: %w", err)
				}
				if len(t) >= maxName {
					return fmt.Errorf("initramfs: %s: symlink target longer than %d bytes", r, maxName-1)
				}
				e.target = t
				entries = append(entries, e)
			case fs.ModeDir:
				entries = append(entries, e)
				if err := rec(full, r); err != nil {
					return err
				}
			default:
				return fmt.Errorf("initramfs: %s: %w (%v)", r, ErrUnsupportedType, fi.Mode().Type())
			}
		}
		return nil
	}
	if err := rec(root, ""); err != nil {
		return nil, err
	}
	return entries, nil
}

// Normalized modes: only the file type and owner-exec bit of the tree
// survive, so the builder's umask (and any setuid/sticky bits) cannot leak.
const (
	modeDir     = 0o040755
	modeExec    = 0o100755
	modeFile    = 0o100644
	modeSymlink = 0o120777
)

const (
	newcMagic   = "070701"
	newcHdrLen  = 110
	trailerName = "TRAILER!!!"
)

// cpioWriter frames the walked entries as newc with cavaliergopher/cpio's
// writer and counts the bytes written. The normalisation (order, modes,
// inode numbers, nlink, mtime, zero uid/gid/devices) is ours: every header
// field is set here, none taken from the build machine. Its headers spell
// hex in upper case, which the kernel's unpacker (simple_strntoul, base 16)
// and our List read alike.
type cpioWriter struct {
	w   io.Writer
	n   int64
	cw  *cpio.Writer
	buf []byte // file copy buffer, reused across files
}

func (c *cpioWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *cpioWriter) writeHeader(h *cpio.Header) error {
	if c.cw == nil {
		c.cw = cpio.NewWriter(c)
	}
	return c.cw.WriteHeader(h)
}

func (c *cpioWriter) writeAll(ctx context.Context, root string, mtime uint32, entries []entry) (Stats, error) {
	var st Stats
	mt := time.Unix(int64(mtime), 0)
	for i, e := range entries {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		// Inodes renumbered in archive order so the build machine's inode
		// numbers never show; 1..N leaves 0 for the trailer, as GNU cpio does.
		h := &cpio.Header{Inode: int64(i + 1), ModTime: mt, Links: 1, Name: e.rel}
		var err error
		switch e.kind {
		case fs.ModeDir:
			h.Mode, h.Links = modeDir, 2
			err = c.writeHeader(h)
			st.Dirs++
		case fs.ModeSymlink:
			h.Mode, h.Size = modeSymlink, int64(len(e.target))
			if err = c.writeHeader(h); err == nil {
				_, err = c.cw.Write([]byte(e.target))
			}
			st.Symlinks++
		default:
			h.Mode, h.Size = modeFile, e.size
			if e.exec {
				h.Mode = modeExec
			}
			if err = c.writeHeader(h); err == nil {
				err = c.copyFile(ctx, filepath.Join(root, filepath.FromSlash(e.rel)), e)
			}
			st.Files++
		}
		if err != nil {
			st.Bytes = c.n
			return st, err
		}
	}
	if c.cw == nil {
		c.cw = cpio.NewWriter(c)
	}
	// Close pads the last entry and writes the TRAILER!!! entry (nlink 1,
	// every other field zero).
	err := c.cw.Close()
	st.Bytes = c.n
	return st, err
}

// copyFile streams one regular file's content. The header already promised
// e.size bytes, so a file that changed since the walk is an error rather
// than a corrupt archive.
func (c *cpioWriter) copyFile(ctx context.Context, path string, e entry) error {
	// O_NOFOLLOW: the walk saw a regular file; if it has since been swapped
	// for a symlink we must not pack whatever it points to. O_NONBLOCK keeps
	// a swapped-in fifo from hanging the open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != e.size {
		return fmt.Errorf("initramfs: %s changed while packing", e.rel)
	}
	// A plain Read/Write loop on purpose: the encoder's ReadFrom (which
	// io.Copy would pick) first flushes its partly filled block or job, so
	// the output would depend on where file boundaries fall. Write never
	// does; its output depends on the byte stream alone.
	left := e.size
	for left > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(c.buf[:min(int64(len(c.buf)), left)])
		if n > 0 {
			if _, werr := c.cw.Write(c.buf[:n]); werr != nil {
				return fmt.Errorf("initramfs: %s: %w", e.rel, werr)
			}
			left -= int64(n)
		}
		if err == io.EOF {
			return fmt.Errorf("initramfs: %s shrank while packing", e.rel)
		}
		if err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
	}
	if n, _ := f.Read(c.buf[:1]); n > 0 {
		return fmt.Errorf("initramfs: %s grew while packing", e.rel)
	}
	return nil // the writer pads before the next header
}
