package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"unicode/utf16"
)

// GPT is a GUID partition table read back from a disk (512-byte sectors, the
// only size WriteDisk makes). It is what `flash --grow-reports` edits and what
// `reports` uses to find the PEERBOOT partition.
type GPT struct {
	DiskGUID   [16]byte // RFC 4122 byte order
	Partitions []GPTPartition
	// SizeLBA is the disk size the table was written for: its backup header
	// sits at SizeLBA-1.
	SizeLBA uint64
	entries []byte // the raw entry array, edited in place
}

// GPTPartition is one used entry of the table.
type GPTPartition struct {
	Index    int      // position in the entry array
	Type     [16]byte // RFC 4122 byte order
	GUID     [16]byte
	FirstLBA uint64
	LastLBA  uint64 // inclusive
	Name     string
}

// Offset and Size are the partition's byte range on the disk.
func (p GPTPartition) Offset() int64 { return int64(p.FirstLBA) * lbaSize }
func (p GPTPartition) Size() int64   { return int64(p.LastLBA-p.FirstLBA+1) * lbaSize }

// ErrNoGPT means the disk has no valid primary GPT header.
var ErrNoGPT = errors.New("no GPT partition table")

// ReadGPT reads and checks the primary table: signature, header and entry CRCs,
// and that every partition lies inside the usable area.
func ReadGPT(r io.ReaderAt) (*GPT, error) {
	h := make([]byte, lbaSize)
	if _, err := r.ReadAt(h, lbaSize); err != nil {
		return nil, fmt.Errorf("reading the GPT header: %w", err)
	}
	if string(h[0:8]) != "EFI PART" {
		return nil, ErrNoGPT
	}
	hsize := binary.LittleEndian.Uint32(h[12:])
	if hsize < gptHeaderSize || hsize > lbaSize {
		return nil, fmt.Errorf("%w: header size %d", ErrNoGPT, hsize)
	}
	want := binary.LittleEndian.Uint32(h[16:])
	hc := append([]byte(nil), h[:hsize]...)
	binary.LittleEndian.PutUint32(hc[16:], 0)
	if crc32.ChecksumIEEE(hc) != want {
		return nil, fmt.Errorf("%w: header CRC mismatch", ErrNoGPT)
	}
	alt := binary.LittleEndian.Uint64(h[32:])
	firstUsable := binary.LittleEndian.Uint64(h[40:])
	lastUsable := binary.LittleEndian.Uint64(h[48:])
	entriesLBA := binary.LittleEndian.Uint64(h[72:])
	n := binary.LittleEndian.Uint32(h[80:])
	esize := binary.LittleEndian.Uint32(h[84:])
	if esize != gptEntrySize || n == 0 || n > 1024 || entriesLBA < 2 {
		return nil, fmt.Errorf("%w: %d entries of %d bytes at LBA %d", ErrNoGPT, n, esize, entriesLBA)
	}
	entries := make([]byte, int(n)*gptEntrySize)
	if _, err := r.ReadAt(entries, int64(entriesLBA)*lbaSize); err != nil {
		return nil, fmt.Errorf("reading the GPT entries: %w", err)
	}
	if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(h[88:]) {
		return nil, fmt.Errorf("%w: entry array CRC mismatch", ErrNoGPT)
	}
	g := &GPT{SizeLBA: alt + 1, entries: entries}
	copy(g.DiskGUID[:], h[56:72])
	g.DiskGUID = gptBytes(g.DiskGUID)
	for i := 0; i < int(n); i++ {
		e := entries[i*gptEntrySize:][:gptEntrySize]
		var p GPTPartition
		copy(p.Type[:], e[0:16])
		if p.Type == ([16]byte{}) {
			continue
		}
		p.Index = i
		p.Type = gptBytes(p.Type)
		copy(p.GUID[:], e[16:32])
		p.GUID = gptBytes(p.GUID)
		p.FirstLBA = binary.LittleEndian.Uint64(e[32:])
		p.LastLBA = binary.LittleEndian.Uint64(e[40:])
		u := make([]uint16, 36)
		for j := range u {
			u[j] = binary.LittleEndian.Uint16(e[56+2*j:])
		}
		for j, c := range u {
			if c == 0 {
				u = u[:j]
				break
			}
		}
		p.Name = string(utf16.Decode(u))
		if p.FirstLBA < firstUsable || p.LastLBA > lastUsable || p.LastLBA < p.FirstLBA {
			return nil, fmt.Errorf("GPT partition %d (%s) spans LBA %d-%d, outside the usable %d-%d", i+1, p.Name, p.FirstLBA, p.LastLBA, firstUsable, lastUsable)
		}
		g.Partitions = append(g.Partitions, p)
	}
	return g, nil
}

// Find returns the first partition whose GPT name is name (case-insensitive).
func (g *GPT) Find(name string) (GPTPartition, bool) {
	for _, p := range g.Partitions {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return GPTPartition{}, false
}

// LastUsableLBA is the last LBA a partition may use on a disk of sizeLBA sectors.
func LastUsableLBA(sizeLBA uint64) uint64 { return sizeLBA - 1 - gptEntryLBAs - 1 }

// gptHeader encodes the primary (my = 1) or backup GPT header of a disk of sizeLBA
// sectors whose entry array is at entriesLBA; one encoder for writing a new disk and
// for rewriting the table of a grown one.
func gptHeader(diskGUID [16]byte, sizeLBA, my, alt, entriesLBA uint64, entriesCRC uint32) []byte {
	h := make([]byte, lbaSize)
	copy(h[0:8], "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x00010000) // revision 1.0
	binary.LittleEndian.PutUint32(h[12:], gptHeaderSize)
	binary.LittleEndian.PutUint64(h[24:], my)
	binary.LittleEndian.PutUint64(h[32:], alt)
	binary.LittleEndian.PutUint64(h[40:], 2+gptEntryLBAs)         // first usable LBA
	binary.LittleEndian.PutUint64(h[48:], LastUsableLBA(sizeLBA)) // last usable LBA
	dg := gptBytes(diskGUID)
	copy(h[56:72], dg[:])
	binary.LittleEndian.PutUint64(h[72:], entriesLBA)
	binary.LittleEndian.PutUint32(h[80:], gptEntries)
	binary.LittleEndian.PutUint32(h[84:], gptEntrySize)
	binary.LittleEndian.PutUint32(h[88:], entriesCRC)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:gptHeaderSize]))
	return h
}

// SetLastLBA moves the end of the partition at index i.
func (g *GPT) SetLastLBA(i int, last uint64) error {
	for k := range g.Partitions {
		p := &g.Partitions[k]
		if p.Index != i {
			continue
		}
		if last < p.FirstLBA {
			return fmt.Errorf("partition %d: end LBA %d before its start %d", i+1, last, p.FirstLBA)
		}
		for _, o := range g.Partitions {
			if o.Index != i && o.FirstLBA > p.FirstLBA && o.FirstLBA <= last {
				return fmt.Errorf("partition %d would overlap partition %d (%s)", i+1, o.Index+1, o.Name)
			}
		}
		p.LastLBA = last
		binary.LittleEndian.PutUint64(g.entries[i*gptEntrySize+40:], last)
		return nil
	}
	return fmt.Errorf("no partition %d", i+1)
}

// Write writes the protective MBR, the primary table and the backup table for
// a disk of sizeLBA sectors (the backup at its end), e.g. after the image was
// copied to a larger device. The caller erases the old backup if it wants to.
func (g *GPT) Write(w io.WriterAt, sizeLBA uint64) error {
	if sizeLBA < 2*(gptEntryLBAs+1)+2 {
		return fmt.Errorf("disk of %d sectors is too small for a GPT", sizeLBA)
	}
	if len(g.entries) != gptEntries*gptEntrySize {
		return fmt.Errorf("GPT with %d entry bytes: only %d entries of %d bytes are supported", len(g.entries), gptEntries, gptEntrySize)
	}
	last := LastUsableLBA(sizeLBA)
	for _, p := range g.Partitions {
		if p.LastLBA > last {
			return fmt.Errorf("partition %d (%s) ends at LBA %d, past the last usable LBA %d", p.Index+1, p.Name, p.LastLBA, last)
		}
	}
	if err := writeTable(w, g.DiskGUID, g.entries, sizeLBA); err != nil {
		return err
	}
	g.SizeLBA = sizeLBA
	return nil
}

// writeTable writes the protective MBR and both GPT copies of a disk of sizeLBA
// sectors: the one GPT writer, for a new disk (WriteDisk) and for a grown one
// (GPT.Write). Backup first: if the primary write is cut short, the old
// primary still describes partitions that are all there.
func writeTable(w io.WriterAt, diskGUID [16]byte, entries []byte, sizeLBA uint64) error {
	entriesCRC := crc32.ChecksumIEEE(entries)
	lastLBA := sizeLBA - 1
	backupEntries := lastLBA - gptEntryLBAs
	hdr := func(my, alt, entriesLBA uint64) []byte {
		return gptHeader(diskGUID, sizeLBA, my, alt, entriesLBA, entriesCRC)
	}
	writes := []struct {
		what string
		data []byte
		lba  uint64
	}{
		{"backup GPT entries", entries, backupEntries},
		{"backup GPT header", hdr(lastLBA, 1, backupEntries), lastLBA},
		{"protective MBR", protectiveMBR(sizeLBA), 0},
		{"primary GPT entries", entries, 2},
		{"primary GPT header", hdr(1, lastLBA, 2), 1},
	}
	for _, wr := range writes {
		if _, err := w.WriteAt(wr.data, int64(wr.lba)*lbaSize); err != nil {
			return fmt.Errorf("writing the %s: %w", wr.what, err)
		}
	}
	return nil
}
