// Package image turns a kernel, an initrd and an EFI stub into peerboot's
// boot artefacts: a Unified Kernel Image, a GPT raw disk holding it, an ISO
// holding it for BMC virtual media, and a PXE bundle. Everything is deterministic: the same inputs give the same
// bytes, so images can be rebuilt and compared by digest.
package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
)

// UKI is the input of WriteUKI.
type UKI struct {
	Stub      []byte // linuxx64.efi.stub
	Kernel    []byte // bzImage
	Initrd    []byte
	Cmdline   string
	OSRelease string // os-release text
	PCRPKey   []byte // .pcrpkey: PEM public key of the PCR policy signer; nil = none
	PCRSig    []byte // .pcrsig: systemd-measure's signed PCR 11 policies (measure.Sign); nil = none
}

// PE/COFF constants (Microsoft PE format specification).
const (
	pe32Magic     = 0x10b
	pe32PlusMagic = 0x20b

	subsystemEFIApplication = 10
	dirSecurity             = 4 // data directory index of the certificate table

	sectionHeaderSize = 40
	scnInitData       = 0x00000040 // IMAGE_SCN_CNT_INITIALIZED_DATA
	scnMemRead        = 0x40000000 // IMAGE_SCN_MEM_READ
)

// peSection is one section header of the stub.
type peSection struct {
	name     string
	virtSize uint32
	va       uint32
	rawSize  uint32
	rawPtr   uint32
}

// peImage is what WriteUKI needs from the parsed stub.
type peImage struct {
	peOff, optOff, secTableOff int
	magic                      uint16
	sections                   []peSection
	sectionAlign, fileAlign    uint32
	sizeOfImage, sizeOfHeaders uint32
	rawEnd                     int // end of headers and of all section raw data
	symPtr                     uint32
}

func u16(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

func isPow2(v uint32) bool { return v != 0 && v&(v-1) == 0 }

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// parsePE validates the stub far enough that appending sections to it is
// safe: a well-formed header, sane alignments, no signature (appending would
// invalidate it), and sections that neither overlap each other nor the
// headers, in the file or in memory.
func parsePE(b []byte) (*peImage, error) {
	if len(b) < 64 || b[0] != 'M' || b[1] != 'Z' {
		return nil, errors.New("stub is not a PE image: no MZ header")
	}
	p := &peImage{peOff: int(u32(b, 0x3c))}
	if p.peOff < 64 || p.peOff > len(b)-24 || string(b[p.peOff:p.peOff+4]) != "PE\x00\x00" {
		return nil, errors.New("stub is not a PE image: no PE signature")
	}
	coff := p.peOff + 4
	nsec := int(u16(b, coff+2))
	p.symPtr = u32(b, coff+8)
	optSize := int(u16(b, coff+16))
	p.optOff = coff + 20
	if nsec == 0 {
		return nil, errors.New("stub has no sections")
	}
	if p.optOff+optSize > len(b) || optSize < 2 {
		return nil, errors.New("stub's optional header is truncated")
	}
	p.magic = u16(b, p.optOff)
	var dirsOff int
	switch p.magic {
	case pe32Magic:
		dirsOff = 96
	case pe32PlusMagic:
		dirsOff = 112
	default:
		return nil, fmt.Errorf("stub has unknown optional header magic %#x", p.magic)
	}
	if optSize < dirsOff {
		return nil, errors.New("stub's optional header is truncated")
	}
	o := p.optOff
	p.sectionAlign = u32(b, o+32)
	p.fileAlign = u32(b, o+36)
	p.sizeOfImage = u32(b, o+56)
	p.sizeOfHeaders = u32(b, o+60)
	if sub := u16(b, o+68); sub != subsystemEFIApplication {
		return nil, fmt.Errorf("stub subsystem is %d, not an EFI application (%d)", sub, subsystemEFIApplication)
	}
	if !isPow2(p.fileAlign) || p.fileAlign < 512 || p.fileAlign > 65536 {
		return nil, fmt.Errorf("stub FileAlignment %#x is not a power of two in [512, 64K]", p.fileAlign)
	}
	if !isPow2(p.sectionAlign) || p.sectionAlign < p.fileAlign {
		return nil, fmt.Errorf("stub SectionAlignment %#x is invalid (FileAlignment %#x)", p.sectionAlign, p.fileAlign)
	}
	ndirs := int(u32(b, o+dirsOff-4))
	if ndirs > dirSecurity && optSize >= dirsOff+8*(dirSecurity+1) {
		if size := u32(b, o+dirsOff+8*dirSecurity+4); size != 0 {
			return nil, errors.New("stub is signed (has a certificate table); appending sections would break the signature, use the unsigned stub and sign the UKI afterwards")
		}
	}
	p.secTableOff = p.optOff + optSize
	if p.secTableOff+nsec*sectionHeaderSize > len(b) || p.secTableOff+nsec*sectionHeaderSize > int(p.sizeOfHeaders) {
		return nil, errors.New("stub's section table is truncated or outside the headers")
	}
	if int(p.sizeOfHeaders) > len(b) {
		return nil, errors.New("stub is shorter than its headers")
	}
	p.rawEnd = int(p.sizeOfHeaders)
	for i := 0; i < nsec; i++ {
		h := b[p.secTableOff+i*sectionHeaderSize:]
		name := string(h[:8])
		for j := 0; j < len(name); j++ {
			if name[j] == 0 {
				name = name[:j]
				break
			}
		}
		s := peSection{name: name, virtSize: u32(h, 8), va: u32(h, 12), rawSize: u32(h, 16), rawPtr: u32(h, 20)}
		if s.rawSize > 0 {
			end := uint64(s.rawPtr) + uint64(s.rawSize)
			if end > uint64(len(b)) {
				return nil, fmt.Errorf("stub section %s runs past the end of the file", name)
			}
			if s.rawPtr < p.sizeOfHeaders {
				return nil, fmt.Errorf("stub section %s overlaps the headers in the file", name)
			}
			p.rawEnd = max(p.rawEnd, int(end))
		}
		if s.va < p.sizeOfHeaders {
			return nil, fmt.Errorf("stub section %s overlaps the headers in memory", name)
		}
		switch name {
		case ".osrel", ".cmdline", ".linux", ".initrd", ".pcrpkey", ".pcrsig":
			return nil, fmt.Errorf("stub already has a %s section; it must be a bare stub", name)
		}
		p.sections = append(p.sections, s)
	}
	if err := checkOverlap(p.sections); err != nil {
		return nil, err
	}
	return p, nil
}

// span is a section's extent in memory. Linkers may leave VirtualSize zero,
// in which case the raw size is what gets loaded.
func (s peSection) span() uint32 {
	if s.virtSize != 0 {
		return s.virtSize
	}
	return s.rawSize
}

func checkOverlap(secs []peSection) error {
	byVA := append([]peSection(nil), secs...)
	sort.Slice(byVA, func(i, j int) bool { return byVA[i].va < byVA[j].va })
	for i := 1; i < len(byVA); i++ {
		a, b := byVA[i-1], byVA[i]
		if uint64(a.va)+uint64(a.span()) > uint64(b.va) {
			return fmt.Errorf("stub sections %s and %s overlap in memory", a.name, b.name)
		}
	}
	var raw []peSection
	for _, s := range secs {
		if s.rawSize > 0 {
			raw = append(raw, s)
		}
	}
	sort.Slice(raw, func(i, j int) bool { return raw[i].rawPtr < raw[j].rawPtr })
	for i := 1; i < len(raw); i++ {
		a, b := raw[i-1], raw[i]
		if uint64(a.rawPtr)+uint64(a.rawSize) > uint64(b.rawPtr) {
			return fmt.Errorf("stub sections %s and %s overlap in the file", a.name, b.name)
		}
	}
	return nil
}

// peSizeOfImage reads SizeOfImage from a PE image (an x86 bzImage carries a
// PE header for its EFI stub); ok is false when data is not PE.
func peSizeOfImage(b []byte) (uint32, bool) {
	if len(b) < 64 || b[0] != 'M' || b[1] != 'Z' {
		return 0, false
	}
	off := int(u32(b, 0x3c))
	if off < 0 || off+24+60 > len(b) || string(b[off:off+4]) != "PE\x00\x00" {
		return 0, false
	}
	opt := off + 24
	if m := u16(b, opt); m != pe32Magic && m != pe32PlusMagic {
		return 0, false
	}
	return u32(b, opt+56), true
}

// newSection is one section WriteUKI appends.
type newSection struct {
	name     string
	data     []byte
	virtSize uint32
	va       uint32
	rawPtr   uint32
	rawSize  uint32
	rawAlign uint64 // its file data is padded to a multiple of this (0: FileAlignment)
}

// InitrdRawAlign is what WriteUKI pads the .initrd section's file data to.
const InitrdRawAlign = 1 << 20

// WriteUKI assembles a UKI: the stub's headers and sections, unchanged,
// followed by .osrel, .cmdline, .initrd, .pcrpkey, .pcrsig and .linux (empty
// optional parts are left out; the kernel is required). .pcrsig is the one
// section systemd-stub does not measure, so it can be added once the others
// are fixed (measure.Predict over the UKI written without it).
//
// Layout, following the UAPI UKI specification and systemd's ukify:
//   - each new section's VirtualAddress is the end of the previous one
//     (VirtualAddress + VirtualSize; the stub's SizeOfImage for the first)
//     rounded up to SectionAlignment, so addresses ascend and stay adjacent as
//     the PE/COFF specification requires of images;
//   - raw data starts at the end of the stub's data rounded up to
//     FileAlignment, each SizeOfRawData is rounded up to FileAlignment,
//     VirtualSize is the exact payload size;
//   - .linux goes last: systemd-stub 252 starts the kernel through the EFI
//     handover protocol, where it may decompress in place beyond the end of
//     the file image (systemd issue #34578, "the .linux section must be the
//     last section in a UKI"). For the same reason its VirtualSize is the
//     kernel's own SizeOfImage when that is larger than the file, so the
//     firmware reserves the room (ukify did this from #34583 until newer stubs
//     took over the job at run time);
//   - the .initrd's file data is padded with zeros to whole MiB
//     (InitrdRawAlign) and the next section's VirtualAddress follows that
//     padded size, while VirtualSize stays the initrd's: loaders copy
//     min(VirtualSize, SizeOfRawData) bytes, so nothing the stub measures or
//     hands the kernel changes. An overlay edit moves the initrd's size by
//     bytes to KiBs; so padded, the UKI keeps its size and .linux its place,
//     the disk's FAT keeps the UKI's clusters, and the store resumes the
//     disk's hash where the UKI starts (issue 34);
//   - new sections are initialised read-only data;
//   - NumberOfSections, SizeOfImage and SizeOfInitializedData are updated,
//     CheckSum is 0. The stub's trailing COFF symbol table, if any, is dropped (it
//     is deprecated in images and signing tools object to data past the last
//     section).
func WriteUKI(w io.Writer, u UKI) error {
	if len(u.Kernel) == 0 {
		return errors.New("uki: kernel is empty")
	}
	p, err := parsePE(u.Stub)
	if err != nil {
		return fmt.Errorf("uki: %w", err)
	}

	var secs []*newSection
	add := func(name string, data []byte) {
		if len(data) > 0 {
			secs = append(secs, &newSection{name: name, data: data, virtSize: uint32(len(data))})
		}
	}
	add(".osrel", []byte(u.OSRelease))
	add(".cmdline", []byte(u.Cmdline))
	add(".initrd", u.Initrd)
	if n := len(secs); n > 0 && secs[n-1].name == ".initrd" {
		secs[n-1].rawAlign = InitrdRawAlign
	}
	add(".pcrpkey", u.PCRPKey)
	add(".pcrsig", u.PCRSig)
	add(".linux", u.Kernel)
	linux := secs[len(secs)-1]
	if soi, ok := peSizeOfImage(u.Kernel); ok && soi > linux.virtSize {
		linux.virtSize = soi
	}

	// Room for the new section headers must already exist between the
	// section table and the first section's data; moving the stub's
	// sections would mean rewriting every file offset inside it.
	nsec := len(p.sections)
	tableEnd := p.secTableOff + (nsec+len(secs))*sectionHeaderSize
	if tableEnd > int(p.sizeOfHeaders) {
		return fmt.Errorf("uki: stub headers have room for %d more section headers, need %d",
			(int(p.sizeOfHeaders)-p.secTableOff)/sectionHeaderSize-nsec, len(secs))
	}
	for _, c := range u.Stub[p.secTableOff+nsec*sectionHeaderSize : tableEnd] {
		if c != 0 {
			return errors.New("uki: stub has data where the new section headers go")
		}
	}

	va := uint64(p.sizeOfImage)
	for _, s := range p.sections {
		va = max(va, uint64(s.va)+uint64(s.span()))
	}
	raw := alignUp(uint64(p.rawEnd), uint64(p.fileAlign))
	var initData uint64
	for _, s := range secs {
		va = alignUp(va, uint64(p.sectionAlign))
		size := alignUp(uint64(len(s.data)), max(uint64(p.fileAlign), s.rawAlign))
		if va+max(uint64(s.virtSize), size) > 0xFFFFFFFF || raw+size > 0xFFFFFFFF {
			return errors.New("uki: image would exceed 4 GiB, the PE format's limit")
		}
		s.va, s.rawPtr, s.rawSize = uint32(va), uint32(raw), uint32(size)
		// Past the padded file data too: a reader that takes a section's
		// extent as the larger of the two sizes sees no overlap.
		va += max(uint64(s.virtSize), size)
		raw += size
		initData += size
	}
	sizeOfImage := alignUp(va, uint64(p.sectionAlign))
	if sizeOfImage > 0xFFFFFFFF {
		return errors.New("uki: image would exceed 4 GiB, the PE format's limit")
	}

	// Patch a copy of the stub's headers and data.
	head := make([]byte, alignUp(uint64(p.rawEnd), uint64(p.fileAlign)))
	copy(head, u.Stub[:p.rawEnd])
	le16 := binary.LittleEndian.PutUint16
	le32 := binary.LittleEndian.PutUint32
	coff := p.peOff + 4
	le16(head[coff+2:], uint16(nsec+len(secs)))
	if p.symPtr != 0 && int(p.symPtr) >= p.rawEnd {
		le32(head[coff+8:], 0)
		le32(head[coff+12:], 0)
	}
	o := p.optOff
	le32(head[o+8:], uint32(min(uint64(u32(head, o+8))+initData, 0xFFFFFFFF)))
	le32(head[o+56:], uint32(sizeOfImage))
	// CheckSum 0, as systemd's ukify writes it (pe_add_sections): UEFI
	// loaders do not check it and Authenticode skips it, and a sum over the
	// whole file would change the header with every initrd edit, so the
	// store could not resume the UKI's hash past its first bytes.
	le32(head[o+64:], 0)
	for i, s := range secs {
		h := head[p.secTableOff+(nsec+i)*sectionHeaderSize:][:sectionHeaderSize]
		copy(h[0:8], s.name)
		le32(h[8:], s.virtSize)
		le32(h[12:], s.va)
		le32(h[16:], s.rawSize)
		le32(h[20:], s.rawPtr)
		le32(h[36:], scnInitData|scnMemRead)
	}

	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("uki: write headers: %w", err)
	}
	var zeros []byte
	for _, s := range secs {
		if _, err := w.Write(s.data); err != nil {
			return fmt.Errorf("uki: write %s: %w", s.name, err)
		}
		pad := int(s.rawSize) - len(s.data)
		if len(zeros) < pad {
			zeros = make([]byte, pad)
		}
		if _, err := w.Write(zeros[:pad]); err != nil {
			return fmt.Errorf("uki: write %s padding: %w", s.name, err)
		}
	}
	return nil
}
