package store

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// writeSparse writes b to path, leaving every all-zero 64 KiB block a hole.
func writeSparse(t *testing.T, path string, b []byte) { writeHoles(t, 64<<10, path, b) }

// writeHoles writes b to path, leaving every all-zero block of blk bytes a
// hole, and syncs it (FIEMAP then sees its extents).
func writeHoles(t *testing.T, blk int, path string, b []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(len(b))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(b); off += blk {
		c := b[off:min(off+blk, len(b))]
		if !bytes.Equal(c, make([]byte, len(c))) {
			if _, err := f.WriteAt(c, int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A commit given the previous output as Base hashes only from the first chunk
// that differs, and its MANIFEST holds the same sums as a full hash: edits at
// the start, inside, at a chunk boundary and at the end; a file that grew,
// shrank, is unchanged or all holes.
// resumeCase is an output file before and after an edit, and where the
// commit of the second must resume hashing.
type resumeCase struct {
	name     string
	old, new []byte
	resumeAt int64 // where hashing restarts
}

func resumeCases() []resumeCase {
	rng := rand.New(rand.NewSource(1))
	random := func(n int) []byte { b := make([]byte, n); rng.Read(b); return b }
	old := random(3*midChunk + 12345)
	// A sparse file: data, 2 chunks of holes, data.
	sparse := append(append(random(midChunk/2), make([]byte, 2*midChunk)...), random(1000)...)
	edit := func(b []byte, at int, s string) []byte { c := bytes.Clone(b); copy(c[at:], s); return c }
	return []resumeCase{
		{"tail edit", old, edit(old, 3*midChunk+100, "x"), 3 * midChunk},
		{"edit in chunk 2", old, edit(old, 2*midChunk+7, "x"), 2 * midChunk},
		{"edit at a chunk boundary", old, edit(old, midChunk, "x"), midChunk},
		{"edit in chunk 0", old, edit(old, 5, "x"), 0},
		{"grew", old, append(bytes.Clone(old), random(midChunk)...), 3 * midChunk},
		{"shrank", old, old[:2*midChunk+1], 2 * midChunk},
		{"shrank to a chunk boundary", old, old[:2*midChunk], midChunk},
		{"unchanged", old, old, 3 * midChunk},
		{"sparse, tail edit", sparse, edit(sparse, len(sparse)-3, "x"), 2 * midChunk},
		{"all holes", make([]byte, 2*midChunk+5), make([]byte, 2*midChunk+5), 2 * midChunk},
		{"a hole where the base has data", old, zeroed(old, midChunk, 2*midChunk), midChunk},
		{"data where the base has a hole", sparse, edit(sparse, midChunk+9, "x"), midChunk},
	}
}

func TestCommitResumesFromBase(t *testing.T) {
	for i, c := range resumeCases() {
		t.Run(c.name, func(t *testing.T) {
			st, _ := Open(t.TempDir())
			k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
			var log bytes.Buffer
			for _, o := range []struct {
				key string
				b   []byte
				opt CommitOptions
			}{{k1, c.old, CommitOptions{}}, {k2, c.new, CommitOptions{Base: k1, Log: &log}}} {
				dir, _ := st.NewScratch("t")
				writeSparse(t, filepath.Join(dir, "disk.img"), o.b)
				if err := st.CommitOutputWith(o.key, dir, o.opt); err != nil {
					t.Fatal(err)
				}
			}
			files, err := st.OutputFiles(k2)
			if err != nil || len(files) != 1 {
				t.Fatalf("%v %v", files, err)
			}
			path := filepath.Join(st.OutputDir(k2), "disk.img")
			if want, _ := fsutil.HashFile(path); files[0].SHA256 != want {
				t.Errorf("MANIFEST sha256 %s, the file's %s", files[0].SHA256, want)
			}
			f, _ := os.Open(path)
			defer f.Close()
			off, _, _ := resume(&sparseFile{f: f, size: int64(len(c.new))}, filepath.Join(st.OutputDir(k1), "disk.img"), readMidstates(st.OutputDir(k1)).Files["disk.img"])
			if off != c.resumeAt {
				t.Errorf("case %d: hashing resumes at %d, want %d", i, off, c.resumeAt)
			}
			mib := func(n int64) float64 { return float64(n) / (1 << 20) }
			if want := fmt.Sprintf("image: committed, %.1f of %.1f MiB hashed", mib(int64(len(c.new))-c.resumeAt), mib(int64(len(c.new)))); !strings.HasPrefix(log.String(), want) {
				t.Errorf("commit log %q, want it to start %q", log.String(), want)
			}
			// The new output's midstates are a full hash's, so the next commit can resume from them.
			want := readMidstates(st.OutputDir(k2)).Files["disk.img"]
			dir, _ := st.NewScratch("t")
			writeSparse(t, filepath.Join(dir, "disk.img"), c.new)
			h, err := hashFile(filepath.Join(dir, "disk.img"), "disk.img", "", nil, nil)
			if err != nil || strings.Join(h.mids, ",") != strings.Join(want, ",") {
				t.Errorf("midstates after a resumed hash differ from a full hash's (%v)", err)
			}
		})
	}
}

// Damaged or foreign MIDSTATES are ignored, never trusted: the commit hashes in full.
func TestCommitIgnoresBadMidstates(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	b := make([]byte, 2*midChunk+10)
	rng.Read(b)
	for _, damage := range []func(string) error{
		func(p string) error { return os.Remove(p) },
		func(p string) error { return os.WriteFile(p, []byte("garbage"), 0o644) },
		func(p string) error { // a valid self-checksum over states of other bytes
			other := make([]byte, len(b))
			dir := filepath.Dir(p)
			writeSparse(t, filepath.Join(dir, "x"), other)
			h, err := hashFile(filepath.Join(dir, "x"), "x", "", nil, nil)
			os.Remove(filepath.Join(dir, "x"))
			if err != nil {
				return err
			}
			return writeMidstates(dir, midstates{Chunk: midChunk * 2, Files: map[string][]string{"disk.img": h.mids}})
		},
	} {
		st, _ := Open(t.TempDir())
		k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
		dir, _ := st.NewScratch("t")
		writeSparse(t, filepath.Join(dir, "disk.img"), b)
		if err := st.CommitOutput(k1, dir); err != nil {
			t.Fatal(err)
		}
		if err := damage(filepath.Join(st.OutputDir(k1), midstatesName)); err != nil {
			t.Fatal(err)
		}
		dir, _ = st.NewScratch("t")
		writeSparse(t, filepath.Join(dir, "disk.img"), b)
		if err := st.CommitOutputWith(k2, dir, CommitOptions{Base: k1}); err != nil {
			t.Fatal(err)
		}
		files, _ := st.OutputFiles(k2)
		if want, _ := fsutil.HashFile(filepath.Join(st.OutputDir(k2), "disk.img")); len(files) != 1 || files[0].SHA256 != want {
			t.Errorf("MANIFEST %v, the file's sha256 %s", files, want)
		}
	}
}

// A file hard-linked from a Links output takes that output's sum; one that is
// only equal in content (another inode) is hashed.
func TestCommitTakesLinkedSums(t *testing.T) {
	st, _ := Open(t.TempDir())
	dep, k := "initramfs-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
	dir, _ := st.NewScratch("t")
	os.WriteFile(filepath.Join(dir, "initrd.img"), []byte("initrd"), 0o644)
	if err := st.CommitOutput(dep, dir); err != nil {
		t.Fatal(err)
	}
	// Make the dep's MANIFEST claim another sum: only a linked file can take it.
	mf := filepath.Join(st.OutputDir(dep), manifestName)
	fake := strings.Repeat("a", 64) + "  initrd.img\n"
	if err := os.WriteFile(mf, []byte(fake), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, _ = st.NewScratch("t")
	os.MkdirAll(filepath.Join(dir, "pxe"), 0o755)
	if err := os.Link(filepath.Join(st.OutputDir(dep), "initrd.img"), filepath.Join(dir, "pxe", "initrd.img")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "copy.img"), []byte("initrd"), 0o644)
	if err := st.CommitOutputWith(k, dir, CommitOptions{Links: []Link{{Key: dep}}}); err != nil {
		t.Fatal(err)
	}
	files, _ := st.OutputFiles(k)
	got := map[string]string{}
	for _, f := range files {
		got[f.Path] = f.SHA256
	}
	if got["pxe/initrd.img"] != strings.Repeat("a", 64) {
		t.Errorf("the linked file was hashed again: %s", got["pxe/initrd.img"])
	}
	if want, _ := fsutil.HashFile(filepath.Join(st.OutputDir(k), "copy.img")); got["copy.img"] != want {
		t.Errorf("the copy took a linked sum: %s", got["copy.img"])
	}
	// A Link that names its files is looked up for those alone: the same
	// link, from a dep named with another file, is hashed.
	dir, _ = st.NewScratch("t")
	if err := os.Link(filepath.Join(st.OutputDir(dep), "initrd.img"), filepath.Join(dir, "initrd.img")); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct{ files, want string }{{"initrd.img", strings.Repeat("a", 64)}, {"other", sumOf([]byte("initrd"))}} {
		files, want := c.files, c.want
		k2 := "image-" + strings.Repeat("3", 63) + fmt.Sprint(i)
		d, _ := st.NewScratch("t")
		os.Link(filepath.Join(dir, "initrd.img"), filepath.Join(d, "initrd.img"))
		if err := st.CommitOutputWith(k2, d, CommitOptions{Links: []Link{{Key: dep, Files: []string{files}}}}); err != nil {
			t.Fatal(err)
		}
		if sum, _ := st.OutputSum(k2, "initrd.img"); sum != want {
			t.Errorf("Link with Files [%s]: sum %s, want %s", files, sum, want)
		}
	}
}

// zeroed is a copy of b with [from, to) zeros (a hole, once writeSparse writes it).
func zeroed(b []byte, from, to int) []byte {
	c := bytes.Clone(b)
	clear(c[from:to])
	return c
}

// TestCommitResumesFromSharedClone: on XFS, the new file is a reflink clone
// of the base's with only the edit written (as the image stage writes it):
// the chunks before the edit are the base's own blocks, found equal without
// reading (sharedMap), and the MANIFEST is still the file's full sha256.
func TestCommitResumesFromSharedClone(t *testing.T) {
	mnt := xfstest.Mount(t, 512<<20)
	for i, c := range resumeCases() {
		t.Run(c.name, func(t *testing.T) {
			root, err := os.MkdirTemp(mnt, "store-")
			if err != nil {
				t.Fatal(err)
			}
			st, _ := Open(root)
			k1, k2 := "image-"+strings.Repeat("1", 64), "image-"+strings.Repeat("2", 64)
			dir, _ := st.NewScratch("t")
			writeSparse(t, filepath.Join(dir, "disk.img"), c.old)
			if err := st.CommitOutput(k1, dir); err != nil {
				t.Fatal(err)
			}
			basePath := filepath.Join(st.OutputDir(k1), "disk.img")
			dir, _ = st.NewScratch("t")
			path := filepath.Join(dir, "disk.img")
			cloneAndEdit(t, path, basePath, c.old, c.new)
			// Before the commit: the chunks up to the edit are shared.
			nf, _ := os.Open(path)
			bf, _ := os.Open(basePath)
			m := newSharedMap(nf, bf)
			for off := int64(0); off+midChunk <= c.resumeAt; off += midChunk {
				sf := &sparseFile{f: nf, size: int64(len(c.new))}
				if !sf.hole(off, midChunk) && !m.same(off, midChunk) {
					t.Errorf("case %d: chunk at %d is not shared with the base", i, off)
				}
			}
			if end := c.resumeAt + midChunk; c.resumeAt < int64(len(c.new)) && end <= int64(len(c.old)) && end <= int64(len(c.new)) && !bytes.Equal(c.old[c.resumeAt:end], c.new[c.resumeAt:end]) && m.same(c.resumeAt, midChunk) {
				t.Errorf("case %d: the edited chunk at %d counts as shared", i, c.resumeAt)
			}
			nf.Close()
			bf.Close()
			var log bytes.Buffer
			if err := st.CommitOutputWith(k2, dir, CommitOptions{Base: k1, Log: &log}); err != nil {
				t.Fatal(err)
			}
			files, err := st.OutputFiles(k2)
			if err != nil || len(files) != 1 {
				t.Fatalf("%v %v", files, err)
			}
			if want := fmt.Sprintf("%x", sha256.Sum256(c.new)); files[0].SHA256 != want {
				t.Errorf("MANIFEST sha256 %s, the file's %s", files[0].SHA256, want)
			}
			mib := func(n int64) float64 { return float64(n) / (1 << 20) }
			if want := fmt.Sprintf("image: committed, %.1f of %.1f MiB hashed", mib(int64(len(c.new))-c.resumeAt), mib(int64(len(c.new)))); !strings.HasPrefix(log.String(), want) {
				t.Errorf("commit log %q, want it to start %q", log.String(), want)
			}
			if got, _ := os.ReadFile(basePath); !bytes.Equal(got, c.old) {
				t.Error("the base file changed")
			}
		})
	}
}

// cloneAndEdit makes path a reflink clone of base (holding old) and writes
// only the bytes where new differs, then sets new's size.
func cloneAndEdit(t *testing.T, path, base string, old, new []byte) {
	t.Helper()
	src, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(new); i++ {
		if i < len(old) && old[i] == new[i] {
			continue
		}
		j := i
		for j < len(new) && (j >= len(old) || old[j] != new[j]) {
			j++
		}
		if _, err := dst.WriteAt(new[i:j], int64(i)); err != nil {
			t.Fatal(err)
		}
		i = j
	}
	if err := dst.Truncate(int64(len(new))); err != nil {
		t.Fatal(err)
	}
}

// A dep's file changed in place since its commit (grown: a tool wrote through
// a hard link into the store) is the same inode as the new output's link to
// it, but no longer the bytes its MANIFEST sum is of: SIZES says so, and the
// commit hashes it instead of recording the dep's stale sum.
func TestCommitRehashesALinkChangedSinceItsCommit(t *testing.T) {
	st, _ := Open(t.TempDir())
	dep, k := "initramfs-"+strings.Repeat("4", 64), "image-"+strings.Repeat("5", 64)
	dir, _ := st.NewScratch("t")
	os.WriteFile(filepath.Join(dir, "initrd.img"), []byte("initrd"), 0o644)
	if err := st.CommitOutput(dep, dir); err != nil {
		t.Fatal(err)
	}
	depFile := filepath.Join(st.OutputDir(dep), "initrd.img")
	f, err := os.OpenFile(depFile, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte(", grown since"))
	f.Close()
	dir, _ = st.NewScratch("t")
	if err := os.Link(depFile, filepath.Join(dir, "initrd.img")); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitOutputWith(k, dir, CommitOptions{Links: []Link{{Key: dep}}}); err != nil {
		t.Fatal(err)
	}
	if sum, err := st.OutputSum(k, "initrd.img"); err != nil || sum != sumOf([]byte("initrd, grown since")) {
		t.Errorf("MANIFEST sum %s (%v), want the file's own sha256 %s", sum, err, sumOf([]byte("initrd, grown since")))
	}
}

// A midstate follows each whole chunk that a byte follows, none after the
// last: resume never starts at the end, and MIDSTATES is part of the output
// (the same for the same bytes).
func TestMidstateCount(t *testing.T) {
	for _, c := range []struct {
		size int64
		want int
	}{{0, 0}, {1, 0}, {midChunk - 1, 0}, {midChunk, 0}, {midChunk + 1, 1}, {2 * midChunk, 1}, {2*midChunk + 1, 2}} {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, c.size); err != nil {
			t.Fatal(err)
		}
		h, err := hashFile(p, "f", "", nil, nil)
		if err != nil || len(h.mids) != c.want {
			t.Errorf("%d bytes: %d midstates (%v), want %d", c.size, len(h.mids), err, c.want)
		}
	}
}

// sharedMap.same over extent lists as FIEMAP gives them: equal only where both
// files map the same physical blocks at the same offsets, or both have a hole.
func TestSharedMapSame(t *testing.T) {
	const k = 4096
	ext := func(off, phys, n int64, flags uint32) extent { return extent{off: off, phys: phys, n: n, flags: flags} }
	for _, c := range []struct {
		name   string
		a, b   []extent
		off, n int64
		want   bool
	}{
		{"the same blocks", []extent{ext(0, 100*k, 4*k, 0)}, []extent{ext(0, 100*k, 4*k, 0)}, 0, 4 * k, true},
		{"the same blocks, split differently", []extent{ext(0, 100*k, 2*k, 0), ext(2*k, 102*k, 2*k, 0)}, []extent{ext(0, 100*k, 4*k, 0)}, 0, 4 * k, true},
		{"other blocks", []extent{ext(0, 100*k, 4*k, 0)}, []extent{ext(0, 200*k, 4*k, 0)}, 0, 4 * k, false},
		{"a hole in both", nil, nil, 0, 4 * k, true},
		{"a hole in one, blocks at their own offset in the other", nil, []extent{ext(0, 0, 4*k, 0)}, 0, 4 * k, false},
		{"blocks in one, a hole in the other", []extent{ext(k, k, k, 0)}, nil, 0, 4 * k, false},
		{"equal up to a hole in one", []extent{ext(0, 100*k, 2*k, 0)}, []extent{ext(0, 100*k, 4*k, 0)}, 0, 4 * k, false},
		{"outside the range that differs", []extent{ext(0, 100*k, 2*k, 0), ext(2*k, 300*k, 2*k, 0)}, []extent{ext(0, 100*k, 4*k, 0)}, 0, 2 * k, true},
		{"delayed allocation", []extent{ext(0, 100*k, 4*k, 0x4)}, []extent{ext(0, 100*k, 4*k, 0x4)}, 0, 4 * k, false},
		{"unwritten in one", []extent{ext(0, 100*k, 4*k, fiemapExtentUnwritten)}, []extent{ext(0, 100*k, 4*k, 0)}, 0, 4 * k, false},
	} {
		if got := (&sharedMap{c.a, c.b}).same(c.off, c.n); got != c.want {
			t.Errorf("%s: same = %v, want %v", c.name, got, c.want)
		}
	}
	if (*sharedMap)(nil).same(0, k) {
		t.Error("a file system that cannot map said same")
	}
}
