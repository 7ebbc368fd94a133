package nvrun

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// xzHeader is a stream header then a block header of flags, the given
// size fields (each one byte) and filters (id, props), padded to a multiple
// of 4 with its CRC32 left zero (xzDict does not check it: the decoder does).
func xzHeader(flags byte, sizes []byte, filters ...[]byte) []byte {
	body := append([]byte{flags}, sizes...)
	for _, f := range filters {
		body = append(body, f[0], byte(len(f)-1))
		body = append(body, f[1:]...)
	}
	n := 1 + len(body) + 4 // size byte, body, CRC32
	for n%4 != 0 {
		body = append(body, 0)
		n++
	}
	hdr := append([]byte{byte(n/4 - 1)}, body...)
	hdr = append(hdr, 0, 0, 0, 0)
	return append([]byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0, 0, 0, 0}, hdr...)
}

func TestXZDict(t *testing.T) {
	lzma2 := func(d byte) []byte { return []byte{0x21, d} }
	for _, c := range []struct {
		name string
		b    []byte
		dict int64
		ok   bool
	}{
		{"d=0: 4 KiB", xzHeader(0x00, nil, lzma2(0)), 4096, true},
		{"d=1: 6 KiB", xzHeader(0x00, nil, lzma2(1)), 6144, true},
		{"d=18: 2 MiB", xzHeader(0x00, nil, lzma2(18)), 2 << 20, true},
		{"d=19: 3 MiB", xzHeader(0x00, nil, lzma2(19)), 3 << 20, true},
		{"d=39: 3 GiB", xzHeader(0x00, nil, lzma2(39)), 3 << 30, true},
		{"d=40: 4 GiB - 1", xzHeader(0x00, nil, lzma2(40)), 1<<32 - 1, true},
		{"d=41: invalid", xzHeader(0x00, nil, lzma2(41)), 0, false},
		{"with both sizes", xzHeader(0xC0, []byte{5, 7}, lzma2(22)), 8 << 20, true},
		{"with the compressed size", xzHeader(0x40, []byte{5}, lzma2(22)), 8 << 20, true},
		{"with the uncompressed size", xzHeader(0x80, []byte{7}, lzma2(22)), 8 << 20, true},
		{"BCJ then LZMA2", xzHeader(0x01, nil, []byte{0x04}, lzma2(24)), 16 << 20, true},
		// The delta filter has one property byte too: it is not LZMA2's.
		{"delta then LZMA2", xzHeader(0x01, nil, []byte{0x03, 0x00}, lzma2(22)), 8 << 20, true},
		{"no LZMA2", xzHeader(0x00, nil, []byte{0x04}), 0, false},
		// LZMA2's property byte the last byte the header size covers (here no
		// CRC32 follows it, which the decoder checks, not xzDict): read.
		{"properties to the header's end", []byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0, 0, 0, 0, 1, 0xC0, 0x80, 0x01, 5, 0x21, 1, 22}, 8 << 20, true},
		{"index, no block", append([]byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0, 0, 0, 0}, 0), 0, false},
		{"cut in the stream header", []byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0, 0, 0, 0}, 0, false},
		{"cut in the block header", xzHeader(0x00, nil, lzma2(22))[:16], 0, false},
		{"a size field that never ends", xzHeader(0x40, []byte{0x80}, lzma2(22)), 0, false},
	} {
		d, ok := xzDict(c.b)
		if d != c.dict || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, d, ok, c.dict, c.ok)
		}
	}
}

// admit's bounds hold at exactly each limit and refuse one byte past it.
func TestAdmitBounds(t *testing.T) {
	lim := Limits{File: 100, Taken: 150, Payload: 1000, Ratio: 2, RatioSlack: 10, Window: 1 << 20}.withDefaults()
	if lim.File != 100 || lim.Window != 1<<20 {
		t.Fatalf("withDefaults changed set fields: %+v", lim)
	}
	if d := (Limits{}).withDefaults(); d != DefaultLimits() {
		t.Fatalf("zero limits: %+v", d)
	}
	b := &budget{lim: lim, bound: lim.payloadBound(200), payload: 200} // 2*200+10 = 410
	if b.bound != 410 {
		t.Fatalf("payloadBound(200) = %d, want 410", b.bound)
	}
	if got := lim.payloadBound(10000); got != 1000 {
		t.Fatalf("payloadBound past the cap = %d, want the cap 1000", got)
	}
	if got := lim.payloadBound(495); got != 1000 {
		t.Fatalf("payloadBound(495) = %d, want exactly the cap 1000", got)
	}
	for _, c := range []struct {
		name  string
		size  int64
		stage bool
		err   string
	}{
		{"negative", -1, true, "declares -1 bytes"},
		{"exactly the file cap", 100, true, ""},
		{"past the file cap", 101, true, "more than the 100 one file may have"},
		{"up to the taken cap", 50, true, ""},
		{"past the taken cap", 1, true, "past the 150 all staged files together may have (150 staged)"},
		{"not staged: the taken cap does not apply", 100, false, ""},
	} {
		err := b.admit("f", c.size, 100, c.stage)
		if (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
	// The ratio bound: 410 bytes in all; admit counts what was already read.
	b = &budget{lim: Limits{File: 1000, Taken: 1000, Payload: 1000, Ratio: 2, RatioSlack: 10}, bound: 410, payload: 200, read: 10}
	if err := b.admit("g", 400, 1000, true); err != nil {
		t.Errorf("exactly the rest of the bound: %v", err)
	}
	if err := b.admit("g", 401, 1000, false); err == nil || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "2x plus 10; 10 already read") {
		t.Errorf("one past the bound: %v", err)
	}
	// Read stops at the bound: exactly bound bytes come through, then an error.
	b = &budget{r: bytes.NewReader(make([]byte, 100)), lim: Limits{Payload: 1000, Ratio: 2}, bound: 50, payload: 20}
	buf := make([]byte, 64)
	n, err := b.Read(buf)
	if n != 50 || err != nil {
		t.Fatalf("first read: %d %v, want 50", n, err)
	}
	if n, err := b.Read(buf); n != 0 || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "decompresses past 50 bytes (2x plus 0 for a 20-byte") {
		t.Fatalf("read past the bound: %d %v", n, err)
	}
	b = &budget{lim: Limits{Payload: 50}, bound: 50}
	if !strings.Contains(b.why(), "the cap of 50") {
		t.Errorf("why at the cap: %s", b.why())
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// The budget reader reports a decoder's window or memory bound as ErrTooLarge,
// and passes any other error through as it is.
func TestBudgetErrors(t *testing.T) {
	for _, c := range []struct {
		err   error
		large bool
	}{
		{zstd.ErrWindowSizeExceeded, true},
		{zstd.ErrDecoderSizeExceeded, true},
		{io.ErrUnexpectedEOF, false},
		{errors.New("corrupt block"), false},
	} {
		b := &budget{r: errReader{c.err}, lim: Limits{Window: 1 << 20}, bound: 100}
		_, err := b.Read(make([]byte, 10))
		if errors.Is(err, ErrTooLarge) != c.large || !errors.Is(err, c.err) && !c.large {
			t.Errorf("%v: got %v, ErrTooLarge %v", c.err, err, c.large)
		}
	}
}

// More edges: a read that starts part-way through the budget is cut to what
// is left; a zero-size entry is admitted; a size field of ten bytes (past
// xz's nine) or one that runs to the end of the header is no header.
func TestBudgetEdges(t *testing.T) {
	b := &budget{r: bytes.NewReader(make([]byte, 100)), lim: Limits{Payload: 1000, Ratio: 2}, bound: 50, payload: 20}
	if n, err := b.Read(make([]byte, 30)); n != 30 || err != nil {
		t.Fatalf("first read: %d %v", n, err)
	}
	if n, err := b.Read(make([]byte, 64)); n != 20 || err != nil {
		t.Fatalf("second read: %d %v, want the 20 bytes left", n, err)
	}
	b = &budget{lim: Limits{Taken: 10}, bound: 100}
	if err := b.admit("empty", 0, 100, true); err != nil {
		t.Fatalf("a zero-size entry: %v", err)
	}
	ten := append(bytes.Repeat([]byte{0x80}, 9), 0x01)
	if _, ok := xzDict(xzHeader(0x40, ten, []byte{0x21, 22})); ok {
		t.Error("a 10-byte size field was read")
	}
	nine := append(bytes.Repeat([]byte{0x80}, 8), 0x01)
	if d, ok := xzDict(xzHeader(0x40, nine, []byte{0x21, 22})); !ok || d != 8<<20 {
		t.Errorf("a 9-byte size field: %d %v", d, ok)
	}
	runaway := []byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0, 0, 0, 0, 1, 0x40, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}
	if _, ok := xzDict(runaway); ok {
		t.Error("a size field that runs to the header's end was read")
	}
}
