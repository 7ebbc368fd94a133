// Package fatbin reads which GPU architectures a CUDA library carries code for: the
// fatbins in an ELF shared object's .nv_fatbin section, each a list of cubins (machine
// code for one sm_XY) and PTX (for the driver to JIT). It reads headers only, never
// the code, so it serves to check a library such as libnccl.so.2 against the GPUs of
// a platform before they ever meet.
//
// The layout, as found in the libraries nvcc writes (and checked against Debian's
// libnccl.so.2 2.29.7, whose 24 fatbins parse to the byte with it): a fatbin is a
// 16-byte header (uint32 magic 0xBA55ED50, uint16 version, uint16 header size,
// uint64 size of the entries that follow), then entries, each a header (uint16 kind:
// 1 PTX, 2 cubin; uint16; uint32 header size; uint64 payload size; ...; uint32 arch
// at offset 28, as major*10+minor) followed by its payload. Fatbins in a section are
// 8-byte aligned. All little-endian.
package fatbin

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Kind is what an entry holds.
type Kind int

// Entry kinds.
const (
	PTX   Kind = 1 // virtual-architecture code, compiled by the driver for the GPU at load
	Cubin Kind = 2 // machine code for one architecture
)

// Entry is one code object of a fatbin.
type Entry struct {
	Kind Kind
	SM   int // major*10+minor: 90 for sm_90 / compute_90
}

func (e Entry) String() string {
	if e.Kind == PTX {
		return fmt.Sprintf("compute_%d", e.SM)
	}
	return fmt.Sprintf("sm_%d", e.SM)
}

// Fatbin is one module's code: one fatbin of the section.
type Fatbin struct {
	Offset  int64 // within the section
	Size    int64 // header and entries
	Entries []Entry
}

const (
	magic          = 0xBA55ED50
	fatHeaderSize  = 16
	entryArchField = 28 // offset of the arch in an entry header
	minEntryHeader = entryArchField + 4
)

// Parse reads every fatbin of a .nv_fatbin section.
func Parse(sec []byte) ([]Fatbin, error) {
	var out []Fatbin
	le := binary.LittleEndian
	for pos := 0; pos+fatHeaderSize <= len(sec); {
		if le.Uint32(sec[pos:]) != magic {
			// Padding between fatbins: they are 8-byte aligned.
			if le.Uint64(sec[pos:]) != 0 && pos%8 == 0 {
				return nil, fmt.Errorf("offset %#x: want a fatbin header (magic %#x) or zero padding, got %#x", pos, magic, le.Uint32(sec[pos:]))
			}
			pos += 8 - pos%8
			continue
		}
		hs := int(le.Uint16(sec[pos+6:]))
		size := le.Uint64(sec[pos+8:])
		if hs < fatHeaderSize || size > uint64(len(sec)) || pos+hs+int(size) > len(sec) {
			return nil, fmt.Errorf("offset %#x: fatbin of %d+%d bytes runs past the section (%d bytes)", pos, hs, size, len(sec))
		}
		fb := Fatbin{Offset: int64(pos), Size: int64(hs) + int64(size)}
		end := pos + hs + int(size)
		for e := pos + hs; e < end; {
			if e+minEntryHeader > end {
				return nil, fmt.Errorf("offset %#x: entry header runs past its fatbin", e)
			}
			kind := Kind(le.Uint16(sec[e:]))
			ehs := uint64(le.Uint32(sec[e+4:]))
			payload := le.Uint64(sec[e+8:])
			if ehs < minEntryHeader || ehs > uint64(end-e) || payload > uint64(end-e)-ehs {
				return nil, fmt.Errorf("offset %#x: entry of %d+%d bytes runs past its fatbin", e, ehs, payload)
			}
			if kind != PTX && kind != Cubin {
				return nil, fmt.Errorf("offset %#x: entry kind %d: want 1 (PTX) or 2 (cubin)", e, kind)
			}
			fb.Entries = append(fb.Entries, Entry{Kind: kind, SM: int(le.Uint32(sec[e+entryArchField:]))})
			e += int(ehs + payload)
		}
		out = append(out, fb)
		pos = end
	}
	return out, nil
}

// ErrNoFatbin means the file has no .nv_fatbin section: no GPU code at all.
var ErrNoFatbin = errors.New("no .nv_fatbin section")

// maxSection bounds what ReadELF reads into memory; libnccl.so.2's is about 90 MB.
const maxSection = 1 << 30

// ReadELF reads the fatbins of an ELF shared object or executable.
func ReadELF(r io.ReaderAt) ([]Fatbin, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := f.Section(".nv_fatbin")
	if s == nil {
		return nil, ErrNoFatbin
	}
	if s.Size > maxSection {
		return nil, fmt.Errorf(".nv_fatbin is %d bytes, more than the %d this reads", s.Size, maxSection)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .nv_fatbin: %w", err)
	}
	fbs, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf(".nv_fatbin: %w", err)
	}
	return fbs, nil
}

// Runs says whether the fatbin has code a GPU of compute capability sm can run: a
// cubin of the same major version and no higher minor (cubins are binary compatible
// within a major version only: sm_80 code runs on sm_86 and sm_89, never on sm_90 or
// sm_120), or PTX of a virtual architecture no higher than sm, which the driver JITs.
// The arch-specific variants (sm_90a) run only on their own arch; their headers do
// not tell them apart here, so a library of only such cubins is judged too kindly.
func (f Fatbin) Runs(sm int) bool {
	for _, e := range f.Entries {
		switch e.Kind {
		case Cubin:
			if e.SM/10 == sm/10 && e.SM <= sm {
				return true
			}
		case PTX:
			if e.SM <= sm {
				return true
			}
		}
	}
	return false
}

// Coverage is what a library offers one GPU architecture.
type Coverage struct {
	SM        int
	Modules   int      // fatbins in the library
	Missing   []int    // indexes of the fatbins with no code for SM
	MissingMB float64  // their size
	Cubins    []string // every cubin arch in the library, sorted: "sm_60", ...
	PTX       []string // every PTX arch in the library, sorted
}

// OK says every module has code for the architecture.
func (c Coverage) OK() bool { return len(c.Missing) == 0 }

// Check says which of fbs can run on a GPU of compute capability sm.
func Check(fbs []Fatbin, sm int) Coverage {
	c := Coverage{SM: sm, Modules: len(fbs)}
	cub, ptx := map[int]bool{}, map[int]bool{}
	for i, f := range fbs {
		for _, e := range f.Entries {
			if e.Kind == PTX {
				ptx[e.SM] = true
			} else {
				cub[e.SM] = true
			}
		}
		if !f.Runs(sm) {
			c.Missing = append(c.Missing, i)
			c.MissingMB += float64(f.Size) / (1 << 20)
		}
	}
	c.Cubins = archList(cub, "sm_")
	c.PTX = archList(ptx, "compute_")
	return c
}

func archList(m map[int]bool, prefix string) []string {
	var sms []int
	for sm := range m {
		sms = append(sms, sm)
	}
	sort.Ints(sms)
	out := make([]string, len(sms))
	for i, sm := range sms {
		out[i] = fmt.Sprintf("%s%d", prefix, sm)
	}
	return out
}

// String says it for a person: "all 24 modules have code for sm_89" or which lack it.
func (c Coverage) String() string {
	arches := "cubins " + orNone(c.Cubins) + "; PTX " + orNone(c.PTX)
	if c.OK() {
		return fmt.Sprintf("all %d modules have code for sm_%d (%s)", c.Modules, c.SM, arches)
	}
	return fmt.Sprintf("%d of %d modules (%.0f MiB) have no code for sm_%d, neither an sm_%dx cubin nor PTX to JIT (%s)",
		len(c.Missing), c.Modules, c.MissingMB, c.SM, c.SM/10, arches)
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(slices.Clone(l), " ")
}
