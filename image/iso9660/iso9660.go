// Package iso9660 writes the one CD image peerboot makes: an ISO 9660 volume
// whose El Torito catalog has a single UEFI entry (platform 0xEF, no
// emulation) pointing at a FAT image, the ESP, which UEFI firmware mounts and
// boots from (/EFI/BOOT/BOOTX64.EFI). BMCs mount such an ISO as virtual media.
//
// It is written by hand, not with go-diskfs: go-diskfs's iso9660 writer
// stamps the volume descriptors and directory records with time.Now() and
// needs its files staged in a directory tree first. Here every field comes
// from Params, so the bytes depend on Params alone. The layout is fixed
// (2048-byte sectors):
//
//	LBA 0-15   system area, zero
//	LBA 16     primary volume descriptor
//	LBA 17     El Torito boot record volume descriptor
//	LBA 18     volume descriptor set terminator
//	LBA 19     type L path table (little-endian)
//	LBA 20     type M path table (big-endian)
//	LBA 21     root directory
//	LBA 22     boot catalog (BOOT.CAT)
//	LBA 23-    the boot image (its file name), to the end of the volume
//
// The boot image comes last: UEFI firmware built on EDK2 takes a catalog
// sector count below 2 to mean "from the image's LBA to the end of the
// volume" (MdeModulePkg/Universal/Disk/PartitionDxe/ElTorito.c), which is how
// an ESP larger than the 16-bit count's 32 MiB is described.
package iso9660

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"
)

// SectorSize is ISO 9660's logical block size.
const SectorSize = 2048

const (
	lbaPVD        = 16
	lbaBootRecord = 17
	lbaTerminator = 18
	lbaPathL      = 19
	lbaPathM      = 20
	lbaRoot       = 21
	lbaCatalog    = 22
	lbaImage      = 23

	catalogName = "BOOT.CAT"
	// PlatformEFI is El Torito's platform id for UEFI.
	PlatformEFI = 0xEF
	// virtualSector is the unit of the catalog's sector count.
	virtualSector = 512
	// bootSystemID names the El Torito boot record.
	bootSystemID = "EL TORITO SPECIFICATION"
)

// Params describe the volume.
type Params struct {
	// VolumeID is the volume identifier: at most 32 of A-Z, 0-9 and _.
	VolumeID string
	// Epoch (Unix seconds, UTC) is every date on the volume: creation,
	// modification and effective dates and each directory record's.
	Epoch int64
	// ImageName is the boot image's file name in the root directory, an
	// 8.3 name in A-Z, 0-9 and _ ("EFIBOOT.IMG").
	ImageName string
	// ImageSize is the boot image's size in bytes, a positive multiple of
	// SectorSize.
	ImageSize int64
	// WriteImage writes the boot image into w at offsets [0, ImageSize). w
	// is zero where nothing is written (Write is given a fresh file).
	WriteImage func(w io.WriterAt) error
}

// Size is the byte size of the volume Write makes for p.
func Size(p Params) int64 { return lbaImage*SectorSize + p.ImageSize }

// ImageOffset is where the boot image starts in the volume.
const ImageOffset = lbaImage * SectorSize

// Write writes the volume to w at offsets [0, Size(p)). Only non-zero
// sectors are written: w must already be Size(p) bytes of zeros (a file
// truncated to that size, which then stays sparse).
func Write(w io.WriterAt, p Params) error {
	if err := check(p); err != nil {
		return err
	}
	total := uint32(Size(p) / SectorSize)
	ts := recordDate(p.Epoch)
	entries := []dirRecord{
		{name: "\x00", lba: lbaRoot, size: SectorSize, dir: true},
		{name: "\x01", lba: lbaRoot, size: SectorSize, dir: true},
	}
	// Files sorted by name, as ISO 9660 requires (9.3); their extents stay
	// in LBA order whatever the names, the image last.
	files := []dirRecord{
		{name: catalogName + ";1", lba: lbaCatalog, size: SectorSize},
		{name: p.ImageName + ";1", lba: lbaImage, size: uint32(p.ImageSize)},
	}
	if files[1].name < files[0].name {
		files[0], files[1] = files[1], files[0]
	}
	root := make([]byte, 0, SectorSize)
	for _, e := range append(entries, files...) {
		root = append(root, e.bytes(ts)...)
	}
	sectors := []struct {
		lba  int64
		data []byte
	}{
		{lbaPVD, pvd(p, total, ts)},
		{lbaBootRecord, bootRecord()},
		{lbaTerminator, terminator()},
		{lbaPathL, pathTable(binary.LittleEndian)},
		{lbaPathM, pathTable(binary.BigEndian)},
		{lbaRoot, root},
		{lbaCatalog, catalog(p.ImageSize)},
	}
	for _, s := range sectors {
		if _, err := w.WriteAt(s.data, s.lba*SectorSize); err != nil {
			return fmt.Errorf("iso9660: writing sector %d: %w", s.lba, err)
		}
	}
	if err := p.WriteImage(io.NewOffsetWriter(w, ImageOffset)); err != nil {
		return fmt.Errorf("iso9660: boot image: %w", err)
	}
	return nil
}

func check(p Params) error {
	if p.VolumeID == "" || len(p.VolumeID) > 32 || !dChars(p.VolumeID) {
		return fmt.Errorf("iso9660: volume id %q: want 1-32 of A-Z, 0-9, _", p.VolumeID)
	}
	base, ext, _ := strings.Cut(p.ImageName, ".")
	if base == "" || len(base) > 8 || len(ext) > 3 || !dChars(base) || !dChars(ext) {
		return fmt.Errorf("iso9660: image name %q: want an 8.3 name of A-Z, 0-9, _", p.ImageName)
	}
	if p.ImageName == catalogName {
		return fmt.Errorf("iso9660: image name %q is the boot catalog's", p.ImageName)
	}
	if p.ImageSize <= 0 || p.ImageSize%SectorSize != 0 || p.ImageSize > 0xFFFFFFFF-SectorSize*lbaImage {
		return fmt.Errorf("iso9660: image size %d: want a positive multiple of %d below 4 GiB", p.ImageSize, SectorSize)
	}
	if p.WriteImage == nil {
		return fmt.Errorf("iso9660: no WriteImage")
	}
	if p.Epoch < 0 || time.Unix(p.Epoch, 0).UTC().Year() > 2155 {
		return fmt.Errorf("iso9660: epoch %d is outside 1970-2155 (what directory records can hold)", p.Epoch)
	}
	return nil
}

func dChars(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// both16 and both32 write ISO 9660's both-byte-order numbers (7.2.3, 7.3.3).
func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

// padded is s followed by spaces to n bytes (a- and d-character fields).
func padded(s string, n int) []byte {
	return []byte(s + strings.Repeat(" ", n-len(s)))
}

// recordDate is a directory record's 7-byte date (9.1.5), UTC.
func recordDate(epoch int64) [7]byte {
	t := time.Unix(epoch, 0).UTC()
	return [7]byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// volumeDate is a volume descriptor's 17-byte date (8.4.26.1), UTC.
func volumeDate(epoch int64) []byte {
	t := time.Unix(epoch, 0).UTC()
	return append([]byte(t.Format("20060102150405")+"00"), 0)
}

// unsetDate is "not specified" (8.4.26.1): sixteen '0's and a zero offset.
func unsetDate() []byte { return append([]byte(strings.Repeat("0", 16)), 0) }

func descriptorHeader(typ byte) []byte {
	b := make([]byte, SectorSize)
	b[0] = typ
	copy(b[1:6], "CD001")
	b[6] = 1
	return b
}

type dirRecord struct {
	name string // "\x00" is ".", "\x01" is ".."
	lba  uint32
	size uint32
	dir  bool
}

func (d dirRecord) bytes(ts [7]byte) []byte {
	n := 33 + len(d.name)
	if n%2 == 1 {
		n++
	}
	b := make([]byte, n)
	b[0] = byte(n)
	both32(b[2:], d.lba)
	both32(b[10:], d.size)
	copy(b[18:25], ts[:])
	if d.dir {
		b[25] = 0x02
	}
	both16(b[28:], 1) // volume sequence number
	b[32] = byte(len(d.name))
	copy(b[33:], d.name)
	return b
}

// pvd is the primary volume descriptor (8.4).
func pvd(p Params, total uint32, ts [7]byte) []byte {
	b := descriptorHeader(1)
	copy(b[8:40], padded("", 32)) // system identifier
	copy(b[40:72], padded(p.VolumeID, 32))
	both32(b[80:], total)
	both16(b[120:], 1)          // volume set size
	both16(b[124:], 1)          // volume sequence number
	both16(b[128:], SectorSize) // logical block size
	both32(b[132:], pathTableSize)
	binary.LittleEndian.PutUint32(b[140:], lbaPathL)
	binary.BigEndian.PutUint32(b[148:], lbaPathM)
	copy(b[156:190], dirRecord{name: "\x00", lba: lbaRoot, size: SectorSize, dir: true}.bytes(ts))
	copy(b[190:318], padded("", 128)) // volume set
	copy(b[318:446], padded("", 128)) // publisher
	copy(b[446:574], padded("", 128)) // data preparer
	copy(b[574:702], padded("PEERBOOT", 128))
	copy(b[702:739], padded("", 37)) // copyright file
	copy(b[739:776], padded("", 37)) // abstract file
	copy(b[776:813], padded("", 37)) // bibliographic file
	d := volumeDate(p.Epoch)
	copy(b[813:830], d) // creation
	copy(b[830:847], d) // modification
	copy(b[847:864], unsetDate())
	copy(b[864:881], d) // effective
	b[881] = 1          // file structure version
	return b
}

// bootRecord is El Torito's boot record volume descriptor: it names the
// boot catalog's sector.
func bootRecord() []byte {
	b := descriptorHeader(0)
	copy(b[7:39], bootSystemID)
	binary.LittleEndian.PutUint32(b[71:], lbaCatalog)
	return b
}

func terminator() []byte { return descriptorHeader(255) }

// pathTableSize is one record: the root (6.9, 9.4).
const pathTableSize = 10

func pathTable(order binary.ByteOrder) []byte {
	b := make([]byte, pathTableSize)
	b[0] = 1 // identifier length
	order.PutUint32(b[2:], lbaRoot)
	order.PutUint16(b[6:], 1) // parent: the root itself
	return b
}

// catalog is the El Torito boot catalog: a validation entry for platform
// 0xEF and the initial entry, bootable, no emulation, pointing at the image.
func catalog(imageSize int64) []byte {
	b := make([]byte, SectorSize)
	v := b[0:32]
	v[0] = 0x01 // header id
	v[1] = PlatformEFI
	v[30], v[31] = 0x55, 0xAA
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(v[i:])
	}
	binary.LittleEndian.PutUint16(v[28:], -sum) // the words sum to zero
	e := b[32:64]
	e[0] = 0x88 // bootable
	e[1] = 0x00 // no emulation
	binary.LittleEndian.PutUint16(e[6:], sectorCount(imageSize))
	binary.LittleEndian.PutUint32(e[8:], lbaImage)
	return b
}

// sectorCount is the catalog's 16-bit count of 512-byte sectors: the exact
// size when it fits, else 1, which EDK2 reads as "to the end of the volume".
func sectorCount(imageSize int64) uint16 {
	if n := imageSize / virtualSector; n <= 0xFFFF {
		return uint16(n)
	}
	return 1
}
