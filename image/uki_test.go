package image

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/stubtest"
	"github.com/peerboot/peerboot/internal/testguard"
)

const (
	testFA = 0x200
	testSA = 0x1000
)

type stubOpts struct {
	overlapVA   bool   // .data starts inside .text in memory
	overlapRaw  bool   // .data's file bytes overlap .text's
	extraName   string // rename .data (e.g. to ".linux")
	signed      bool   // certificate table present
	tightHeader bool   // section table fills the headers: no room to add
	subsystem   uint16
}

// makeStub builds a minimal but valid PE32+ EFI application, the shape of
// systemd's stub: .text and .data, SectionAlignment 4096, FileAlignment 512.
func makeStub(t *testing.T, o stubOpts) []byte {
	t.Helper()
	var b bytes.Buffer
	dos := make([]byte, 0x40)
	dos[0], dos[1] = 'M', 'Z'
	binary.LittleEndian.PutUint32(dos[0x3c:], 0x40)
	b.Write(dos)
	b.WriteString("PE\x00\x00")
	w := func(v any) {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	w(pe.FileHeader{Machine: pe.IMAGE_FILE_MACHINE_AMD64, NumberOfSections: 2, SizeOfOptionalHeader: 240, Characteristics: 0x206})
	hdrSize := uint32(0x400)
	if o.tightHeader {
		hdrSize = 0x200
	}
	sub := o.subsystem
	if sub == 0 {
		sub = pe.IMAGE_SUBSYSTEM_EFI_APPLICATION
	}
	opt := pe.OptionalHeader64{
		Magic: 0x20b, SizeOfCode: testFA, SizeOfInitializedData: testFA,
		AddressOfEntryPoint: 0x1000, BaseOfCode: 0x1000,
		SectionAlignment: testSA, FileAlignment: testFA,
		SizeOfImage: 0x3000, SizeOfHeaders: hdrSize, Subsystem: sub, NumberOfRvaAndSizes: 16,
	}
	if o.signed {
		opt.DataDirectory[4] = pe.DataDirectory{VirtualAddress: 0x1000, Size: 0x100}
	}
	w(opt)
	dataVA, dataRaw := uint32(0x2000), hdrSize+testFA
	if o.overlapVA {
		dataVA = 0x1008
	}
	if o.overlapRaw {
		dataRaw = hdrSize + 0x100
	}
	name := ".data"
	if o.extraName != "" {
		name = o.extraName
	}
	var n1, n2 [8]uint8
	copy(n1[:], ".text")
	copy(n2[:], name)
	w(pe.SectionHeader32{Name: n1, VirtualSize: 0x10, VirtualAddress: 0x1000, SizeOfRawData: testFA, PointerToRawData: hdrSize, Characteristics: 0x60000020})
	w(pe.SectionHeader32{Name: n2, VirtualSize: 0x20, VirtualAddress: dataVA, SizeOfRawData: testFA, PointerToRawData: dataRaw, Characteristics: 0xC0000040})
	out := make([]byte, hdrSize+2*testFA)
	copy(out, b.Bytes())
	copy(out[hdrSize:], []byte{0x31, 0xC0, 0xC3}) // xor eax,eax; ret
	copy(out[hdrSize+testFA:], "stub data")
	return out
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func testUKI(t *testing.T) UKI {
	return UKI{
		Stub:      makeStub(t, stubOpts{}),
		Kernel:    pattern(100001, 1), // odd sizes exercise the padding
		Initrd:    pattern(77777, 2),
		Cmdline:   "console=ttyS0 peerboot.selftest=1",
		OSRelease: "ID=peerboot\nVERSION_ID=1\nPRETTY_NAME=\"peerboot\"\n",
	}
}

func buildUKI(t *testing.T, u UKI) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := WriteUKI(&out, u); err != nil {
		t.Fatalf("WriteUKI: %v", err)
	}
	return out.Bytes()
}

// checkUKI re-reads a UKI with debug/pe and checks the layout rules.
func checkUKI(t *testing.T, out []byte, u UKI, stubSections int) {
	t.Helper()
	f, err := pe.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatalf("debug/pe cannot read the UKI: %v", err)
	}
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		t.Fatalf("not PE32+")
	}
	sa, fa := oh.SectionAlignment, oh.FileAlignment
	want := map[string][]byte{".osrel": []byte(u.OSRelease), ".cmdline": []byte(u.Cmdline), ".initrd": u.Initrd, ".linux": u.Kernel}
	names := []string{}
	for _, s := range f.Sections {
		names = append(names, s.Name)
	}
	if got, exp := len(f.Sections), stubSections+4; got != exp {
		t.Fatalf("sections %v, want %d", names, exp)
	}
	if tail := strings.Join(names[stubSections:], " "); tail != ".osrel .cmdline .initrd .linux" {
		t.Errorf("new sections %q, want .linux last", tail)
	}
	stub, _ := pe.NewFile(bytes.NewReader(u.Stub))
	for i, s := range f.Sections {
		if i < stubSections {
			a, _ := s.Data()
			b, _ := stub.Sections[i].Data()
			if s.SectionHeader != stub.Sections[i].SectionHeader || !bytes.Equal(a, b) {
				t.Errorf("stub section %s changed", s.Name)
			}
			continue
		}
		prev := f.Sections[i-1]
		prevEnd := prev.VirtualAddress + max(prev.VirtualSize, prev.Size)
		if s.VirtualAddress%sa != 0 || s.VirtualAddress < prevEnd || s.VirtualAddress-prevEnd >= sa {
			t.Errorf("%s VA %#x: want previous end %#x rounded up to %#x", s.Name, s.VirtualAddress, prevEnd, sa)
		}
		if s.Offset%fa != 0 || s.Size%fa != 0 {
			t.Errorf("%s raw %#x+%#x not aligned to %#x", s.Name, s.Offset, s.Size, fa)
		}
		if s.Characteristics != 0x40000040 {
			t.Errorf("%s characteristics %#x", s.Name, s.Characteristics)
		}
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		exp := want[s.Name]
		align := int(fa) // the file data's padding: to FileAlignment, the .initrd's to whole MiB
		if s.Name == ".initrd" {
			align = InitrdRawAlign
		}
		if !bytes.Equal(data[:len(exp)], exp) || len(data)-len(exp) >= align || len(data)%align != 0 || !allZero(data[len(exp):]) {
			t.Errorf("%s data (%d bytes) is not the input (%d bytes) padded with zeros to %d", s.Name, len(data), len(exp), align)
		}
		if s.Name != ".linux" && s.VirtualSize != uint32(len(exp)) {
			t.Errorf("%s VirtualSize %d, want %d", s.Name, s.VirtualSize, len(exp))
		}
	}
	last := f.Sections[len(f.Sections)-1]
	if exp := (last.VirtualAddress + last.VirtualSize + sa - 1) / sa * sa; oh.SizeOfImage != exp {
		t.Errorf("SizeOfImage %#x, want %#x", oh.SizeOfImage, exp)
	}
	if uint64(last.Offset+last.Size) != uint64(len(out)) {
		t.Errorf("file is %d bytes, last section ends at %d", len(out), last.Offset+last.Size)
	}
	if oh.CheckSum != 0 {
		t.Errorf("CheckSum %#x, want 0 (as ukify writes it)", oh.CheckSum)
	}
}

func TestWriteUKILayout(t *testing.T) {
	u := testUKI(t)
	out := buildUKI(t, u)
	checkUKI(t, out, u, 2)
	f, _ := pe.NewFile(bytes.NewReader(out))
	oh := f.OptionalHeader.(*pe.OptionalHeader64)
	if oh.SizeOfInitializedData <= testFA+uint32(len(u.Kernel)+len(u.Initrd)) {
		t.Errorf("SizeOfInitializedData %#x not updated", oh.SizeOfInitializedData)
	}
	if !bytes.Equal(out, buildUKI(t, u)) {
		t.Error("two builds differ")
	}
}

// A bzImage carries a PE header whose SizeOfImage covers what the kernel
// needs in memory; .linux must reserve that much.
func TestWriteUKIKernelSizeOfImage(t *testing.T) {
	u := testUKI(t)
	u.Kernel = makeStub(t, stubOpts{}) // a PE file, SizeOfImage 0x3000 > its 0x800 bytes
	out := buildUKI(t, u)
	f, err := pe.NewFile(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Section(".linux")
	if s.VirtualSize != 0x3000 {
		t.Errorf(".linux VirtualSize %#x, want the kernel's SizeOfImage 0x3000", s.VirtualSize)
	}
	checkUKI(t, out, u, 2)
}

func TestWriteUKIOptionalParts(t *testing.T) {
	u := testUKI(t)
	u.Initrd, u.OSRelease = nil, ""
	f, err := pe.NewFile(bytes.NewReader(buildUKI(t, u)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range f.Sections {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); got != ".text .data .cmdline .linux" {
		t.Errorf("sections %q", got)
	}
}

func TestWriteUKIRejects(t *testing.T) {
	good := testUKI(t)
	cases := map[string]func(u *UKI){
		"not PE":        func(u *UKI) { u.Stub = []byte("#!/bin/sh\necho this is not a PE file\n") },
		"MZ without PE": func(u *UKI) { u.Stub = append([]byte("MZ"), make([]byte, 200)...) },
		"truncated":     func(u *UKI) { u.Stub = u.Stub[:0x300] },
		"empty stub":    func(u *UKI) { u.Stub = nil },
		"overlap VA":    func(u *UKI) { u.Stub = makeStub(t, stubOpts{overlapVA: true}) },
		"overlap raw":   func(u *UKI) { u.Stub = makeStub(t, stubOpts{overlapRaw: true}) },
		"already UKI":   func(u *UKI) { u.Stub = makeStub(t, stubOpts{extraName: ".linux"}) },
		"signed":        func(u *UKI) { u.Stub = makeStub(t, stubOpts{signed: true}) },
		"no room":       func(u *UKI) { u.Stub = makeStub(t, stubOpts{tightHeader: true}) },
		"not EFI":       func(u *UKI) { u.Stub = makeStub(t, stubOpts{subsystem: pe.IMAGE_SUBSYSTEM_WINDOWS_CUI}) },
		"no kernel":     func(u *UKI) { u.Kernel = nil },
	}
	for name, mutate := range cases {
		u := good
		mutate(&u)
		var out bytes.Buffer
		err := WriteUKI(&out, u)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if out.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", name, out.Len())
		}
		t.Logf("%s: %v", name, err)
	}
	// Bit flips in the headers must never panic.
	for i := 0; i < 0x200; i++ {
		u := good
		u.Stub = append([]byte(nil), good.Stub...)
		u.Stub[i] ^= 0xFF
		_ = WriteUKI(&bytes.Buffer{}, u)
	}
}

var objdumpLine = regexp.MustCompile(`^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+2\*\*\d+`)

type objSection struct {
	name            string
	size, vma, foff uint64
}

// objdumpSections runs binutils' objdump -h, an independent PE reader.
func objdumpSections(t *testing.T, path string) []objSection {
	t.Helper()
	if _, err := exec.LookPath("objdump"); err != nil {
		testguard.Skip(t, "objdump not installed (make deps installs binutils); skipping the cross-check")
	}
	out, err := exec.Command("objdump", "-h", path).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump -h: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "pei-x86-64") {
		t.Fatalf("objdump does not see a PE32+ image:\n%s", out)
	}
	var secs []objSection
	for _, l := range strings.Split(string(out), "\n") {
		m := objdumpLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		p := func(s string) uint64 { v, _ := strconv.ParseUint(s, 16, 64); return v }
		secs = append(secs, objSection{m[1], p(m[2]), p(m[3]), p(m[5])})
	}
	return secs
}

func checkObjdump(t *testing.T, out []byte, sa, fa uint64) {
	t.Helper()
	path := t.TempDir() + "/uki.efi"
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	secs := objdumpSections(t, path)
	var names []string
	for _, s := range secs {
		names = append(names, s.name)
	}
	n := len(secs)
	if n < 4 || strings.Join(names[n-4:], " ") != ".osrel .cmdline .initrd .linux" {
		t.Fatalf("objdump sections %v", names)
	}
	for i := n - 4; i < n; i++ {
		s := secs[i]
		if s.vma%sa != 0 || s.foff%fa != 0 || s.vma <= secs[i-1].vma || s.foff <= secs[i-1].foff {
			t.Errorf("objdump: %s VMA %#x offset %#x (previous %#x/%#x)", s.name, s.vma, s.foff, secs[i-1].vma, secs[i-1].foff)
		}
	}
}

func TestWriteUKIObjdump(t *testing.T) {
	checkObjdump(t, buildUKI(t, testUKI(t)), testSA, testFA)
}

// realStub is systemd's linuxx64.efi.stub as the default lock pins it
// (stubtest.Real: from the store `peerboot fetch` fills, or PEERBOOT_STUB).
func realStub(t *testing.T) []byte { return stubtest.Real(t, "../recipes/default.lock") }

// TestWriteUKIRealStub runs against systemd's own stub (realStub); the other
// UKI tests use the synthetic stub above.
func TestWriteUKIRealStub(t *testing.T) {
	stub := realStub(t)
	if len(stub) < 0x400 || string(stub[:2]) != "MZ" {
		t.Fatalf("the real stub is %d bytes and no PE image", len(stub))
	}
	sf, err := pe.NewFile(bytes.NewReader(stub))
	if err != nil {
		t.Fatal(err)
	}
	u := testUKI(t)
	u.Stub = stub
	out := buildUKI(t, u)
	checkUKI(t, out, u, len(sf.Sections))
	oh := sf.OptionalHeader.(*pe.OptionalHeader64)
	checkObjdump(t, out, uint64(oh.SectionAlignment), uint64(oh.FileAlignment))
	f, _ := pe.NewFile(bytes.NewReader(out))
	if f.FileHeader.PointerToSymbolTable != 0 || f.FileHeader.NumberOfSymbols != 0 {
		t.Error("symbol table pointer kept after dropping the table")
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// An edit that changes the initrd's tail and its size within the same MiB
// (what an overlay edit does to the config segment) leaves the UKI's size and
// every byte outside the headers and the initrd's changed tail as they were;
// one that crosses a MiB grows the UKI by a MiB.
func TestWriteUKIInitrdEditKeepsLayout(t *testing.T) {
	u := testUKI(t)
	u.Initrd = pattern(3<<20+5000, 2)
	a := buildUKI(t, u)
	for _, tc := range []struct {
		name string
		grow int
		same bool
	}{
		{"tail rewritten, same size", 0, true},
		{"grown by 3000 bytes", 3000, true},
		{"shrunk by 4000 bytes", -4000, true},
		{"grown past the MiB", 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := u
			keep := len(u.Initrd) - 20000 // the unchanged prefix
			v.Initrd = append(bytes.Clone(u.Initrd[:keep]), pattern(20000+tc.grow, 9)...)
			b := buildUKI(t, v)
			if (len(a) == len(b)) != tc.same {
				t.Fatalf("UKI %d bytes, before %d: same size should be %v", len(b), len(a), tc.same)
			}
			fa, _ := pe.NewFile(bytes.NewReader(a))
			fb, _ := pe.NewFile(bytes.NewReader(b))
			la, lb := fa.Section(".linux"), fb.Section(".linux")
			if (la.Offset == lb.Offset && la.VirtualAddress == lb.VirtualAddress) != tc.same {
				t.Errorf(".linux at %#x (VA %#x), before %#x (VA %#x)", lb.Offset, lb.VirtualAddress, la.Offset, la.VirtualAddress)
			}
			if !tc.same {
				return
			}
			headers := int(fa.OptionalHeader.(*pe.OptionalHeader64).SizeOfHeaders)
			changed := int(fa.Section(".initrd").Offset) + keep
			for i := range a {
				if a[i] != b[i] && i >= headers && i < changed {
					t.Fatalf("byte %#x differs: neither in the headers (< %#x) nor in the initrd's rewritten tail (>= %#x)", i, headers, changed)
				}
			}
		})
	}
}

// With the initrd padded to whole MiB (as the initramfs stage writes it), an
// edit that keeps its padded size leaves every header byte of the UKI as it
// was: the two files first differ inside the initrd, where it changed. That
// is what lets the store resume the UKI's and the ISO's hash (issue 34).
func TestWriteUKIHeaderStableAcrossInitrdEdit(t *testing.T) {
	u := testUKI(t)
	u.Initrd = append(pattern(3<<20-4096, 2), make([]byte, 4096)...)
	v := u
	v.Initrd = append(pattern(3<<20-4096, 2), make([]byte, 4096)...)
	copy(v.Initrd[3<<20-6000:], "an overlay edit")
	a, b := buildUKI(t, u), buildUKI(t, v)
	if len(a) != len(b) {
		t.Fatalf("UKI %d bytes, before %d", len(b), len(a))
	}
	f, err := pe.NewFile(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	initrd := f.Section(".initrd")
	diff := -1
	for i := range a {
		if a[i] != b[i] {
			diff = i
			break
		}
	}
	if want := int(initrd.Offset) + 3<<20 - 6000; diff != want {
		t.Errorf("the UKIs first differ at %d, want %d (the edit's place in the initrd at %d)", diff, want, initrd.Offset)
	}
	if initrd.VirtualSize != initrd.Size {
		t.Errorf(".initrd VirtualSize %d != SizeOfRawData %d for a whole-MiB initrd", initrd.VirtualSize, initrd.Size)
	}
}
