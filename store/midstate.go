package store

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CommitOptions say what CommitOutputWith may take from outputs already
// committed instead of hashing again. Both are only hints: a wrong or missing
// one costs a full hash, never a wrong MANIFEST.
type CommitOptions struct {
	// Base is the key of an earlier output of the same stage (the recipe's
	// previous build). A file whose first bytes equal the same path's in Base
	// (compared, chunk by chunk) resumes its sha256 from Base's midstate at the
	// last equal chunk: an edit near a file's end costs the compare and the
	// tail, not the whole file.
	Base string
	// Links are outputs this one hard-links files from (the stage's deps): a
	// file that is the same inode as one of theirs takes its sha256 from their
	// MANIFEST, unhashed, and needs no fsync (it was synced there).
	Links []Link
	// Log, when set, gets one line saying how many bytes the commit hashed
	// of how many, and where each resumed file's hash started.
	Log io.Writer
}

// Link is an output another may hard-link files from: Files, when set, are
// the only ones looked at (the kernel's output has 12,000 files, of which the
// image stage links one).
type Link struct {
	Key   string
	Files []string
}

// midChunk is the distance between two kept sha256 midstates.
const midChunk = 4 << 20

// midstatesName holds, per MANIFEST file larger than one chunk, the sha256
// state after each whole chunk (encoding.BinaryMarshaler), hex, as JSON; with
// the sha256 of its own body, so a damaged file is ignored, not trusted.
const midstatesName = "MIDSTATES"

type midstates struct {
	Chunk int64               `json:"chunk"`
	Files map[string][]string `json:"files"`
}

func writeMidstates(dir string, m midstates) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	return writeFileSync(filepath.Join(dir, midstatesName), append([]byte(hex.EncodeToString(sum[:])+"\n"), body...))
}

// readMidstates reads a committed output's MIDSTATES; nil if absent, damaged,
// or kept at another chunk size.
func readMidstates(dir string) *midstates {
	b, err := os.ReadFile(filepath.Join(dir, midstatesName))
	if err != nil {
		return nil
	}
	head, body, ok := bytes.Cut(b, []byte("\n"))
	sum := sha256.Sum256(body)
	if !ok || string(head) != hex.EncodeToString(sum[:]) {
		return nil
	}
	var m midstates
	if json.Unmarshal(body, &m) != nil || m.Chunk != midChunk {
		return nil
	}
	return &m
}

// linked is a committed file another output may share by hard link.
type linked struct {
	sum  string
	mids []string
}

type inode struct{ dev, ino uint64 }

// linkCandidates maps the inodes of files that have other links (a new
// output's files that may be hard links to a dep's) to their sizes.
func linkCandidates(files []string) map[inode]int64 {
	out := map[inode]int64{}
	for _, f := range files {
		var st unix.Stat_t
		if unix.Lstat(f, &st) == nil && st.Nlink > 1 {
			out[inode{st.Dev, st.Ino}] = st.Size
		}
	}
	return out
}

// linkedFiles maps the inodes of links' committed files to their sums,
// looking only at files that may be one of the candidates: those a Link names,
// else those whose recorded size is a candidate's.
func (s *Store) linkedFiles(links []Link, cands map[inode]int64) map[inode]linked {
	out := map[inode]linked{}
	if len(cands) == 0 {
		return out
	}
	sizes := map[int64]bool{}
	for _, n := range cands {
		sizes[n] = true
	}
	for _, l := range links {
		dir := s.OutputDir(l.Key)
		var m []manifestEntry
		var err error
		if l.Files == nil {
			m, err = readManifest(dir)
		} else {
			m, _, err = lookupFiles(dir, l.Files)
		}
		if err != nil {
			continue
		}
		var recorded map[string]int64
		if l.Files == nil {
			recorded, _ = readSizes(dir) // nil (an output from before SIZES): stat them all
		}
		var mids *midstates
		for _, e := range m {
			if n, ok := recorded[e.path]; ok && !sizes[n] {
				continue
			}
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(dir, e.path), &st) != nil {
				continue
			}
			if _, ok := cands[inode{st.Dev, st.Ino}]; !ok {
				continue
			}
			if mids == nil {
				mids = readMidstates(dir)
			}
			lk := linked{sum: e.sum}
			if mids != nil {
				lk.mids = mids.Files[e.path]
			}
			out[inode{st.Dev, st.Ino}] = lk
		}
	}
	return out
}

// hashed is one file's MANIFEST sum, size and midstates, and how much of it
// was hashed: from offset from on, or nothing when linked.
type hashed struct {
	sum    string
	size   int64
	mids   []string
	from   int64
	linked bool
}

// hashFile hashes path (rel inside the output) and fsyncs it, reusing what it
// can: a hard link to a linked file costs a stat; a file sharing a prefix with
// base's file of the same path (a committed output dir, "" for none) resumes
// from base's midstate. It keeps a midstate after every whole chunk.
func hashFile(path, rel, base string, baseMids *midstates, links map[inode]linked) (hashed, error) {
	f, err := os.Open(path)
	if err != nil {
		return hashed{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return hashed{}, err
	}
	if l, ok := links[inode{st.Dev, st.Ino}]; ok {
		return hashed{sum: l.sum, size: st.Size, mids: l.mids, linked: true}, nil
	}
	sf := &sparseFile{f: f, size: st.Size}
	defer sf.unmap()
	h := sha256.New()
	var mids []string
	var off int64
	if baseMids != nil && len(baseMids.Files[rel]) > 0 {
		off, mids, h = resume(sf, filepath.Join(base, rel), baseMids.Files[rel])
	}
	from := off
	var buf []byte
	for off < st.Size {
		n := min(int64(midChunk), st.Size-off)
		if err := sf.hash(h, off, n, &buf); err != nil {
			return hashed{}, fmt.Errorf("hashing %s: %w", path, err)
		}
		off += n
		if n == midChunk && off < st.Size {
			mids = append(mids, marshalState(h))
		}
	}
	if err := f.Sync(); err != nil {
		return hashed{}, fmt.Errorf("syncing %s: %w", path, err)
	}
	return hashed{sum: hex.EncodeToString(h.Sum(nil)), size: st.Size, mids: mids, from: from}, nil
}

// resume compares sf with the base file chunk by chunk and returns the offset
// after the last whole chunk both share (0 when none), the midstates up to
// there, and a hash at that offset.
func resume(sf *sparseFile, basePath string, baseMids []string) (int64, []string, hash.Hash) {
	bf, err := os.Open(basePath)
	if err != nil {
		return 0, nil, sha256.New()
	}
	defer bf.Close()
	info, err := bf.Stat()
	if err != nil {
		return 0, nil, sha256.New()
	}
	base := &sparseFile{f: bf, size: info.Size()}
	defer base.unmap()
	var a, b []byte
	var shared *sharedMap
	mapped, cloned := false, false
	same := 0 // whole chunks equal, each with a midstate after it
	for same < len(baseMids) {
		off := int64(same) * midChunk
		// A chunk counts only if both files have it whole and a byte follows
		// it in the new file (the last chunk is hashed anyway).
		if off+midChunk >= sf.size || off+midChunk > base.size {
			break
		}
		if sf.hole(off, midChunk) && base.hole(off, midChunk) {
			same++ // zeros in both: equal unread (a disk image is mostly holes)
			continue
		}
		// A reflink clone's untouched chunks are the base's own blocks: equal
		// unread (the image stage clones its files from the base's).
		if !mapped {
			shared, mapped = newSharedMap(sf.f, bf), true
		}
		if shared.same(off, midChunk) {
			same++
			cloned = true
			continue
		}
		// In a clone, a chunk that is not the base's blocks was rewritten,
		// and its writer (clonewrite) writes only bytes that differ: not
		// compared, which would read the base's blocks there from disk.
		if cloned {
			break
		}
		x, errx := sf.read(off, midChunk, &a)
		y, erry := base.read(off, midChunk, &b)
		if errx != nil || erry != nil || !bytes.Equal(x, y) {
			break
		}
		same++
	}
	for same > 0 {
		h := sha256.New()
		st, err := hex.DecodeString(baseMids[same-1])
		if err == nil && h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st) == nil {
			return int64(same) * midChunk, append([]string(nil), baseMids[:same]...), h
		}
		same = 0
	}
	return 0, nil, sha256.New()
}

func marshalState(h hash.Hash) string {
	b, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("sha256 state does not marshal: " + err.Error()) // the standard library's digest always does
	}
	return hex.EncodeToString(b)
}

// sparseFile reads a file whose holes (SEEK_HOLE) are filled with zeros in
// memory, not read: a disk image is mostly holes.
type sparseFile struct {
	f        *os.File
	size     int64
	m        []byte // the file mapped read-only (read), nil before or when it cannot be
	mapTried bool
}

// hole says whether [off, off+n) holds no data extent (reads as zeros); false
// when the filesystem cannot tell (no SEEK_DATA).
func (s *sparseFile) hole(off, n int64) bool {
	data, err := unix.Seek(int(s.f.Fd()), off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true // no data from off to the end
	}
	return err == nil && data >= off+n
}

// read returns the n bytes at off: straight from a read-only mapping of the
// file where they are all data (no copy: an image's commit compares and hashes
// tens of MiB), else read into *buf (made when first needed), holes as zeros.
func (s *sparseFile) read(off, n int64, buf *[]byte) ([]byte, error) {
	s.mapOnce()
	if s.m != nil && off+n <= int64(len(s.m)) {
		hole, err := unix.Seek(int(s.f.Fd()), off, unix.SEEK_HOLE)
		if err == nil && hole >= off+n {
			return s.m[off : off+n], nil
		}
	}
	if int64(cap(*buf)) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	return b, s.readAt(b, off)
}

// hash writes the n bytes at off into h: data straight from the mapping,
// holes as zeros from a small buffer (a disk image's tail is mostly holes),
// else as read gives them.
func (s *sparseFile) hash(h hash.Hash, off, n int64, buf *[]byte) error {
	s.mapOnce()
	if s.m == nil || off+n > int64(len(s.m)) {
		b, err := s.read(off, n, buf)
		if err == nil {
			h.Write(b)
		}
		return err
	}
	var zeros []byte
	return s.runs(off, off+n, func(from, to int64, data bool) error {
		if data {
			h.Write(s.m[from:to])
			return nil
		}
		if zeros == nil {
			zeros = make([]byte, 64<<10)
		}
		for left := to - from; left > 0; left -= int64(len(zeros)) {
			h.Write(zeros[:min(left, int64(len(zeros)))])
		}
		return nil
	})
}

// runs calls fn for each run of data or hole in [off, end), in order; where
// the filesystem cannot tell (no SEEK_DATA), the rest is one run of data.
func (s *sparseFile) runs(off, end int64, fn func(from, to int64, data bool) error) error {
	fd := int(s.f.Fd())
	for pos := off; pos < end; {
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			data = end // only a hole from pos on
		} else if err != nil {
			return fn(pos, end, true)
		}
		if data > pos {
			stop := min(data, end)
			if err := fn(pos, stop, false); err != nil {
				return err
			}
			pos = stop
			continue
		}
		hole, err := unix.Seek(fd, pos, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		stop := min(hole, end)
		if err := fn(pos, stop, true); err != nil {
			return err
		}
		pos = stop
	}
	return nil
}

// mapOnce maps a file of at least a chunk read-only, on first use.
func (s *sparseFile) mapOnce() {
	if s.mapTried {
		return
	}
	s.mapTried = true
	if s.size >= midChunk {
		if m, err := unix.Mmap(int(s.f.Fd()), 0, int(s.size), unix.PROT_READ, unix.MAP_SHARED); err == nil {
			s.m = m
		}
	}
}

func (s *sparseFile) unmap() {
	if s.m != nil {
		unix.Munmap(s.m)
		s.m = nil
	}
}

func (s *sparseFile) readAt(buf []byte, off int64) error {
	return s.runs(off, off+int64(len(buf)), func(from, to int64, data bool) error {
		if !data {
			clear(buf[from-off : to-off])
			return nil
		}
		if _, err := s.f.ReadAt(buf[from-off:to-off], from); err != nil && err != io.EOF {
			return err
		}
		return nil
	})
}

// logHashed writes CommitOptions.Log's line for output key's files (rel
// paths) hashed as hs, named by the key's stage.
func logHashed(w io.Writer, key string, rels []string, hs []hashed) {
	var total, done int64
	var resumed []string
	for i, h := range hs {
		total += h.size
		if h.linked {
			continue
		}
		done += h.size - h.from
		if h.from > 0 {
			resumed = append(resumed, fmt.Sprintf("%s from %.1f MiB", rels[i], float64(h.from)/(1<<20)))
		}
	}
	stage, _, _ := strings.Cut(key, "-")
	line := fmt.Sprintf("%s: committed, %.1f of %.1f MiB hashed", stage, float64(done)/(1<<20), float64(total)/(1<<20))
	if len(resumed) > 0 {
		line += " (resumed: " + strings.Join(resumed, ", ") + ")"
	}
	fmt.Fprintln(w, line)
}
