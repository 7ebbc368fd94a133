// Package statcache remembers the sha256 of files by what stat says of them:
// path, device, inode, size, mtime and ctime (ns). The plan keys the image
// binaries (~21 MB) by digest; reading and hashing them was most of a no-op
// rebuild. The cache is a hint: a file that is missing, damaged, truncated or
// of another format is ignored whole, never trusted in part.
//
// The racy case is guarded as git guards its index: an entry whose mtime or
// ctime is not older than the cache's own write time (less a second, for the
// filesystem's coarse clock) may have changed again within the same tick
// without its stat changing, so it is hashed again next time.
package statcache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// header is the first line of a cache file; another one is a foreign file.
const header = "peerboot statcache 1"

// Racy is how close to the cache's write time an entry's mtime or ctime may be
// and still be hashed again: file times come from a coarse clock (a tick), so
// a second covers a write that the kernel dated a little earlier.
const Racy = time.Second

// Stat is what the cache compares: a file whose Stat is unchanged has its
// remembered digest.
type Stat struct {
	Dev, Ino, Size int64
	Mtime, Ctime   int64 // ns since the epoch
}

type entry struct {
	Stat
	Sum string // 64 lower-case hex digits
}

// Cache is one cache file's entries. Not safe for concurrent use.
type Cache struct {
	path    string
	written int64 // ns: when the loaded file was written (0: nothing loaded)
	entries map[string]entry
	dirty   bool

	// Now is the clock Save stamps the file with (tests move it).
	Now func() time.Time
	// Hashed counts the files Digest read and hashed.
	Hashed int
}

// Load reads the cache file at path ("": a cache in memory only, never saved). A missing, unreadable or damaged file is
// an empty cache: it costs a hash, never a wrong digest.
func Load(path string) *Cache {
	c := &Cache{path: path, entries: map[string]entry{}, Now: time.Now}
	b, err := os.ReadFile(path)
	if err != nil {
		return c
	}
	written, entries, err := Parse(b)
	if err != nil {
		return c
	}
	c.written = written
	for p, e := range entries {
		// Racily clean: the file may have changed after it was hashed, within
		// the tick its time already had. Hash it again.
		if max(e.Mtime, e.Ctime) >= written-int64(Racy) {
			continue
		}
		c.entries[p] = e
	}
	return c
}

// Parse decodes a cache file: the header, "written NS", one line per entry
// (sum dev ino size mtime ctime "path"), and "sum HEX" over all that precedes
// it. Any other shape is an error naming the line.
func Parse(b []byte) (written int64, entries map[string]entry, err error) {
	body, tail, ok := cutLastLine(b)
	if !ok {
		return 0, nil, errors.New("statcache: no closing sum line")
	}
	want, ok := strings.CutPrefix(tail, "sum ")
	got := sha256.Sum256(body)
	if !ok || want != hex.EncodeToString(got[:]) {
		return 0, nil, errors.New("statcache: the closing sum does not match the file (damaged or truncated)")
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	entries = map[string]entry{}
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		switch line {
		case 1:
			if t != header {
				return 0, nil, fmt.Errorf("statcache: line 1: expected %q, got %q", header, t)
			}
			continue
		case 2:
			v, ok := strings.CutPrefix(t, "written ")
			if written, err = strconv.ParseInt(v, 10, 64); !ok || err != nil || written <= 0 {
				return 0, nil, fmt.Errorf("statcache: line 2: expected \"written NS\", got %q", t)
			}
			continue
		}
		p, e, err := parseEntry(t)
		if err != nil {
			return 0, nil, fmt.Errorf("statcache: line %d: %w", line, err)
		}
		if _, dup := entries[p]; dup {
			return 0, nil, fmt.Errorf("statcache: line %d: %s listed twice", line, p)
		}
		entries[p] = e
	}
	if err := sc.Err(); err != nil {
		return 0, nil, fmt.Errorf("statcache: %w", err)
	}
	if line < 2 {
		return 0, nil, errors.New("statcache: no header")
	}
	return written, entries, nil
}

// cutLastLine splits b, which must end in a newline, before its last line.
func cutLastLine(b []byte) (body []byte, last string, ok bool) {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, "", false
	}
	i := bytes.LastIndexByte(b[:len(b)-1], '\n')
	return b[:i+1], string(b[i+1 : len(b)-1]), true
}

func parseEntry(t string) (string, entry, error) {
	f := strings.SplitN(t, " ", 7)
	if len(f) != 7 {
		return "", entry{}, fmt.Errorf("expected 7 fields (sum dev ino size mtime ctime path), got %d", len(f))
	}
	var e entry
	if !isSum(f[0]) {
		return "", entry{}, fmt.Errorf("expected a sha256 (64 lower-case hex digits), got %q", f[0])
	}
	e.Sum = f[0]
	for i, dst := range []*int64{&e.Dev, &e.Ino, &e.Size, &e.Mtime, &e.Ctime} {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || v < 0 {
			return "", entry{}, fmt.Errorf("field %d: expected a number >= 0, got %q", i+2, f[i+1])
		}
		*dst = v
	}
	p, err := strconv.Unquote(f[6])
	if err != nil || !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return "", entry{}, fmt.Errorf("expected a quoted absolute clean path, got %s", f[6])
	}
	return p, e, nil
}

func isSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// Digest is the sha256 of the file at path, as "sha256:HEX": the remembered
// one when stat says the file is the one hashed, else read and hashed (and
// remembered for Save).
func (c *Cache) Digest(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	before, err := stat(abs)
	if err != nil {
		return "", err
	}
	if e, ok := c.entries[abs]; ok && e.Stat == before {
		return "sha256:" + e.Sum, nil
	}
	c.Hashed++
	f, err := os.Open(abs)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", abs, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// Remember it only if nothing changed while it was read.
	if after, err := stat(abs); err == nil && after == before {
		c.entries[abs] = entry{before, sum}
		c.dirty = true
	}
	return "sha256:" + sum, nil
}

func stat(path string) (Stat, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Stat{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return Stat{}, fmt.Errorf("%s: not a regular file", path)
	}
	return Stat{Dev: int64(st.Dev), Ino: int64(st.Ino), Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, nil
}

// Save writes the cache when Digest hashed something new: a temp file renamed
// over the old one, so a reader sees the old cache or the new, whole. The
// file's write time is the racy-clean bound of the next Load.
func (c *Cache) Save() error {
	if !c.dirty || c.path == "" {
		return nil
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nwritten %d\n", header, c.Now().UnixNano())
	paths := make([]string, 0, len(c.entries))
	for p := range c.entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		e := c.entries[p]
		fmt.Fprintf(&b, "%s %d %d %d %d %d %s\n", e.Sum, e.Dev, e.Ino, e.Size, e.Mtime, e.Ctime, strconv.Quote(p))
	}
	sum := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "sum %s\n", hex.EncodeToString(sum[:]))
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".statcache-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), c.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing the stat cache %s: %w", c.path, err)
	}
	c.dirty = false
	return nil
}
