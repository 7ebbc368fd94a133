// Package measure predicts the TPM PCR 11 values systemd's EFI stub leaves
// for a Unified Kernel Image, and signs and checks those predictions in the
// .pcrsig format systemd-measure writes. Pure Go: the collector, `peerboot
// verify` and the build all use it.
//
// The rules are systemd 252's (the stub peerboot pins is systemd-boot-efi
// 252.39; bookworm's systemd 252.38 ships /lib/systemd/systemd-measure, which
// the tests run against this package):
//
//   - src/boot/efi/stub.c: for each "unified section" in the fixed order of
//     src/fundamental/tpm-pcr.c (.linux .osrel .cmdline .initrd .splash .dtb
//     .pcrsig .pcrpkey), skipping .pcrsig (unified_section_measure) and
//     sections not found or of size 0, the stub measures into PCR 11 first the
//     section's name including its NUL byte, then the section's bytes in
//     memory. Each measurement is HashLogExtendEvent: PCR = H(PCR || H(data)).
//   - src/boot/efi/pe.c, locate_sections: a section header matches a name
//     when its 8-byte Name starts with that name (memcmp over strlen(name)
//     bytes), a later match replaces an earlier one, and the size measured is
//     the header's VirtualSize, read from the loaded image at VirtualAddress.
//     The firmware's loader copies at most SizeOfRawData bytes of the file and
//     zero-fills the rest of VirtualSize, so a .linux whose VirtualSize is the
//     kernel's SizeOfImage (image.WriteUKI does that) is measured with those
//     zeros: `systemd-measure --linux=bzImage` alone would mispredict it.
//   - src/boot/pcrphase.c: systemd-pcrphase WORD extends PCR 11 with H(WORD),
//     the word without a NUL; src/boot/measure.c models a phase "a:b" as the
//     words a then b, and by default predicts (and signs) the phases
//     enter-initrd, enter-initrd:leave-initrd, …:sysinit, …:sysinit:ready.
package measure

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// PCR is the PCR index the stub measures the UKI's sections into
// (TPM_PCR_INDEX_KERNEL_IMAGE in systemd 252).
const PCR = 11

// UnifiedSections are the section names systemd-stub 252 knows, in the order
// it measures them (src/fundamental/tpm-pcr.c). .pcrsig is never measured.
var UnifiedSections = []string{".linux", ".osrel", ".cmdline", ".initrd", ".splash", ".dtb", ".pcrsig", ".pcrpkey"}

// Boot phases systemd-pcrphase marks, as systemd-measure writes them.
const (
	PhaseStub        = ""             // after the stub, before any systemd-pcrphase word
	PhaseEnterInitrd = "enter-initrd" // systemd-pcrphase-initrd.service (peerboot's init extends it before quoting)
)

// DefaultPhases are the phases `systemd-measure calculate|sign` uses when no
// --phase is given (src/boot/measure.c, parse_argv), in its order.
var DefaultPhases = []string{
	"enter-initrd",
	"enter-initrd:leave-initrd",
	"enter-initrd:leave-initrd:sysinit",
	"enter-initrd:leave-initrd:sysinit:ready",
}

// Section is one measured section: its unified name and the bytes the stub
// hashes (its VirtualSize bytes as loaded in memory).
type Section struct {
	Name string
	Data []byte
}

// Phase is PCR 11's sha256-bank value at one boot phase.
type Phase struct {
	Name  string // "" = after the stub only; "enter-initrd" = after systemd-pcrphase's "enter-initrd" extend, …
	PCR11 [32]byte
}

// Prediction is what the stub leaves in PCR 11 (sha256 bank) for one UKI.
type Prediction struct {
	Sections []string // the measured sections, in measurement order
	Phases   []Phase  // PhaseStub first, then DefaultPhases
}

// Value returns the predicted PCR 11 at phase.
func (p Prediction) Value(phase string) ([32]byte, bool) {
	phase = normalizePhase(phase)
	for _, ph := range p.Phases {
		if ph.Name == phase {
			return ph.PCR11, true
		}
	}
	return [32]byte{}, false
}

// Extend is the TPM's PCR extend in the sha256 bank: H(pcr || digest).
func Extend(pcr, digest [32]byte) [32]byte {
	return sha256.Sum256(append(pcr[:], digest[:]...))
}

// ExtendPhase extends pcr with each word of phase ("a:b" = a, then b), as
// systemd-pcrphase does for each word (H of the word, no NUL).
func ExtendPhase(pcr [32]byte, phase string) [32]byte {
	for _, w := range strings.Split(phase, ":") {
		if w != "" {
			pcr = Extend(pcr, sha256.Sum256([]byte(w)))
		}
	}
	return pcr
}

// normalizePhase drops empty words, as systemd-measure's normalize_phase.
func normalizePhase(s string) string {
	var words []string
	for _, w := range strings.Split(s, ":") {
		if w != "" {
			words = append(words, w)
		}
	}
	return strings.Join(words, ":")
}

// Predict returns the PCR 11 (sha256 bank) values systemd-stub 252 leaves for
// this UKI, after the stub and at each of DefaultPhases.
func Predict(uki []byte) (Prediction, error) {
	return PredictKnown(uki, nil)
}

// Known gives the sha256 of a measured section's loaded bytes (its file
// data, then zeros up to VirtualSize) when the caller already holds it, so
// that PredictKnown need not hash the section: the build takes the .initrd's
// from the store's record of the initramfs it wrote there. file is the
// section's data in the UKI (min(SizeOfRawData, VirtualSize) bytes); ok false
// means "hash it". The caller answers for the sum being that of the loaded
// bytes.
type Known func(name string, s PESection, file []byte) (sum [32]byte, ok bool)

// PredictKnown is Predict taking each section's digest from known where it
// has one (nil: none), hashing the others.
func PredictKnown(uki []byte, known Known) (Prediction, error) {
	var digests []SectionDigest
	err := walkMeasured(uki, func(name string, s PESection) error {
		file, err := fileData(uki, s)
		if err != nil {
			return err
		}
		if known != nil {
			if sum, ok := known(name, s, file); ok {
				digests = append(digests, SectionDigest{Name: name, SHA256: sum})
				return nil
			}
		}
		digests = append(digests, SectionDigest{Name: name, SHA256: LoadedSum(file, s.VirtualSize)})
		return nil
	})
	if err != nil {
		return Prediction{}, err
	}
	return PredictDigests(digests), nil
}

// SectionDigest is a measured section by the sha256 of the bytes the stub
// hashes.
type SectionDigest struct {
	Name   string
	SHA256 [32]byte
}

// PredictSections is Predict over sections already taken out of a UKI, in
// measurement order (MeasuredSections' result).
func PredictSections(secs []Section) Prediction {
	digests := make([]SectionDigest, len(secs))
	for i, s := range secs {
		digests[i] = SectionDigest{Name: s.Name, SHA256: sha256.Sum256(s.Data)}
	}
	return PredictDigests(digests)
}

// PredictDigests is Predict over the measured sections' digests, in
// measurement order: all the stub's PCR 11 arithmetic needs of a section.
func PredictDigests(secs []SectionDigest) Prediction {
	var pcr [32]byte // PCR 11 starts as zeros at reset
	var p Prediction
	for _, s := range secs {
		pcr = Extend(pcr, sha256.Sum256(append([]byte(s.Name), 0)))
		pcr = Extend(pcr, s.SHA256)
		p.Sections = append(p.Sections, s.Name)
	}
	p.Phases = append(p.Phases, Phase{Name: PhaseStub, PCR11: pcr})
	for _, ph := range DefaultPhases {
		p.Phases = append(p.Phases, Phase{Name: ph, PCR11: ExtendPhase(pcr, ph)})
	}
	return p
}

// PESection is one PE section header, its name as the 8 raw bytes.
type PESection struct {
	Name           [8]byte
	VirtualSize    uint32
	VirtualAddress uint32
	SizeOfRawData  uint32
	PointerToRaw   uint32
}

// NameString is the header's name up to its first NUL.
func (s PESection) NameString() string {
	n := s.Name[:]
	for i, c := range n {
		if c == 0 {
			n = n[:i]
			break
		}
	}
	return string(n)
}

// PEImage is the part of a PE image's headers the stub's section lookup reads.
type PEImage struct {
	SizeOfImage   uint32
	SizeOfHeaders uint32
	Sections      []PESection
}

const (
	machineAMD64  = 0x8664
	pe32Magic     = 0x10b
	pe32PlusMagic = 0x20b
	secHeaderSize = 40
)

// ParsePE reads the section table of an x86-64 PE image the way
// systemd-stub's pe.c does (verify_dos, verify_pe, section_table_offset),
// checking every offset against the file.
func ParsePE(b []byte) (*PEImage, error) {
	if len(b) < 64 || b[0] != 'M' || b[1] != 'Z' {
		return nil, errors.New("not a PE image: no MZ header")
	}
	peOff := uint64(binary.LittleEndian.Uint32(b[0x3c:]))
	if peOff+24 > uint64(len(b)) || string(b[peOff:peOff+4]) != "PE\x00\x00" {
		return nil, errors.New("not a PE image: no PE signature")
	}
	coff := b[peOff+4:]
	if m := binary.LittleEndian.Uint16(coff); m != machineAMD64 {
		return nil, fmt.Errorf("PE machine %#x is not x86-64 (%#x), the only one systemd-stub here runs", m, machineAMD64)
	}
	nsec := uint64(binary.LittleEndian.Uint16(coff[2:]))
	optSize := uint64(binary.LittleEndian.Uint16(coff[16:]))
	if nsec == 0 {
		return nil, errors.New("PE image has no sections")
	}
	opt := peOff + 24
	if optSize < 64 || opt+optSize > uint64(len(b)) {
		return nil, errors.New("PE optional header is truncated")
	}
	if m := binary.LittleEndian.Uint16(b[opt:]); m != pe32Magic && m != pe32PlusMagic {
		return nil, fmt.Errorf("PE optional header magic %#x is neither PE32 nor PE32+", m)
	}
	img := &PEImage{
		SizeOfImage:   binary.LittleEndian.Uint32(b[opt+56:]),
		SizeOfHeaders: binary.LittleEndian.Uint32(b[opt+60:]),
	}
	table := opt + optSize
	if table+nsec*secHeaderSize > uint64(len(b)) {
		return nil, fmt.Errorf("PE section table (%d sections) runs past the end of the file", nsec)
	}
	for i := uint64(0); i < nsec; i++ {
		h := b[table+i*secHeaderSize:][:secHeaderSize]
		var s PESection
		copy(s.Name[:], h[:8])
		s.VirtualSize = binary.LittleEndian.Uint32(h[8:])
		s.VirtualAddress = binary.LittleEndian.Uint32(h[12:])
		s.SizeOfRawData = binary.LittleEndian.Uint32(h[16:])
		s.PointerToRaw = binary.LittleEndian.Uint32(h[20:])
		img.Sections = append(img.Sections, s)
	}
	return img, nil
}

// Lookup finds a unified section the way locate_sections does: the last
// header whose Name starts with name. ok is false when none does.
func (img *PEImage) Lookup(name string) (PESection, bool) {
	var found PESection
	ok := false
	for _, s := range img.Sections {
		if len(name) <= 8 && string(s.Name[:len(name)]) == name {
			found, ok = s, true
		}
	}
	return found, ok
}

// maxZeroFill bounds the zeros past a section's file data that a measured
// section may carry (a kernel's bss and decompression room is tens of MiB),
// so a hostile header cannot make a prediction hash gigabytes.
const maxZeroFill = 256 << 20

// LoadedData is a section's VirtualSize bytes as the firmware loads them:
// the first min(SizeOfRawData, VirtualSize) bytes of its file data, then
// zeros.
func LoadedData(b []byte, s PESection) ([]byte, error) {
	file, err := fileData(b, s)
	if err != nil {
		return nil, err
	}
	out := make([]byte, s.VirtualSize)
	copy(out, file)
	return out, nil
}

// fileData is the part of a section's loaded bytes that comes from the file
// (the rest, up to VirtualSize, is zeros), checked against the file's end
// and the zero-fill bound.
func fileData(b []byte, s PESection) ([]byte, error) {
	n := min(s.SizeOfRawData, s.VirtualSize)
	if uint64(s.PointerToRaw)+uint64(n) > uint64(len(b)) {
		return nil, fmt.Errorf("section %s: its data (%d bytes at %#x) runs past the end of the file (%d bytes)", s.NameString(), n, s.PointerToRaw, len(b))
	}
	if s.VirtualSize-n > maxZeroFill {
		return nil, fmt.Errorf("section %s: VirtualSize %d exceeds its file data by more than %d MiB", s.NameString(), s.VirtualSize, maxZeroFill>>20)
	}
	return b[s.PointerToRaw : uint64(s.PointerToRaw)+uint64(n)], nil
}

// LoadedSum is the sha256 of file followed by zeros up to size bytes (a
// section's loaded bytes, when file is its data and size its VirtualSize),
// without making the zero-filled copy (a UKI's .initrd is tens of MiB).
func LoadedSum(file []byte, size uint32) [32]byte {
	h := sha256.New()
	h.Write(file)
	var zeros [64 << 10]byte
	for left := int64(size) - int64(len(file)); left > 0; left -= int64(len(zeros)) {
		h.Write(zeros[:min(left, int64(len(zeros)))])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// MeasuredSections returns the sections systemd-stub 252 measures into PCR
// 11 for uki, in its order, each with the bytes it hashes. A UKI without
// .linux is refused, as the stub refuses to boot it.
func MeasuredSections(uki []byte) ([]Section, error) {
	var out []Section
	err := walkMeasured(uki, func(name string, s PESection) error {
		data, err := LoadedData(uki, s)
		if err != nil {
			return err
		}
		out = append(out, Section{Name: name, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// walkMeasured calls f for each section systemd-stub 252 measures, in its
// order, once the section's headers are checked.
func walkMeasured(uki []byte, f func(name string, s PESection) error) error {
	img, err := ParsePE(uki)
	if err != nil {
		return err
	}
	for _, name := range UnifiedSections {
		s, ok := img.Lookup(name)
		if !ok || s.VirtualSize == 0 {
			if name == ".linux" {
				return errors.New("UKI has no .linux section (systemd-stub refuses to boot it)")
			}
			continue
		}
		if name == ".pcrsig" {
			continue // not measured: it holds the signature over the measurements
		}
		if uint64(s.VirtualAddress)+uint64(s.VirtualSize) > uint64(img.SizeOfImage) {
			return fmt.Errorf("section %s (%#x+%#x) lies beyond SizeOfImage %#x; no loader loads this image", name, s.VirtualAddress, s.VirtualSize, img.SizeOfImage)
		}
		if err := checkAlone(img, s); err != nil {
			return err
		}
		if err := f(name, s); err != nil {
			return err
		}
	}
	return nil
}

// checkAlone refuses a measured section whose memory overlaps another
// section or the headers: the stub would then hash bytes of the other, which
// this package does not model (no UKI peerboot or ukify writes does that).
func checkAlone(img *PEImage, s PESection) error {
	start, end := uint64(s.VirtualAddress), uint64(s.VirtualAddress)+uint64(s.VirtualSize)
	if start < uint64(img.SizeOfHeaders) {
		return fmt.Errorf("section %s overlaps the PE headers in memory", s.NameString())
	}
	for _, o := range img.Sections {
		if o == s {
			continue
		}
		os, oe := uint64(o.VirtualAddress), uint64(o.VirtualAddress)+uint64(max(o.VirtualSize, o.SizeOfRawData))
		if os < end && start < oe {
			return fmt.Errorf("sections %s and %s overlap in memory", s.NameString(), o.NameString())
		}
	}
	return nil
}
