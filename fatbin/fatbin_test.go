package fatbin

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// build writes a section of fatbins, each a list of entries, with payloads of n bytes
// and 8-byte zero padding after a fatbin whose size is not a multiple of 8.
func build(fatbins [][]Entry, payload int) []byte {
	var sec bytes.Buffer
	le := binary.LittleEndian
	for _, es := range fatbins {
		var body bytes.Buffer
		for _, e := range es {
			h := make([]byte, 64)
			le.PutUint16(h[0:], uint16(e.Kind))
			le.PutUint16(h[2:], 0x0101)
			le.PutUint32(h[4:], uint32(len(h)))
			le.PutUint64(h[8:], uint64(payload))
			le.PutUint32(h[entryArchField:], uint32(e.SM))
			body.Write(h)
			body.Write(bytes.Repeat([]byte{0xAB}, payload))
		}
		h := make([]byte, fatHeaderSize)
		le.PutUint32(h[0:], magic)
		le.PutUint16(h[4:], 1)
		le.PutUint16(h[6:], fatHeaderSize)
		le.PutUint64(h[8:], uint64(body.Len()))
		sec.Write(h)
		sec.Write(body.Bytes())
		for sec.Len()%8 != 0 {
			sec.WriteByte(0)
		}
	}
	return sec.Bytes()
}

func TestParseAndCheck(t *testing.T) {
	// Shaped like Debian's libnccl.so.2 2.29.7 (CUDA 12.4): symmetric kernels with
	// cubins to sm_90 and compute_90 PTX; the device-linked collectives without PTX.
	sym := []Entry{{Cubin, 60}, {Cubin, 61}, {Cubin, 70}, {Cubin, 80}, {PTX, 90}, {Cubin, 90}}
	coll := []Entry{{Cubin, 60}, {Cubin, 61}, {Cubin, 70}, {Cubin, 80}, {Cubin, 90}}
	tiny := []Entry{{Cubin, 52}, {PTX, 52}}
	sec := build([][]Entry{sym, tiny, coll}, 5) // odd payloads: padding between fatbins
	fbs, err := Parse(sec)
	if err != nil {
		t.Fatal(err)
	}
	if len(fbs) != 3 || len(fbs[2].Entries) != 5 || fbs[2].Entries[4] != (Entry{Cubin, 90}) {
		t.Fatalf("parsed %+v", fbs)
	}
	for _, c := range []struct {
		sm      int
		missing []int
	}{
		{86, nil},       // sm_80 cubins run on 8.6
		{89, nil},       // and on 8.9
		{90, nil},       // sm_90 cubins
		{75, nil},       // sm_70 cubins; compute_52 PTX for the tiny one
		{100, []int{2}}, // compute_90 PTX JITs for the others, the collectives have none
		{120, []int{2}},
		{50, []int{0, 1, 2}},
	} {
		got := Check(fbs, c.sm)
		if !equal(got.Missing, c.missing) {
			t.Errorf("sm_%d: missing %v, want %v (%s)", c.sm, got.Missing, c.missing, got)
		}
	}
	cov := Check(fbs, 120)
	for _, want := range []string{"1 of 3 modules", "no code for sm_120", "cubins sm_52 sm_60 sm_61 sm_70 sm_80 sm_90", "PTX compute_52 compute_90"} {
		if !strings.Contains(cov.String(), want) {
			t.Errorf("%q lacks %q", cov, want)
		}
	}
	if s := Check(fbs, 89).String(); !strings.HasPrefix(s, "all 3 modules have code for sm_89") {
		t.Errorf("sm_89: %s", s)
	}
	// A native sm_120 cubin covers the RTX 5090, and a compute_120 PTX does too.
	for _, e := range []Entry{{Cubin, 120}, {PTX, 120}} {
		fbs, _ := Parse(build([][]Entry{append(append([]Entry{}, coll...), e)}, 8))
		if !Check(fbs, 120).OK() {
			t.Errorf("%s does not cover sm_120", e)
		}
	}
	// sm_120 code does not run on sm_100, nor PTX of a later arch on an earlier GPU.
	fbs, _ = Parse(build([][]Entry{{{Cubin, 120}, {PTX, 120}}}, 8))
	if Check(fbs, 100).OK() || Check(fbs, 90).OK() {
		t.Error("sm_120 code judged to run on an older GPU")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseRejects(t *testing.T) {
	good := build([][]Entry{{{Cubin, 90}}}, 8)
	le := binary.LittleEndian
	for name, mutate := range map[string]func([]byte){
		"fatbin longer than the section": func(b []byte) { le.PutUint64(b[8:], 1<<40) },
		"entry longer than its fatbin":   func(b []byte) { le.PutUint64(b[fatHeaderSize+8:], 1<<20) },
		"entry header too small":         func(b []byte) { le.PutUint32(b[fatHeaderSize+4:], 8) },
		"unknown entry kind":             func(b []byte) { le.PutUint16(b[fatHeaderSize:], 7) },
		"garbage instead of a header":    func(b []byte) { le.PutUint32(b[0:], 0x12345678) },
	} {
		b := append([]byte(nil), good...)
		mutate(b)
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if fbs, err := Parse(nil); err != nil || len(fbs) != 0 {
		t.Errorf("empty section: %v, %v", fbs, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(build([][]Entry{{{Cubin, 90}, {PTX, 90}}, {{Cubin, 52}}}, 3))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fbs, err := Parse(b)
		if err != nil {
			return
		}
		var total int64
		for _, fb := range fbs {
			if fb.Offset < 0 || fb.Size < fatHeaderSize || fb.Offset+fb.Size > int64(len(b)) {
				t.Fatalf("fatbin %+v outside the %d-byte section", fb, len(b))
			}
			total += fb.Size
		}
		if total > int64(len(b)) {
			t.Fatalf("fatbins cover %d bytes of %d", total, len(b))
		}
		Check(fbs, 120)
	})
}
