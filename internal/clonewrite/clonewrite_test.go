package clonewrite

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// op is one call a writer makes on its file.
type op struct {
	kind byte // 'w' Write, 'a' WriteAt, 't' Truncate
	off  int64
	data []byte
}

func write(p []byte) op              { return op{kind: 'w', data: p} }
func writeAt(off int64, p []byte) op { return op{kind: 'a', off: off, data: p} }
func truncate(n int64) op            { return op{kind: 't', off: n} }

// target is what both the fresh *os.File and a *File give the ops.
type target interface {
	io.Writer
	io.WriterAt
	Truncate(int64) error
}

func apply(t testing.TB, f target, ops []op) {
	t.Helper()
	for i, o := range ops {
		var err error
		switch o.kind {
		case 'w':
			_, err = f.Write(o.data)
		case 'a':
			_, err = f.WriteAt(o.data, o.off)
		case 't':
			err = f.Truncate(o.off)
		}
		if err != nil {
			t.Fatalf("op %d (%c): %v", i, o.kind, err)
		}
	}
}

// extent is data at an offset of a sparse file; the rest is holes.
type extent struct {
	off  int64
	data []byte
}

// writeSparse writes size bytes to path: the extents' data, holes elsewhere.
func writeSparse(t testing.TB, path string, size int64, exts ...extent) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, e := range exts {
		if _, err := f.WriteAt(e.data, e.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func random(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// with returns a copy of b with p at off.
func with(b []byte, off int, p []byte) []byte {
	c := bytes.Clone(b)
	copy(c[off:], p)
	return c
}

// copyClone stands in for FICLONE on a filesystem without reflinks: the
// comparing logic is the same over a copy (holes kept).
func copyClone(dst, src *os.File) error {
	info, err := src.Stat()
	if err != nil {
		return err
	}
	for pos := int64(0); pos < info.Size(); {
		data, err := unix.Seek(int(src.Fd()), pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		} else if err != nil {
			return err
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(dst, data), io.NewSectionReader(src, data, hole-data)); err != nil {
			return err
		}
		pos = hole
	}
	return dst.Truncate(info.Size())
}

const KiB, MiB = 1 << 10, 1 << 20

var (
	r300 = random(1, 300*KiB)
	r1M  = random(2, MiB)
	tail = random(3, 64*KiB)
)

var cases = []struct {
	name      string
	size      int64 // the base file's
	base      []extent
	ops       []op
	written   int64 // bytes written when cloned; -1: less than the whole file; -2: not checked
	holeFrom  int64 // with holeTo, a range that must be a hole afterwards
	holeTo    int64
	noBase    bool
	wantClone bool
}{
	{name: "equal", size: 300 * KiB, base: []extent{{0, r300}}, ops: []op{write(r300)}, written: 0},
	{name: "one changed byte", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{write(with(r300, 150*KiB+7, []byte{^r300[150*KiB+7]}))}, written: 1},
	{name: "one changed block", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{write(with(r300, 128*KiB, random(4, 64*KiB)))}, written: -1},
	{name: "grown", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{write(r300), write(tail)}, written: 64 * KiB},
	{name: "shrunk", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{write(r300[:100*KiB])}, written: 0},
	{name: "shrunk by truncate", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{write(r300), truncate(1000)}, written: 0},
	{name: "zeros over a hole stay a hole", size: 2 * MiB, base: []extent{{0, tail}, {MiB + 64*KiB, tail}},
		ops:     []op{write(tail), write(make([]byte, MiB)), write(tail), truncate(2 * MiB)},
		written: 0, holeFrom: 64 * KiB, holeTo: MiB},
	{name: "a hole where the base has data", size: MiB, base: []extent{{0, r1M}},
		ops:     []op{truncate(MiB), writeAt(0, r1M[:64*KiB]), writeAt(512*KiB, r1M[512*KiB:576*KiB])},
		written: 0, holeFrom: 64 * KiB, holeTo: 512 * KiB},
	{name: "data where the base has a hole", size: MiB, base: []extent{{0, tail}},
		ops: []op{write(tail), writeAt(256*KiB, r300[:10])}, written: 10},
	{name: "a byte after eight zeros, over a hole", size: MiB, base: []extent{{0, tail}},
		ops: []op{write(tail), writeAt(256*KiB, append(make([]byte, 8), 'x'))}, written: 1},
	{name: "a write spanning blocks", size: MiB, base: []extent{{0, r1M}},
		ops: []op{write(r1M), writeAt(64*KiB-3, []byte("spans three blocks: "+strings.Repeat("x", 64*KiB)))}, written: -1},
	{name: "disk-like: truncate to 0 then to size, then structures", size: 4 * MiB, base: []extent{{0, r300}, {2 * MiB, r1M}},
		ops:     []op{truncate(0), truncate(4 * MiB), writeAt(0, r300[:512]), writeAt(2*MiB, r1M[:100*KiB]), writeAt(4*MiB-512, r300[:512])},
		written: 512, holeFrom: 2*MiB + 100*KiB, holeTo: 3 * MiB},
	{name: "truncate shrinks then grows", size: MiB, base: []extent{{0, r1M}},
		ops: []op{write(r1M), truncate(100 * KiB), truncate(MiB)}, written: 0, holeFrom: 128 * KiB, holeTo: MiB},
	{name: "a header rewritten after the body", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{writeAt(0, make([]byte, 4096)), writeAt(4096, r300[4096:]), writeAt(0, r300[:4096])}, written: 8192}, // a placeholder, then the header again
	{name: "zeros past the base's end", size: 64 * KiB, base: []extent{{0, tail}},
		ops: []op{write(tail), write(make([]byte, 200*KiB)), write(tail)}, written: 64 * KiB, holeFrom: 64 * KiB, holeTo: 256 * KiB},
	{name: "rewritten back to the base's bytes after a truncate cut the first write", size: 300 * KiB, base: []extent{{0, r300}},
		ops: []op{writeAt(200*KiB, random(9, 10*KiB)), truncate(100 * KiB), writeAt(200*KiB, r300[200*KiB:210*KiB])}, written: -2},
	{name: "empty result", size: 300 * KiB, base: []extent{{0, r300}}, ops: nil, written: 0},
	{name: "no base", noBase: true, ops: []op{write(r300)}, written: -1},
	{name: "no base, cut by truncate", noBase: true, ops: []op{write(r300), truncate(1000)}, written: -1},
}

// TestMatchesFreshWrite runs each case's writes on a fresh file and on a
// clone of the base (a copy here), and wants the same bytes, the base
// untouched, and only the differing bytes written.
func TestMatchesFreshWrite(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			runCase(t, dir, func(path, base string) (*File, error) {
				return create(path, base, 0o644, copyClone)
			}, c.name, c.size, c.base, c.ops, c.written, c.holeFrom, c.holeTo, c.noBase, !c.noBase)
		})
	}
}

func runCase(t *testing.T, dir string, open func(path, base string) (*File, error), name string, size int64, baseExts []extent, ops []op, written, holeFrom, holeTo int64, noBase, wantClone bool) {
	t.Helper()
	base := filepath.Join(dir, "base")
	if noBase {
		base = ""
	} else {
		writeSparse(t, base, size, baseExts...)
	}
	baseSum := sum(t, base)
	fresh, err := os.Create(filepath.Join(dir, "fresh"))
	if err != nil {
		t.Fatal(err)
	}
	apply(t, fresh, ops)
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := open(filepath.Join(dir, "new"), base)
	if err != nil {
		t.Fatal(err)
	}
	if w.Cloned() != wantClone {
		t.Fatalf("Cloned() = %v (reason %q), want %v", w.Cloned(), w.Reason(), wantClone)
	}
	apply(t, w, ops)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(fresh.Name())
	got, _ := os.ReadFile(w.Name())
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes, a fresh write %d; first difference at %d", name, len(got), len(want), i)
	}
	if w.Size() != int64(len(want)) {
		t.Errorf("Size() = %d, want %d", w.Size(), len(want))
	}
	if sum(t, base) != baseSum {
		t.Fatal("the base file changed")
	}
	if wantClone && written >= 0 && w.Written() != written {
		t.Errorf("wrote %d bytes, want %d", w.Written(), written)
	}
	if wantClone && written == -1 && w.Written() >= int64(len(want)) && len(want) > 0 {
		t.Errorf("wrote %d of %d bytes: the whole file", w.Written(), len(want))
	}
	if holeTo > 0 {
		f, _ := os.Open(w.Name())
		defer f.Close()
		data, err := unix.Seek(int(f.Fd()), holeFrom, unix.SEEK_DATA)
		if err == nil && data < holeTo {
			t.Errorf("data at %d, want a hole over [%d, %d)", data, holeFrom, holeTo)
		}
	}
}

func sum(t testing.TB, path string) string {
	if path == "" {
		return ""
	}
	s, err := fsutil.HashFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCloneFails: a filesystem that cannot clone gets the whole write.
func TestCloneFails(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	writeSparse(t, base, 300*KiB, extent{0, r300})
	w, err := create(filepath.Join(dir, "new"), base, 0o644, func(dst, src *os.File) error {
		dst.Write([]byte("half a clone")) // what a failed clone might leave
		return unix.EOPNOTSUPP
	})
	if err != nil {
		t.Fatal(err)
	}
	if w.Cloned() || !strings.Contains(w.Reason(), "no reflink here") {
		t.Fatalf("Cloned() = %v, Reason() = %q", w.Cloned(), w.Reason())
	}
	apply(t, w, []op{writeAt(10, []byte("x"))})
	w.Close()
	if got, _ := os.ReadFile(w.Name()); !bytes.Equal(got, append(make([]byte, 10), 'x')) {
		t.Errorf("got %q", got)
	}
	w, err = Create(filepath.Join(dir, "new2"), filepath.Join(dir, "missing"), 0o644)
	if err != nil || w.Cloned() || !strings.Contains(w.Reason(), "no previous file") {
		t.Fatalf("missing base: %v, %v", err, w.Reason())
	}
	w.Close()
}

// TestCover: the written spans merge as they touch.
func TestCover(t *testing.T) {
	for _, c := range []struct {
		in   [][2]int64
		want []span
	}{
		{[][2]int64{{0, 10}, {10, 20}}, []span{{0, 20}}},
		{[][2]int64{{0, 10}, {20, 30}, {5, 25}}, []span{{0, 30}}},
		{[][2]int64{{20, 30}, {0, 10}}, []span{{0, 10}, {20, 30}}},
		{[][2]int64{{20, 30}, {40, 50}, {0, 10}, {11, 19}}, []span{{0, 10}, {11, 19}, {20, 30}, {40, 50}}},
		{[][2]int64{{20, 30}, {40, 50}, {60, 70}, {25, 45}}, []span{{20, 50}, {60, 70}}},
		{[][2]int64{{20, 30}, {0, 100}}, []span{{0, 100}}},
		// Touching a span before the last at either end merges with it.
		{[][2]int64{{0, 10}, {20, 30}, {10, 15}}, []span{{0, 15}, {20, 30}}},
		{[][2]int64{{0, 10}, {20, 30}, {15, 20}}, []span{{0, 10}, {15, 30}}},
		{[][2]int64{{5, 5}}, nil},
	} {
		var w File
		for _, s := range c.in {
			w.covered = cover(w.covered, s[0], s[1])
		}
		if len(w.covered) != len(c.want) || (len(c.want) > 0 && !equalSpans(w.covered, c.want)) {
			t.Errorf("%v: %v, want %v", c.in, w.covered, c.want)
		}
	}
}

func equalSpans(a, b []span) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzMatchesFreshWrite turns bytes into a run of writes and truncates over
// a sparse random base and wants the clone's result equal to a fresh write's.
func FuzzMatchesFreshWrite(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 200, 0, 1, 50, 3, 3, 0, 9, 0, 0})
	f.Add([]byte{1, 255, 255, 2, 7, 7, 0, 128, 1, 1, 1, 1, 2, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		dir := t.TempDir()
		rng := rand.New(rand.NewSource(int64(len(prog))))
		data := random(5, 300*KiB) // a write reaches 1 KiB + 255*1031 bytes
		var ops []op
		for i := 0; i+2 < len(prog) && len(ops) < 32; i += 3 {
			off := int64(prog[i+1]) * 4 * KiB / 3
			n := int64(prog[i+2]) * 1031
			switch prog[i] % 4 {
			case 0:
				ops = append(ops, writeAt(off, data[off%KiB:off%KiB+n]))
			case 1:
				ops = append(ops, writeAt(off, make([]byte, n)))
			case 2:
				ops = append(ops, truncate(off+n))
			case 3:
				ops = append(ops, write(data[:n]))
			}
		}
		base := []extent{{int64(rng.Intn(64 * KiB)), data[:rng.Intn(200*KiB)]}, {320 * KiB, data[:64*KiB]}}
		runCase(t, dir, func(path, base string) (*File, error) {
			return create(path, base, 0o644, copyClone)
		}, "fuzz", 400*KiB, base, ops, -2, 0, 0, false, true)
	})
}

// TestOnXFS runs the cases with real reflinks, on an XFS loop mount made for
// the test (root and mkfs.xfs needed): each file is a clone, and the base's
// blocks are never written.
func TestOnXFS(t *testing.T) {
	dir := xfstest.Mount(t, 512*MiB)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub, err := os.MkdirTemp(dir, "case-")
			if err != nil {
				t.Fatal(err)
			}
			runCase(t, sub, func(path, base string) (*File, error) {
				return Create(path, base, 0o644)
			}, c.name, c.size, c.base, c.ops, c.written, c.holeFrom, c.holeTo, c.noBase, !c.noBase)
		})
	}
	// Across filesystems no clone is possible: the whole write.
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	writeSparse(t, base, 300*KiB, extent{0, r300})
	w, err := Create(filepath.Join(dir, "cross"), base, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if w.Cloned() || w.Reason() == "" {
		t.Errorf("a clone from another filesystem: Cloned() = %v, Reason() = %q", w.Cloned(), w.Reason())
	}
	w.Close()
}

// Changed lists where a clone may differ from its base: the bytes written that
// differed (not those written equal), what Close made zeros, and a size change;
// Assume takes the clone's bytes as written, unread, and refuses ranges
// written already or a file that is not a clone.
func TestChangedAndAssume(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	old := random(1, 4*blockSize)
	if err := os.WriteFile(base, old, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := create(filepath.Join(dir, "new"), base, 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite block 0 as it was but for 3 bytes at 100; take block 1 as it is;
	// leave block 2 unwritten (it becomes zeros); rewrite block 3 unchanged,
	// then grow the file by 10 bytes.
	b0 := bytes.Clone(old[:blockSize])
	copy(b0[100:], "xyz")
	if _, err := w.WriteAt(b0, 0); err != nil {
		t.Fatal(err)
	}
	if written, err := w.Assume(blockSize, 2*blockSize); err != nil || written != nil {
		t.Fatal(written, err)
	}
	// Over bytes written already, Assume leaves those to the caller.
	if written, err := w.Assume(blockSize-10, blockSize+5); err != nil || !slices.Equal(written, []Span{{blockSize - 10, blockSize}}) {
		t.Fatalf("Assume over written bytes: %v, %v", written, err)
	}
	if _, err := w.WriteAt(append(bytes.Clone(old[3*blockSize:]), make([]byte, 10)...), 3*blockSize); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, ok := w.Changed()
	want := []Span{{100, 103}, {2 * blockSize, 3 * blockSize}, {4 * blockSize, 4*blockSize + 10}}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("Changed = %v, %v; want %v", got, ok, want)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "new"))
	wantBytes := append(with(old, 100, []byte("xyz")), make([]byte, 10)...)
	clear(wantBytes[2*blockSize : 3*blockSize])
	if !bytes.Equal(b, wantBytes) {
		t.Fatal("the file is not what was written and assumed")
	}
	// Not a clone: nothing to assume, no Changed.
	w, err = create(filepath.Join(dir, "whole"), "", 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Assume(0, 1); err == nil {
		t.Fatal("Assume on a file written whole")
	}
	w.Close()
	if _, ok := w.Changed(); ok {
		t.Fatal("Changed of a file written whole")
	}
}

// CopyFrom writes a whole file at an offset, cloned or not, and the result
// is what WriteAt of its bytes makes.
func TestCopyFrom(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	body := random(7, 3*blockSize+17)
	os.WriteFile(src, body, 0o644)
	base := filepath.Join(dir, "base")
	os.WriteFile(base, random(8, 5*blockSize), 0o644)
	for _, c := range []struct {
		name string
		base string
	}{{"whole", ""}, {"cloned", base}} {
		t.Run(c.name, func(t *testing.T) {
			w, err := create(filepath.Join(dir, c.name), c.base, 0o644, copyClone)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := os.Open(src)
			defer f.Close()
			if err := w.CopyFrom(f, 1000); err != nil {
				t.Fatal(err)
			}
			if w.Size() != 1000+int64(len(body)) {
				t.Errorf("size %d, want %d", w.Size(), 1000+len(body))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, c.name))
			if want := append(make([]byte, 1000), body...); !bytes.Equal(got, want) {
				t.Fatalf("%d bytes, not the source at 1000 after zeros", len(got))
			}
		})
	}
	// An empty source (an empty layer segment) copies nothing and returns.
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o644)
	w, err := create(filepath.Join(dir, "from-empty"), "", 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(empty)
	defer f.Close()
	if err := w.CopyFrom(f, 0); err != nil || w.Size() != 0 {
		t.Fatalf("CopyFrom of an empty file: %v, size %d", err, w.Size())
	}
	// Past the end, as an empty pwrite: the file does not grow.
	if err := w.CopyFrom(f, 4096); err != nil || w.Size() != 0 {
		t.Fatalf("CopyFrom of an empty file at 4096: %v, size %d, want 0", err, w.Size())
	}
	w.Close()
	if info, err := os.Stat(filepath.Join(dir, "from-empty")); err != nil || info.Size() != 0 {
		t.Fatalf("the file after an empty copy at 4096: %v, %v", info.Size(), err)
	}
}

// Assume refuses a range that is no range (a negative start, an end before
// its start) and takes an empty one, or one from offset 0, as given. Over a
// range with written parts, the parts before, between and after them are
// kept as the clone holds them (the base's bytes), and only the written
// parts, clipped to the range, come back for the caller to write; a written
// span that starts where the range ends is not in it.
func TestAssumeRanges(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	old := random(11, 4*blockSize)
	if err := os.WriteFile(base, old, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := create(filepath.Join(dir, "new"), base, 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{-1, 5}, {10, 5}, {-10, -20}} {
		if _, err := w.Assume(r[0], r[1]); err == nil {
			t.Errorf("Assume(%d, %d) accepted", r[0], r[1])
		}
	}
	if written, err := w.Assume(7, 7); err != nil || written != nil {
		t.Errorf("Assume of an empty range: %v, %v", written, err)
	}
	// Block 1 rewritten with other bytes, and 10 bytes at the start of block 3.
	b1 := random(12, blockSize)
	if _, err := w.WriteAt(b1, blockSize); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("0123456789"), 3*blockSize); err != nil {
		t.Fatal(err)
	}
	written, err := w.Assume(0, 3*blockSize)
	if err != nil || !slices.Equal(written, []Span{{blockSize, 2 * blockSize}}) {
		t.Fatalf("Assume(0, 3 blocks) = %v, %v; want block 1 (written) alone back", written, err)
	}
	if written, err := w.Assume(3*blockSize+10, 4*blockSize); err != nil || written != nil {
		t.Fatalf("Assume after the written bytes = %v, %v; want none back", written, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want := with(with(old, blockSize, b1), 3*blockSize, []byte("0123456789"))
	if got, _ := os.ReadFile(w.Name()); !bytes.Equal(got, want) {
		t.Fatal("the assumed ranges do not hold the base's bytes")
	}
}

// A range of the base that is a hole and that the caller never wrote stays
// as it was: Close has nothing to make zeros there, and Changed does not list
// it (the disk's carry rewrites what Changed lists), up to the data that
// follows it exactly at its end.
func TestChangedLeavesBaseHoles(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	// Data in block 0, a hole in blocks 1 and 2, data in block 3.
	b0, b3 := random(13, blockSize), random(14, blockSize)
	writeSparse(t, base, 4*blockSize, extent{0, b0}, extent{3 * blockSize, b3})
	w, err := create(filepath.Join(dir, "new"), base, 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, w, []op{writeAt(0, b0), writeAt(3*blockSize, b3)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, ok := w.Changed(); !ok || len(got) != 0 {
		t.Errorf("Changed = %v, %v; want nothing: the hole was left as it was", got, ok)
	}
	want := append(append(bytes.Clone(b0), make([]byte, 2*blockSize)...), b3...)
	if got, _ := os.ReadFile(w.Name()); !bytes.Equal(got, want) {
		t.Fatal("the file is not what was written")
	}
}

// Close unmaps the base it compared with: an image stage maps a ~250 MiB
// base per file, and a long-lived process (serve's builds) must not keep
// each one mapped.
func TestCloseUnmapsTheBase(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base-to-unmap")
	if err := os.WriteFile(base, random(15, blockSize), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := create(filepath.Join(dir, "new"), base, 0o644, copyClone)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(random(16, 100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(maps, []byte(base)) {
		t.Error("the base is still mapped after Close")
	}
}
