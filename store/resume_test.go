package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/xfstest"
)

// commitFile commits b as the one file disk.img of output key (Base, Links
// and Log as given) and returns the sha256 its MANIFEST records.
func commitFile(t *testing.T, st *Store, key string, b []byte, opt CommitOptions) string {
	t.Helper()
	dir, err := st.NewScratch("t")
	if err != nil {
		t.Fatal(err)
	}
	writeSparse(t, filepath.Join(dir, "disk.img"), b)
	if err := st.CommitOutputWith(key, dir, opt); err != nil {
		t.Fatal(err)
	}
	return recordedSum(t, st, key, "disk.img")
}

// recordedSum is the sha256 output key's MANIFEST records for rel.
func recordedSum(t *testing.T, st *Store, key, rel string) string {
	t.Helper()
	files, err := st.OutputFiles(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Path == rel {
			return f.SHA256
		}
	}
	t.Fatalf("%s: no %s in the MANIFEST (%v)", key, rel, files)
	return ""
}

// A base's MIDSTATES that cannot be trusted whole is not trusted at all: the
// commit hashes the file in full and records its true sha256. Each damage
// keeps the file well-formed enough that a reader skipping one check would
// resume from a wrong state (and record a wrong sum): the new file is the
// base's own bytes, so every chunk compares equal.
func TestCommitDistrustsDamagedMidstates(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	b := make([]byte, 2*midChunk+10)
	rng.Read(b)
	want := sumOf(b)
	// States of other bytes (zeros) at the same chunk size: sha256's state is
	// a valid one, only not of this file.
	var zeros []string
	h := sha256.New()
	for range 2 {
		h.Write(make([]byte, midChunk))
		zeros = append(zeros, marshalState(h))
	}
	withChecksum := func(body string) []byte {
		s := sha256.Sum256([]byte(body))
		return []byte(hex.EncodeToString(s[:]) + "\n" + body)
	}
	for _, c := range []struct {
		name   string
		damage func(good []byte) []byte
	}{
		{"body replaced, checksum left stale", func(good []byte) []byte {
			head, _, _ := bytes.Cut(good, []byte("\n"))
			body := fmt.Sprintf(`{"chunk":%d,"files":{"disk.img":["%s","%s"]}}`, midChunk, zeros[0], zeros[1])
			return append(append(head, '\n'), body...)
		}},
		{"checksum of an empty body, no body", func([]byte) []byte {
			return withChecksum("")
		}},
		{"not JSON, checksum right", func([]byte) []byte {
			return withChecksum(`{"chunk":` + fmt.Sprint(midChunk) + `,"files":`)
		}},
		{"last state not hex, checksum right", func([]byte) []byte {
			return withChecksum(fmt.Sprintf(`{"chunk":%d,"files":{"disk.img":["%s","zz"]}}`, midChunk, zeros[0]))
		}},
		{"last state hex but no sha256 state, checksum right", func([]byte) []byte {
			return withChecksum(fmt.Sprintf(`{"chunk":%d,"files":{"disk.img":["%s","00ff00ff"]}}`, midChunk, zeros[0]))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := Open(t.TempDir())
			k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
			commitFile(t, st, k1, b, CommitOptions{})
			p := filepath.Join(st.OutputDir(k1), midstatesName)
			good, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, c.damage(good), 0o644); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			if got := commitFile(t, st, k2, b, CommitOptions{Base: k1, Log: &log}); got != want {
				t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
			}
			if strings.Contains(log.String(), "resumed") {
				t.Errorf("resumed from damaged midstates: %q", log.String())
			}
		})
	}
}

// A file hard-linked from a Links output keeps that output's midstates in the
// new output: the next build, given it as Base, resumes from them (an image
// stage's big file linked from a dep is not hashed in full twice), and still
// records the file's true sha256.
func TestCommitKeepsLinkedMidstates(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	b := make([]byte, 2*midChunk+100)
	rng.Read(b)
	st, _ := Open(t.TempDir())
	dep := "initramfs-" + strings.Repeat("1", 64)
	k1, k2 := "image-"+strings.Repeat("2", 64), "image-"+strings.Repeat("3", 64)
	commitFile(t, st, dep, b, CommitOptions{})
	dir, _ := st.NewScratch("t")
	if err := os.Link(filepath.Join(st.OutputDir(dep), "disk.img"), filepath.Join(dir, "disk.img")); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := st.CommitOutputWith(k1, dir, CommitOptions{Links: []Link{{Key: dep}}, Log: &log}); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("image: committed, 0.0 of %.1f MiB hashed\n", float64(len(b))/(1<<20)); log.String() != want {
		t.Errorf("commit of a linked file logged %q, want %q", log.String(), want)
	}
	edited := bytes.Clone(b)
	edited[len(b)-1] ^= 1
	log.Reset()
	if got, want := commitFile(t, st, k2, edited, CommitOptions{Base: k1, Log: &log}), sumOf(edited); got != want {
		t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
	}
	if want := "(resumed: disk.img from 8.0 MiB)"; !strings.Contains(log.String(), want) {
		t.Errorf("commit log %q: the linked file's midstates were lost (want %q)", log.String(), want)
	}
}

// A disk image has far more extents than one FIEMAP call returns (256): the
// map must go on past each batch, from the end of its last extent, across
// holes of any length, or the chunks beyond look like holes in both files
// and count as equal unread. Each base below has over 256 extents in chunk
// 0, a hole, then data from 5 or 6 MiB on; the new file is its reflink clone
// with one byte changed in chunk 1, behind the hole: the commit must see the
// change. Chunk 0, its extents all the base's, still counts as shared.
func TestCommitSeesChangesPastManyExtents(t *testing.T) {
	mnt := xfstest.Mount(t, 512<<20)
	rng := rand.New(rand.NewSource(5))
	small := func(b []byte, n int) { // n extents: 4 KiB of data, 4 KiB of hole
		for i := range n {
			rng.Read(b[i*8192 : i*8192+4096])
		}
	}
	for _, c := range []struct {
		name string
		base func(b []byte)
		runs int // runs of data in the base, at least
		edit int
	}{
		{"300 small extents, a hole, data", func(b []byte) { small(b, 300); rng.Read(b[5<<20:]) }, 301, 6 << 20},
		// The 256th extent (the first batch's last) is longer than its offset.
		{"255 small extents, a 3 MiB extent, a hole, data", func(b []byte) {
			small(b, 255)
			rng.Read(b[2<<20 : 5<<20])
			rng.Read(b[6<<20:])
		}, 257, 6<<20 + 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, err := os.MkdirTemp(mnt, "store-")
			if err != nil {
				t.Fatal(err)
			}
			old := make([]byte, 2*midChunk+1000)
			c.base(old)
			st, _ := Open(root)
			k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
			dir, _ := st.NewScratch("t")
			writeHoles(t, 4096, filepath.Join(dir, "disk.img"), old)
			if err := st.CommitOutput(k1, dir); err != nil {
				t.Fatal(err)
			}
			basePath := filepath.Join(st.OutputDir(k1), "disk.img")
			if n := dataRuns(t, basePath); n < c.runs {
				t.Fatalf("the base has %d runs of data, want %d", n, c.runs)
			}
			edited := bytes.Clone(old)
			edited[c.edit] ^= 1
			dir, _ = st.NewScratch("t")
			cloneAndEdit(t, filepath.Join(dir, "disk.img"), basePath, old, edited)
			nf, _ := os.Open(filepath.Join(dir, "disk.img"))
			bf, _ := os.Open(basePath)
			if !newSharedMap(nf, bf).same(0, midChunk) {
				t.Error("chunk 0 of the clone does not count as the base's own blocks")
			}
			nf.Close()
			bf.Close()
			var log bytes.Buffer
			if err := st.CommitOutputWith(k2, dir, CommitOptions{Base: k1, Log: &log}); err != nil {
				t.Fatal(err)
			}
			if got, want := recordedSum(t, st, k2, "disk.img"), sumOf(edited); got != want {
				t.Errorf("MANIFEST records %s, the file's sha256 is %s (log %q)", got, want, log.String())
			}
		})
	}
}

// dataRuns counts path's runs of data between holes (SEEK_DATA, SEEK_HOLE):
// at least as many extents.
func dataRuns(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for off := int64(0); ; n++ {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			return n // ENXIO: no data after off
		}
		if off, err = unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE); err != nil {
			t.Fatal(err)
		}
	}
}

// sparseFile reads any range of a file with holes as the file's bytes (the
// holes as zeros, whatever the buffer held before), and hole says a range is
// a hole exactly when it holds no data: a hole ending where data begins is
// one, a range reaching one byte into data is not.
func TestSparseFileReadsAndHoles(t *testing.T) {
	const blk = 4096
	// Data blocks (no zero byte in them) and holes, at block granularity:
	// D H H D D H D H H H H (11 blocks), then a partial data block.
	layout := "DHHDDHDHHHH"
	b := make([]byte, len(layout)*blk+100)
	for i, c := range layout + "D" {
		if c == 'D' {
			for j := i * blk; j < min((i+1)*blk, len(b)); j++ {
				b[j] = byte(1 + (j*7+i)%255)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "f")
	writeHoles(t, 4096, path, b)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n := dataRuns(t, path); n != 4 {
		t.Fatalf("the test file keeps %d runs of data, want 4 (a file system without 4 KiB holes?)", n)
	}
	sf := &sparseFile{f: f, size: int64(len(b))}
	for _, r := range [][2]int{
		{0, len(b)}, {0, blk}, {blk, 2 * blk}, {blk + 1, 2*blk - 2}, {blk - 1, 2*blk + 2},
		{3 * blk, 2 * blk}, {5 * blk, blk}, {5*blk - 1, blk + 2}, {6*blk + 5, 5 * blk},
		{7 * blk, 4 * blk}, {7 * blk, 4*blk + 1}, {len(b) - 100, 100}, {11*blk - 1, 101},
	} {
		off, n := r[0], r[1]
		buf := bytes.Repeat([]byte{0xee}, n)
		if err := sf.readAt(buf, int64(off)); err != nil {
			t.Fatalf("readAt(%d, %d): %v", off, n, err)
		}
		if !bytes.Equal(buf, b[off:off+n]) {
			t.Errorf("readAt(%d, %d) differs from the file's bytes", off, n)
		}
		if got, want := sf.hole(int64(off), int64(n)), bytes.Equal(b[off:off+n], make([]byte, n)); got != want {
			t.Errorf("hole(%d, %d) = %v, want %v", off, n, got, want)
		}
	}
}

// A base that ends exactly at a chunk boundary has no midstate after its last
// chunk (no byte followed it there): a new file that grew past it resumes
// from an earlier one, or hashes in full, and records its true sha256.
func TestCommitGrewFromChunkBoundary(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	b := make([]byte, 2*midChunk+1)
	rng.Read(b)
	st, _ := Open(t.TempDir())
	k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
	commitFile(t, st, k1, b[:2*midChunk], CommitOptions{})
	if got, want := commitFile(t, st, k2, b, CommitOptions{Base: k1}), sumOf(b); got != want {
		t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
	}
}

// MIDSTATES that claim more whole chunks than the base file holds (here, the
// intact MIDSTATES of a longer output of the same file, copied over the
// base's) are used only as far as the base file reaches: past its end the
// base reads as a hole, and so does the new file's zero chunk, but they are
// not the bytes those states were taken after.
func TestCommitMidstatesPastBaseEnd(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	b := make([]byte, 2*midChunk+10)
	rng.Read(b)
	st, _ := Open(t.TempDir())
	long, k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64), "image-"+strings.Repeat("3", 64)
	commitFile(t, st, long, b, CommitOptions{})
	commitFile(t, st, k1, b[:midChunk], CommitOptions{})
	m, err := os.ReadFile(filepath.Join(st.OutputDir(long), midstatesName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.OutputDir(k1), midstatesName), m, 0o644); err != nil {
		t.Fatal(err)
	}
	edited := zeroed(b, midChunk, 2*midChunk)
	if got, want := commitFile(t, st, k2, edited, CommitOptions{Base: k1}), sumOf(edited); got != want {
		t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
	}
}

// On a file system that cannot seek to data (procfs answers SEEK_DATA with
// EINVAL), sparseFile reads the range as it is, from any offset, and a range
// running past the end is no error: its bytes up to the end are the file's.
func TestSparseFileWithoutSeekData(t *testing.T) {
	want, err := os.ReadFile("/proc/version")
	if err != nil || len(want) < 20 {
		t.Fatalf("/proc/version: %q %v", want, err)
	}
	f, err := os.Open("/proc/version")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sf := &sparseFile{f: f, size: int64(len(want))}
	for _, r := range [][2]int{{0, len(want)}, {5, len(want) - 5}, {5, 10}, {7, len(want)}} {
		off, n := r[0], r[1]
		buf := bytes.Repeat([]byte{0xee}, n)
		if err := sf.readAt(buf, int64(off)); err != nil {
			t.Fatalf("readAt(%d, %d): %v", off, n, err)
		}
		if end := min(off+n, len(want)); !bytes.Equal(buf[:end-off], want[off:end]) {
			t.Errorf("readAt(%d, %d) = %q, want %q", off, n, buf[:end-off], want[off:end])
		}
	}
}

// MIDSTATES that hold a state after each of the base file's whole chunks,
// its last one included (those of a longer output of the same bytes, copied
// over the base's), are used up to the base file's end: a file that grew
// from it resumes after that last chunk, and records its true sha256.
func TestCommitMidstatesUpToBaseEnd(t *testing.T) {
	rng := rand.New(rand.NewSource(8))
	b := make([]byte, 2*midChunk+10)
	rng.Read(b)
	st, _ := Open(t.TempDir())
	long, k1, k2 := "image-"+strings.Repeat("4", 64), "image-"+strings.Repeat("5", 64), "image-"+strings.Repeat("6", 64)
	commitFile(t, st, long, b, CommitOptions{})
	commitFile(t, st, k1, b[:2*midChunk], CommitOptions{})
	m, err := os.ReadFile(filepath.Join(st.OutputDir(long), midstatesName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.OutputDir(k1), midstatesName), m, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if got, want := commitFile(t, st, k2, b, CommitOptions{Base: k1, Log: &log}), sumOf(b); got != want {
		t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
	}
	if want := "image: committed, 0.0 of 8.0 MiB hashed (resumed: disk.img from 8.0 MiB)\n"; log.String() != want {
		t.Errorf("commit log %q, want %q", log.String(), want)
	}
}

// A Base whose output is damaged (cut short, and its first chunk rewritten
// since its commit) is not resumed from: its MIDSTATES are of the bytes it
// held at commit, so a new file equal to what it holds now would take a
// state of other bytes. The commit hashes in full and records the file's
// own sha256.
func TestCommitIgnoresADamagedBase(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	b := make([]byte, 3*midChunk+10)
	rng.Read(b)
	st, _ := Open(t.TempDir())
	k1, k2 := "image-"+strings.Repeat("7", 64), "image-"+strings.Repeat("8", 64)
	commitFile(t, st, k1, b, CommitOptions{})
	other := make([]byte, midChunk)
	rng.Read(other)
	damaged := append(bytes.Clone(other), b[midChunk:midChunk+midChunk/2]...)
	if err := os.WriteFile(filepath.Join(st.OutputDir(k1), "disk.img"), damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	if st.HasOutput(k1) {
		t.Fatal("the damaged base still checks")
	}
	edited := append(bytes.Clone(other), b[midChunk:]...)
	if got, want := commitFile(t, st, k2, edited, CommitOptions{Base: k1}), sumOf(edited); got != want {
		t.Errorf("MANIFEST records %s, the file's sha256 is %s", got, want)
	}
}

// The commit maps a file of a chunk or more to hash it, and unmaps it: a
// long-lived process (serve's builds) must not keep every output it
// committed mapped.
func TestCommitUnmapsWhatItHashed(t *testing.T) {
	st, _ := Open(t.TempDir())
	b := make([]byte, 2*midChunk+10)
	rand.New(rand.NewSource(10)).Read(b)
	k1, k2 := "image-"+strings.Repeat("a", 64), "image-"+strings.Repeat("b", 64)
	commitFile(t, st, k1, b, CommitOptions{})
	commitFile(t, st, k2, b, CommitOptions{Base: k1})
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, st.Root) {
			t.Errorf("a store file is still mapped after its commit: %s", line)
		}
	}
}
