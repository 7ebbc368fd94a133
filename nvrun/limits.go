package nvrun

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// ErrTooLarge is an installer whose declared sizes go past a Limits bound.
var ErrTooLarge = errors.New("over a size limit")

// Limits bound what one installer can make Unpack allocate, decompress and
// write. Every length the file declares (a tar entry's size, the .manifest's,
// a decompressor's window) is checked against them, and against the file's own
// size, before anything is allocated or written: a small hostile .run cannot
// stage gigabytes. A zero field takes DefaultLimits' value.
//
// The defaults leave several-fold room over NVIDIA's installers (580.142's is
// 398,046,590 bytes, its lock says; each file the image takes is some tens of
// MB; xz's largest preset dictionary is 64 MiB) and still refuse a small file
// that declares gigabytes: a tar entry may declare at most Ratio times the
// compressed payload's size.
type Limits struct {
	File    int64 // one staged file's declared size (and .manifest's, below maxManifest)
	Taken   int64 // every staged file together: what lands in Scratch
	Payload int64 // the decompressed payload (the whole tar stream), taken or not
	// Ratio bounds the decompressed payload per byte of compressed payload;
	// RatioSlack is added, so tiny test archives with tar's 512-byte blocks pass.
	Ratio      int64
	RatioSlack int64
	Window     int64 // a decompressor's declared window or dictionary (xz, zstd)
}

// DefaultLimits are the bounds Unpack uses where Options.Limits leaves a zero.
func DefaultLimits() Limits {
	return Limits{File: 512 << 20, Taken: 2 << 30, Payload: 8 << 30, Ratio: 32, RatioSlack: 1 << 20, Window: 256 << 20}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int64 }{{&l.File, &d.File}, {&l.Taken, &d.Taken}, {&l.Payload, &d.Payload}, {&l.Ratio, &d.Ratio}, {&l.RatioSlack, &d.RatioSlack}, {&l.Window, &d.Window}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	return l
}

// payloadBound is how many decompressed bytes a compressed payload of n bytes
// may expand to.
func (l Limits) payloadBound(n int64) int64 {
	if n > (l.Payload-l.RatioSlack)/l.Ratio {
		return l.Payload
	}
	return min(l.Payload, n*l.Ratio+l.RatioSlack)
}

// budget counts the decompressed payload as the tar reader consumes it and
// refuses to go past bound; the staged files' declared sizes are checked
// against it (and the caps) before their files are created.
type budget struct {
	r       io.Reader
	lim     Limits
	bound   int64 // payloadBound of the compressed payload's size
	payload int64 // compressed payload bytes, for messages
	read    int64 // decompressed bytes so far
	taken   int64 // declared bytes of staged files so far
}

func (b *budget) Read(p []byte) (int, error) {
	if b.read >= b.bound {
		return 0, fmt.Errorf("%w: the payload decompresses past %d bytes (%s for a %d-byte compressed payload)", ErrTooLarge, b.bound, b.why(), b.payload)
	}
	if rest := b.bound - b.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		err = fmt.Errorf("%w: the zstd payload declares a window past %d bytes: %v", ErrTooLarge, b.lim.Window, err)
	}
	return n, err
}

func (b *budget) why() string {
	if b.bound == b.lim.Payload {
		return fmt.Sprintf("the cap of %d", b.lim.Payload)
	}
	return fmt.Sprintf("%dx plus %d", b.lim.Ratio, b.lim.RatioSlack)
}

// admit checks a tar entry's declared size before anything is written for it.
func (b *budget) admit(name string, size, capFile int64, stage bool) error {
	switch {
	case size < 0:
		return fmt.Errorf("%w: %s declares %d bytes", ErrCorrupt, name, size)
	case size > capFile:
		return fmt.Errorf("%w: %s declares %d bytes, more than the %d one file may have", ErrTooLarge, name, size, capFile)
	case size > b.bound-b.read:
		return fmt.Errorf("%w: %s declares %d bytes, more than the %d-byte compressed payload may decompress to (%s; %d already read)", ErrTooLarge, name, size, b.payload, b.why(), b.read)
	case stage && b.taken+size > b.lim.Taken:
		return fmt.Errorf("%w: %s declares %d bytes, past the %d all staged files together may have (%d staged)", ErrTooLarge, name, size, b.lim.Taken, b.taken)
	}
	if stage {
		b.taken += size
	}
	return nil
}

// xzDict reads the dictionary size the first block of an xz stream declares
// (xz-file-format 1.2.0, 3.1 block header, 5.3.1 LZMA2 properties), which the
// decoder would allocate as it opens. ok is false when the bytes do not hold
// a block header with an LZMA2 filter; the decoder then reports the error.
func xzDict(b []byte) (dict int64, ok bool) {
	if len(b) < 13 || b[12] == 0 { // 12-byte stream header; 0 = the index: no block
		return 0, false
	}
	end := 12 + (int(b[12])+1)*4
	if end > len(b) {
		return 0, false
	}
	h := b[13:end]
	flags := h[0]
	h = h[1:]
	vli := func() (uint64, bool) {
		var v uint64
		for i := 0; i < 9 && i < len(h); i++ {
			v |= uint64(h[i]&0x7F) << (7 * i)
			if h[i]&0x80 == 0 {
				h = h[i+1:]
				return v, true
			}
		}
		return 0, false
	}
	for _, present := range []bool{flags&0x40 != 0, flags&0x80 != 0} { // compressed, uncompressed size
		if present {
			if _, ok := vli(); !ok {
				return 0, false
			}
		}
	}
	for range int(flags&3) + 1 {
		id, ok1 := vli()
		n, ok2 := vli()
		if !ok1 || !ok2 || n > uint64(len(h)) {
			return 0, false
		}
		props := h[:n]
		h = h[n:]
		if id == 0x21 && n == 1 {
			d := props[0] & 0x3F
			if d > 40 {
				return 0, false
			}
			if d == 40 {
				return 1<<32 - 1, true
			}
			return int64(2|d&1) << (d/2 + 11), true
		}
	}
	return 0, false
}
