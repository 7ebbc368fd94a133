package iso9660

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Volume is what Open reads back from an ISO: enough for `verify` and the
// tests to find the UEFI boot image and the root directory's files. It reads
// outside bytes (a downloaded ISO), so every offset is bounds-checked.
type Volume struct {
	VolumeID string
	Created  time.Time // the primary volume descriptor's creation date, UTC
	Sectors  uint32    // volume space size
	Boot     []BootEntry
	Root     []File // the root directory's files, "." and ".." left out
}

// BootEntry is one El Torito catalog entry.
type BootEntry struct {
	Platform    byte // 0 x86 BIOS, 0xEF UEFI
	Bootable    bool
	Media       byte   // 0 no emulation
	SectorCount uint16 // 512-byte sectors; below 2 means to the end of the volume
	LBA         uint32
}

// File is one entry of the root directory.
type File struct {
	Name     string // without the ";1" version
	Dir      bool
	LBA      uint32
	Size     uint32
	Recorded time.Time
}

// ErrNotISO means there is no ISO 9660 primary volume descriptor.
var ErrNotISO = errors.New("not an ISO 9660 volume")

// Open reads the volume descriptors, the boot catalog and the root directory
// of the volume r holds at [0, size).
func Open(r io.ReaderAt, size int64) (*Volume, error) {
	read := func(lba uint32, what string) ([]byte, error) {
		off := int64(lba) * SectorSize
		if off+SectorSize > size {
			return nil, fmt.Errorf("%s at sector %d lies past the end of the %d-byte volume", what, lba, size)
		}
		b := make([]byte, SectorSize)
		if _, err := r.ReadAt(b, off); err != nil {
			return nil, fmt.Errorf("reading %s: %w", what, err)
		}
		return b, nil
	}
	v := &Volume{}
	var pvdSec, catalogLBA []byte
	for lba := uint32(lbaPVD); ; lba++ {
		if lba > lbaPVD+32 {
			return nil, fmt.Errorf("%w: no volume descriptor set terminator in sectors 16-48", ErrNotISO)
		}
		b, err := read(lba, "volume descriptor")
		if err != nil {
			if lba == lbaPVD {
				return nil, fmt.Errorf("%w: %v", ErrNotISO, err)
			}
			return nil, err
		}
		if string(b[1:6]) != "CD001" {
			return nil, fmt.Errorf("%w: sector %d has no CD001 identifier", ErrNotISO, lba)
		}
		switch b[0] {
		case 1:
			if pvdSec == nil {
				pvdSec = b
			}
		case 0:
			if strings.TrimRight(string(b[7:39]), "\x00") == bootSystemID {
				catalogLBA = b[71:75]
			}
		case 255:
			goto done
		}
	}
done:
	if pvdSec == nil {
		return nil, fmt.Errorf("%w: no primary volume descriptor", ErrNotISO)
	}
	v.VolumeID = strings.TrimRight(string(pvdSec[40:72]), " ")
	v.Sectors = binary.LittleEndian.Uint32(pvdSec[80:])
	if bs := binary.LittleEndian.Uint16(pvdSec[128:]); bs != SectorSize {
		return nil, fmt.Errorf("logical block size %d: only %d is supported", bs, SectorSize)
	}
	if t, err := time.Parse("20060102150405", string(pvdSec[813:827])); err == nil {
		v.Created = t.Add(-time.Duration(int8(pvdSec[829])) * 15 * time.Minute)
	}
	rootRec := pvdSec[156:190]
	rootLBA := binary.LittleEndian.Uint32(rootRec[2:])
	rootLen := binary.LittleEndian.Uint32(rootRec[10:])
	if rootLen == 0 || rootLen > 64*SectorSize {
		return nil, fmt.Errorf("root directory of %d bytes", rootLen)
	}
	var dir []byte
	for i := uint32(0); i < (rootLen+SectorSize-1)/SectorSize; i++ {
		b, err := read(rootLBA+i, "root directory")
		if err != nil {
			return nil, err
		}
		dir = append(dir, b...)
	}
	files, err := parseDir(dir[:rootLen])
	if err != nil {
		return nil, err
	}
	v.Root = files
	if catalogLBA != nil {
		c, err := read(binary.LittleEndian.Uint32(catalogLBA), "boot catalog")
		if err != nil {
			return nil, err
		}
		if v.Boot, err = parseCatalog(c); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func parseDir(b []byte) ([]File, error) {
	var out []File
	for off := 0; off < len(b); {
		n := int(b[off])
		if n == 0 { // records do not cross sectors: skip to the next one
			off = (off/SectorSize + 1) * SectorSize
			continue
		}
		if n < 34 || off+n > len(b) {
			return nil, fmt.Errorf("directory record at byte %d: length %d", off, n)
		}
		rec := b[off : off+n]
		nl := int(rec[32])
		if 33+nl > n {
			return nil, fmt.Errorf("directory record at byte %d: name of %d bytes in a %d-byte record", off, nl, n)
		}
		name := string(rec[33 : 33+nl])
		off += n
		if name == "\x00" || name == "\x01" {
			continue
		}
		t := rec[18:25]
		out = append(out, File{
			Name:     strings.TrimSuffix(name, ";1"),
			Dir:      rec[25]&0x02 != 0,
			LBA:      binary.LittleEndian.Uint32(rec[2:]),
			Size:     binary.LittleEndian.Uint32(rec[10:]),
			Recorded: time.Date(1900+int(t[0]), time.Month(t[1]), int(t[2]), int(t[3]), int(t[4]), int(t[5]), 0, time.UTC).Add(-time.Duration(int8(t[6])) * 15 * time.Minute),
		})
	}
	return out, nil
}

func parseCatalog(c []byte) ([]BootEntry, error) {
	v := c[0:32]
	if v[0] != 0x01 || v[30] != 0x55 || v[31] != 0xAA {
		return nil, errors.New("boot catalog: no validation entry")
	}
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(v[i:])
	}
	if sum != 0 {
		return nil, errors.New("boot catalog: validation entry checksum mismatch")
	}
	entry := func(e []byte, platform byte) BootEntry {
		return BootEntry{Platform: platform, Bootable: e[0] == 0x88, Media: e[1] & 0x0F,
			SectorCount: binary.LittleEndian.Uint16(e[6:]), LBA: binary.LittleEndian.Uint32(e[8:])}
	}
	out := []BootEntry{entry(c[32:64], v[1])}
	// Section headers (0x90, 0x91 for the last) each followed by entries.
	for off := 64; off+32 <= len(c); {
		h := c[off : off+32]
		if h[0] != 0x90 && h[0] != 0x91 {
			break
		}
		n := int(binary.LittleEndian.Uint16(h[2:]))
		off += 32
		for i := 0; i < n && off+32 <= len(c); i++ {
			if c[off] != 0x44 { // skip extension entries
				out = append(out, entry(c[off:off+32], h[1]))
			}
			off += 32
		}
		if h[0] == 0x91 {
			break
		}
	}
	return out, nil
}

// EFIImage returns the byte range of the first bootable UEFI entry's image:
// its sector count when that is 2 or more, else up to the end of the volume
// (as EDK2 reads it).
func (v *Volume) EFIImage() (off, size int64, err error) {
	for _, e := range v.Boot {
		if e.Platform != PlatformEFI || !e.Bootable {
			continue
		}
		off = int64(e.LBA) * SectorSize
		end := int64(v.Sectors) * SectorSize
		if off >= end {
			return 0, 0, fmt.Errorf("UEFI boot image at sector %d lies past the end of the %d-sector volume", e.LBA, v.Sectors)
		}
		if e.SectorCount < 2 {
			return off, end - off, nil
		}
		return off, min(int64(e.SectorCount)*virtualSector, end-off), nil
	}
	return 0, 0, errors.New("no bootable UEFI (platform 0xEF) El Torito entry")
}
