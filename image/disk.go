package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf16"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image/fat"
)

// Disk describes the raw GPT disk WriteDisk produces.
type Disk struct {
	// Size in bytes, a multiple of 512; 0 means as small as the partitions
	// allow (plus 1 MiB at the end for the backup GPT, keeping it aligned).
	Size     int64
	DiskGUID [16]byte  // RFC 4122 byte order, e.g. from DeriveGUID
	ESP      Partition // FAT32, holds /EFI/BOOT/BOOTX64.EFI
	// Reports is the small PEERBOOT partition self-test reports land in. It
	// is FAT32 when big enough (≥ 33 MiB) and FAT16 otherwise: FAT32 needs at
	// least 65525 clusters, which a ~32 MiB partition cannot hold.
	Reports Partition
	Epoch   int64 // Unix seconds stamped into FAT directory entries
}

// Partition is one FAT partition of the disk.
type Partition struct {
	Size     int64    // bytes, a multiple of 512
	GUID     [16]byte // unique partition GUID, RFC 4122 byte order
	Label    string   // FAT volume label and GPT partition name
	VolumeID uint32
	Files    map[string][]byte // see fat.Params.Files
}

const (
	lbaSize       = 512
	partAlign     = 1 << 20 // 1 MiB: the alignment every modern partitioner uses
	gptEntries    = 128
	gptEntrySize  = 128
	gptEntryLBAs  = gptEntries * gptEntrySize / lbaSize // 32
	gptHeaderSize = 92
)

var (
	// GUIDTypeESP is the EFI System Partition type.
	GUIDTypeESP = mustGUID("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
	// GUIDTypeBasicData is Microsoft basic data, what Linux tools expect
	// for a plain FAT data partition.
	GUIDTypeBasicData = mustGUID("EBD0A0A2-B9E5-4433-87C0-68B6B72699C7")
)

// Target is what WriteDisk and WriteISO write to: an *os.File, or a file
// that writes only what differs from an earlier version (internal/clonewrite).
type Target interface {
	io.WriterAt
	Truncate(size int64) error
}

// WriteDisk writes a raw disk image to f: a protective MBR, primary and
// backup GPT, the ESP and the reports partition, each 1 MiB aligned. f is
// truncated first and only non-zero structures are written, so the image is
// sparse on filesystems that support it and the result depends on d alone.
func WriteDisk(f Target, d Disk) error {
	if d.DiskGUID == ([16]byte{}) {
		return errors.New("disk: DiskGUID is zero")
	}
	if d.ESP.GUID == ([16]byte{}) || d.Reports.GUID == ([16]byte{}) {
		return errors.New("disk: partition GUID is zero")
	}
	if d.ESP.GUID == d.Reports.GUID || d.ESP.GUID == d.DiskGUID || d.Reports.GUID == d.DiskGUID {
		return errors.New("disk: disk and partition GUIDs must all differ")
	}
	for _, p := range []Partition{d.ESP, d.Reports} {
		if p.Size <= 0 || p.Size%lbaSize != 0 {
			return fmt.Errorf("disk: partition size %d is not a positive multiple of %d", p.Size, lbaSize)
		}
	}
	espStart := int64(partAlign)
	repStart := int64(alignUp(uint64(espStart+d.ESP.Size), partAlign))
	repEnd := repStart + d.Reports.Size
	// The backup entries and header need 33 sectors after the last partition.
	minSize := repEnd + (gptEntryLBAs+1)*lbaSize
	size := d.Size
	if size == 0 {
		size = int64(alignUp(uint64(repEnd), partAlign)) + partAlign
	}
	if size%lbaSize != 0 {
		return fmt.Errorf("disk: size %d is not a multiple of %d", size, lbaSize)
	}
	if size < minSize {
		return fmt.Errorf("disk: size %d is too small for the partitions (need %d)", size, minSize)
	}
	totalLBA := uint64(size / lbaSize)

	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("disk: %w", err)
	}

	parts := []struct {
		p        Partition
		typ      [16]byte
		fatType  fat.Type
		defLabel string
		start    int64
	}{
		{d.ESP, GUIDTypeESP, fat.FAT32, "ESP", espStart},
		{d.Reports, GUIDTypeBasicData, fat.Auto, bootproto.ReportsLabel, repStart},
	}
	entries := make([]byte, gptEntries*gptEntrySize)
	for i, pt := range parts {
		label := pt.p.Label
		if label == "" {
			label = pt.defLabel
		}
		e := entries[i*gptEntrySize:][:gptEntrySize]
		tg, ug := gptBytes(pt.typ), gptBytes(pt.p.GUID)
		copy(e[0:16], tg[:])
		copy(e[16:32], ug[:])
		binary.LittleEndian.PutUint64(e[32:], uint64(pt.start/lbaSize))
		binary.LittleEndian.PutUint64(e[40:], uint64((pt.start+pt.p.Size)/lbaSize-1))
		name := utf16.Encode([]rune(label))
		if len(name) > 36 {
			return fmt.Errorf("disk: partition name %q is longer than 36 UTF-16 units", label)
		}
		for j, c := range name {
			binary.LittleEndian.PutUint16(e[56+2*j:], c)
		}

		_, err := fat.Write(io.NewOffsetWriter(f, pt.start), fat.Params{
			Size:          pt.p.Size,
			Type:          pt.fatType,
			Label:         label,
			VolumeID:      pt.p.VolumeID,
			Epoch:         d.Epoch,
			HiddenSectors: uint32(pt.start / lbaSize),
			Files:         pt.p.Files,
		})
		if err != nil {
			return fmt.Errorf("disk: partition %q: %w", label, err)
		}
	}

	if err := writeTable(f, d.DiskGUID, entries, totalLBA); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	return nil
}

// protectiveMBR makes legacy tools see one partition of type 0xEE covering
// the disk, so they leave the GPT alone (UEFI specification, 5.2.3).
func protectiveMBR(totalLBA uint64) []byte {
	m := make([]byte, lbaSize)
	e := m[446:462]
	e[0] = 0x00                         // not bootable
	e[1], e[2], e[3] = 0x00, 0x02, 0x00 // CHS of LBA 1
	e[4] = 0xEE
	e[5], e[6], e[7] = 0xFF, 0xFF, 0xFF // CHS "too large"
	binary.LittleEndian.PutUint32(e[8:], 1)
	n := totalLBA - 1
	if n > 0xFFFFFFFF {
		n = 0xFFFFFFFF
	}
	binary.LittleEndian.PutUint32(e[12:], uint32(n))
	m[510], m[511] = 0x55, 0xAA
	return m
}
