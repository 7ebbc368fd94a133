package initramfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// zstdMagic starts every zstd frame (RFC 8878 §3.1.1).
const zstdMagic = "\x28\xb5\x2f\xfd"

// maxDecoderWindow bounds what a zstd stream handed to List may make us
// allocate. Our own images use 8 MiB; 32 MiB covers `zstd -19` and below
// (the kernel's 128 MiB would only matter for --ultra images).
const maxDecoderWindow = 32 << 20

// maxListing bounds the total size of List's result, since a small zstd
// stream can expand into an enormous number of tiny entries.
const maxListing = 64 << 20

// NewReader returns r decompressed if it starts with the zstd magic (its
// frames in turn, NUL padding between and after them skipped), or r itself
// (buffered) otherwise. Close releases the decoder.
func NewReader(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("initramfs: reading magic: %w", err)
	}
	if string(magic) != zstdMagic {
		return io.NopCloser(br), nil
	}
	// One decoder goroutine: List reads sequentially anyway, and no
	// background goroutines means nothing to leak if the caller forgets
	// Close.
	// Frame by frame, so NUL padding between and after frames is skipped
	// as the kernel skips it (frames).
	dec, err := zstd.NewReader(newFrames(br),
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxDecoderWindow),
		zstd.WithDecoderLowmem(true),
	)
	if err != nil {
		return nil, fmt.Errorf("initramfs: zstd decoder: %w", err)
	}
	return decCloser{dec}, nil
}

type decCloser struct{ *zstd.Decoder }

func (d decCloser) Close() error { d.Decoder.Close(); return nil }

// List reads a (possibly zstd-compressed) newc cpio and returns one line per
// entry, in archive order:
//
//	<mode octal> <uid>/<gid> <size> <path>[ -> <target>]
//
// Paths and targets containing control characters, backslashes, double
// quotes or invalid UTF-8 are printed Go-quoted, so each entry stays one
// unambiguous line. Concatenated archives are read in turn, as the kernel unpacks them.
func List(r io.Reader) ([]string, error) {
	rc, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var lines []string
	total := 0
	err = readArchive(rc, func(h rawHeader) error {
		line := fmt.Sprintf("%06o %d/%d %d %s", h.mode, h.uid, h.gid, h.size, listPath(h.name))
		if h.mode&0o170000 == 0o120000 {
			line += " -> " + listPath(h.target)
		}
		total += len(line)
		if total > maxListing {
			return fmt.Errorf("initramfs: listing exceeds %d bytes", maxListing)
		}
		lines = append(lines, line)
		return nil
	})
	return lines, err
}

func listPath(s string) string {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || r == '"' || r == 0xfffd {
			return strconv.Quote(s)
		}
	}
	return s
}

// ReadFiles reads a (possibly zstd-compressed) newc cpio and calls fn with the
// path and contents of each regular file for which want(path) is true, in
// archive order. Only those files are held in memory, one at a time, and no
// more of each than the archive really holds.
func ReadFiles(r io.Reader, want func(path string) bool, fn func(path string, data []byte) error) error {
	rc, err := NewReader(r)
	if err != nil {
		return err
	}
	defer rc.Close()
	return readArchiveData(rc, want, func(h rawHeader) error {
		if h.data == nil {
			return nil
		}
		return fn(h.name, h.data)
	})
}

// rawHeader is one parsed newc entry, as stored.
type rawHeader struct {
	ino, mode, uid, gid, nlink, mtime, size uint32
	name, target                            string
	data                                    []byte // a regular file's contents, when asked for
}

// readArchive calls fn for each entry of a newc stream up to the trailer.
// File data is skipped, never buffered, so memory stays bounded whatever
// sizes the headers claim.
func readArchive(r io.Reader, fn func(rawHeader) error) error {
	return readArchiveData(r, nil, fn)
}

// readArchiveData is readArchive that also reads the data of the regular files
// want accepts (into rawHeader.data, non-nil).
//
// An initrd may be several archives back to back (peerboot's is one per rootfs
// layer): after a trailer, NUL padding is skipped and another archive read, as
// the kernel's unpacker does; anything else after a trailer ends the listing.
func readArchiveData(rd io.Reader, want func(string) bool, fn func(rawHeader) error) error {
	r, ok := rd.(*bufio.Reader)
	if !ok {
		r = bufio.NewReaderSize(rd, 64<<10)
	}
	var buf [newcHdrLen]byte
	var off int64 // for error messages
	for {
		if _, err := io.ReadFull(r, buf[:]); err != nil {
			return fmt.Errorf("initramfs: cpio header at offset %d: %w", off, noEOF(err))
		}
		if string(buf[:6]) != newcMagic {
			return fmt.Errorf("initramfs: bad cpio magic %q at offset %d (want newc %s)", buf[:6], off, newcMagic)
		}
		var f [13]uint32
		for i := range f {
			v, err := strconv.ParseUint(string(buf[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				return fmt.Errorf("initramfs: cpio header at offset %d, field %d: %w", off, i, err)
			}
			f[i] = uint32(v)
		}
		h := rawHeader{ino: f[0], mode: f[1], uid: f[2], gid: f[3], nlink: f[4], mtime: f[5], size: f[6]}
		namesize := int64(f[11])
		if namesize < 1 || namesize > maxName {
			return fmt.Errorf("initramfs: cpio entry at offset %d: name size %d out of range 1..%d", off, namesize, maxName)
		}
		nameLen := namesize + int64(pad(newcHdrLen+namesize))
		name := make([]byte, nameLen)
		if _, err := io.ReadFull(r, name); err != nil {
			return fmt.Errorf("initramfs: cpio name at offset %d: %w", off, noEOF(err))
		}
		name = name[:namesize]
		if name[namesize-1] != 0 || bytes.IndexByte(name[:namesize-1], 0) >= 0 {
			return fmt.Errorf("initramfs: cpio entry at offset %d: name is not a single NUL-terminated string", off)
		}
		h.name = string(name[:namesize-1])
		off += newcHdrLen + nameLen
		if h.name == trailerName {
			more, n, err := nextArchive(r)
			if err != nil || !more {
				return err
			}
			off += n
			continue
		}
		dataLen := int64(h.size) + int64(pad(int64(h.size)))
		if h.mode&0o170000 == 0o120000 {
			if h.size >= maxName {
				return fmt.Errorf("initramfs: %s: symlink target of %d bytes exceeds %d", h.name, h.size, maxName-1)
			}
			t := make([]byte, dataLen)
			if _, err := io.ReadFull(r, t); err != nil {
				return fmt.Errorf("initramfs: %s: symlink target: %w", h.name, noEOF(err))
			}
			h.target = string(t[:h.size])
		} else if h.mode&0o170000 == 0o100000 && want != nil && want(h.name) {
			// ReadAll grows with what arrives, not with what the header claims.
			b, err := io.ReadAll(io.LimitReader(r, dataLen))
			if err != nil {
				return fmt.Errorf("initramfs: %s: data: %w", h.name, err)
			}
			if int64(len(b)) != dataLen {
				return fmt.Errorf("initramfs: %s: data (%d of %d bytes): %w", h.name, len(b), dataLen, io.ErrUnexpectedEOF)
			}
			h.data = b[:h.size:h.size]
		} else if n, err := io.CopyN(io.Discard, r, dataLen); err != nil {
			return fmt.Errorf("initramfs: %s: data (%d of %d bytes): %w", h.name, n, dataLen, noEOF(err))
		}
		off += dataLen
		if err := fn(h); err != nil {
			return err
		}
	}
}

// nextArchive skips the NUL padding after a trailer and says whether another
// archive follows, and how many bytes it skipped.
func nextArchive(r *bufio.Reader) (bool, int64, error) {
	var n int64
	for {
		b, err := r.Peek(1)
		if errors.Is(err, io.EOF) {
			return false, n, nil
		}
		if err != nil {
			return false, n, fmt.Errorf("initramfs: after a trailer: %w", err)
		}
		if b[0] != 0 {
			break
		}
		r.ReadByte()
		n++
	}
	magic, err := r.Peek(len(newcMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return false, n, fmt.Errorf("initramfs: after a trailer: %w", err)
	}
	return string(magic) == newcMagic, n, nil
}

// noEOF turns a bare EOF into ErrUnexpectedEOF: every EOF before the
// trailer means a truncated archive.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// pad returns how many zero bytes bring n up to a multiple of 4.
func pad(n int64) int { return int(-n & 3) }
