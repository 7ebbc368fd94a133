package initramfs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frames passes on the zstd frames of an initrd, dropping the NUL bytes
// between and after them, as the kernel's unpacker skips them (init/initramfs.c,
// unpack_to_rootfs: `if (!*buf) { buf++; len--; this_header++; continue; }`,
// lines 530-535 of linux-source-6.1). The image stage pads the initrd to whole
// MiB that way; a zstd decoder given the padding reads it as a bad magic.
// Skippable frames are dropped too. Anything else where a frame must start is
// an error naming its offset.
type frames struct {
	r    *bufio.Reader
	off  int64 // of the next byte of r, for errors
	left int64 // bytes of the current piece still to pass on
	next func() error
}

func newFrames(r *bufio.Reader) *frames {
	f := &frames{r: r}
	f.next = f.frameStart
	return f
}

func (f *frames) Read(p []byte) (int, error) {
	for f.left == 0 {
		if err := f.next(); err != nil {
			return 0, err
		}
	}
	n, err := f.r.Read(p[:min(int64(len(p)), f.left)])
	f.left -= int64(n)
	f.off += int64(n)
	if errors.Is(err, io.EOF) && f.left > 0 {
		err = f.truncated()
	}
	return n, err
}

func (f *frames) truncated() error {
	return fmt.Errorf("initramfs: zstd frame truncated at offset %d", f.off)
}

// frameStart skips NULs, then takes a frame header (or drops a skippable frame).
func (f *frames) frameStart() error {
	for {
		b, err := f.r.ReadByte()
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if err != nil {
			return err
		}
		if b != 0 {
			if err := f.r.UnreadByte(); err != nil {
				return err
			}
			break
		}
		f.off++
	}
	h, err := f.r.Peek(5)
	if len(h) >= 4 && h[0]&0xf0 == 0x50 && string(h[1:4]) == "\x2a\x4d\x18" { // skippable: 0x184D2A5?
		return f.skippable()
	}
	if len(h) < 5 || string(h[:4]) != zstdMagic {
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return fmt.Errorf("initramfs: no zstd frame at offset %d (%q): only NUL padding may follow a frame", f.off, h)
	}
	// RFC 8878 §3.1.1.1: the frame header's length from its descriptor.
	fhd := h[4]
	if fhd&0x08 != 0 {
		return fmt.Errorf("initramfs: zstd frame at offset %d: reserved header bit set", f.off)
	}
	single := fhd&0x20 != 0
	n := int64(5)
	if !single {
		n++ // window descriptor
	}
	n += []int64{0, 1, 2, 4}[fhd&3]
	switch fcs := fhd >> 6; {
	case fcs == 0 && single:
		n++
	case fcs > 0:
		n += []int64{0, 2, 4, 8}[fcs]
	}
	checksum := fhd&0x04 != 0
	f.left = n
	f.next = func() error { return f.block(checksum) }
	return nil
}

// block takes one block of the frame, header and content (RFC 8878 §3.1.1.2).
func (f *frames) block(checksum bool) error {
	h, err := f.r.Peek(3)
	if len(h) < 3 {
		if err == nil || errors.Is(err, io.EOF) {
			err = f.truncated()
		}
		return err
	}
	v := uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16
	size := int64(v >> 3)
	switch (v >> 1) & 3 {
	case 1: // RLE: one byte repeated
		size = 1
	case 3:
		return fmt.Errorf("initramfs: zstd block at offset %d: reserved block type", f.off)
	}
	f.left = 3 + size
	if v&1 != 0 { // the frame's last block
		f.next = f.frameStart
		if checksum {
			f.next = func() error { f.left, f.next = 4, f.frameStart; return nil }
		}
	}
	return nil
}

// skippable drops a skippable frame (RFC 8878 §3.1.2): magic, 4-byte size, data.
func (f *frames) skippable() error {
	h, err := f.r.Peek(8)
	if len(h) < 8 {
		if err == nil || errors.Is(err, io.EOF) {
			err = f.truncated()
		}
		return err
	}
	size := 8 + int64(binary.LittleEndian.Uint32(h[4:]))
	n, err := f.r.Discard(int(min(size, 1<<40)))
	f.off += int64(n)
	if int64(n) < size {
		if err == nil || errors.Is(err, io.EOF) {
			err = f.truncated()
		}
		return err
	}
	return nil
}
