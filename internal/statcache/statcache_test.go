package statcache

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// later is a clock far enough ahead that the files a test just wrote are not
// racily clean when the cache is written.
func later() time.Time { return time.Now().Add(time.Hour) }

// digestSaved asks c for path's digest, checks it against want, and saves c.
func digestSaved(t *testing.T, c *Cache, path, want string) {
	t.Helper()
	got, err := c.Digest(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("digest of %s: got %s, want %s", path, got, want)
	}
	if err := c.Save(); err != nil {
		t.Fatal(err)
	}
}

func TestDigest(t *testing.T) {
	a := []byte("the init, version 1\n")
	b := []byte("the init, version 2\n") // same size
	cases := []struct {
		name string
		edit func(t *testing.T, path string) // between the first build and the second
		want []byte                          // the second digest's content
		hash bool                            // the second digest reads the file
		now  func() time.Time                // the first save's clock (nil: later)
	}{
		{"unchanged: remembered", func(*testing.T, string) {}, a, false, nil},
		{"same size, mtime put back: ctime shows it", func(t *testing.T, p string) {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			write(t, p, b)
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}, b, true, nil},
		// Within one clock tick the stat may not change at all: the real
		// clock leaves the entry racily clean, so it is hashed again.
		{"same second, same size", func(t *testing.T, p string) { write(t, p, b) }, b, true, time.Now},
		{"replaced by rename (new inode)", func(t *testing.T, p string) {
			write(t, p+".new", b)
			if err := os.Rename(p+".new", p); err != nil {
				t.Fatal(err)
			}
		}, b, true, nil},
		{"grown", func(t *testing.T, p string) { write(t, p, append(a, 'x')) }, append(a, 'x'), true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, cpath := filepath.Join(dir, "init"), filepath.Join(dir, "hints", "statcache")
			write(t, p, a)
			c := Load(cpath)
			c.Now = later
			if tc.now != nil {
				c.Now = tc.now
			}
			digestSaved(t, c, p, sumOf(a))
			tc.edit(t, p)
			c = Load(cpath)
			digestSaved(t, c, p, sumOf(tc.want))
			if got := c.Hashed == 1; got != tc.hash {
				t.Errorf("hashed %d times, want hashing %v", c.Hashed, tc.hash)
			}
		})
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// An entry whose times are not older than the cache's write time is hashed
// again at the next load (git's racy-clean rule), then trusted after that.
func TestRacyEntryHashedAgain(t *testing.T) {
	dir := t.TempDir()
	p, cpath := filepath.Join(dir, "p2pcheck"), filepath.Join(dir, "statcache")
	write(t, p, []byte("p2pcheck"))
	c := Load(cpath) // the real clock: the file was written within Racy of the save
	digestSaved(t, c, p, sumOf([]byte("p2pcheck")))
	c = Load(cpath)
	c.Now = later
	digestSaved(t, c, p, sumOf([]byte("p2pcheck")))
	if c.Hashed != 1 {
		t.Errorf("a racily clean entry was trusted (hashed %d times, want 1)", c.Hashed)
	}
	c = Load(cpath)
	digestSaved(t, c, p, sumOf([]byte("p2pcheck")))
	if c.Hashed != 0 {
		t.Errorf("an entry saved well after the file's times was hashed again (%d)", c.Hashed)
	}
}

// A damaged, truncated, foreign or hand-edited cache is ignored whole: the
// digest is the file's, never the cache's.
func TestBadCacheIgnored(t *testing.T) {
	dir := t.TempDir()
	p, cpath := filepath.Join(dir, "init"), filepath.Join(dir, "statcache")
	write(t, p, []byte("real"))
	c := Load(cpath)
	c.Now = later
	digestSaved(t, c, p, sumOf([]byte("real")))
	good, err := os.ReadFile(cpath)
	if err != nil {
		t.Fatal(err)
	}
	realSum := strings.TrimPrefix(sumOf([]byte("real")), "sha256:")
	liar := strings.ReplaceAll(string(good), realSum, strings.Repeat("0", 64))
	for name, bad := range map[string][]byte{
		"garbage":             []byte("\x00\xffnot a cache at all\n"),
		"empty":               nil,
		"truncated":           good[:len(good)/2],
		"foreign header":      []byte(strings.Replace(string(good), header, "peerboot statcache 9", 1)),
		"edited digest":       []byte(liar),
		"edited, sum redone":  resum(liar),
		"no trailing newline": good[:len(good)-1],
	} {
		t.Run(name, func(t *testing.T) {
			write(t, cpath, bad)
			c := Load(cpath)
			got, err := c.Digest(p)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case name == "edited, sum redone":
				// A well-formed cache is trusted for a file whose stat it
				// matches: that is the bargain (as git's index). The file is
				// the cache's own: the store's hints, written by peerboot.
				if got != "sha256:"+strings.Repeat("0", 64) {
					t.Errorf("a well-formed entry was not used: %s", got)
				}
			case got != sumOf([]byte("real")) || c.Hashed != 1:
				t.Errorf("a %s cache was trusted: %s (hashed %d)", name, got, c.Hashed)
			}
		})
	}
}

// resum recomputes the closing sum line of a cache file's text.
func resum(s string) []byte {
	body := s[:strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")+1]
	sum := sha256.Sum256([]byte(body))
	return []byte(body + "sum " + hex.EncodeToString(sum[:]) + "\n")
}

func TestParse(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	ok := header + "\nwritten 1700000000000000000\n" + sum + ` 1 2 3 4 5 "/bin/init"` + "\n"
	cases := []struct {
		name, body, err string
	}{
		{"good", ok, ""},
		{"no entries", header + "\nwritten 5\n", ""},
		{"bad header", "peerboot statcache 0\nwritten 5\n", "line 1"},
		{"no written", header + "\n", "no header"},
		{"bad written", header + "\nwritten x\n", "line 2"},
		{"zero written", header + "\nwritten 0\n", "line 2"},
		{"short entry", header + "\nwritten 5\n" + sum + " 1 2 3\n", "line 3: expected 7 fields"},
		{"bad sum", header + "\nwritten 5\n" + strings.Repeat("AB", 32) + ` 1 2 3 4 5 "/x"` + "\n", "line 3: expected a sha256"},
		{"negative", header + "\nwritten 5\n" + sum + ` 1 -2 3 4 5 "/x"` + "\n", "line 3: field 3"},
		{"relative path", header + "\nwritten 5\n" + sum + ` 1 2 3 4 5 "x"` + "\n", "line 3: expected a quoted absolute"},
		{"unquoted path", header + "\nwritten 5\n" + sum + ` 1 2 3 4 5 /x` + "\n", "line 3: expected a quoted absolute"},
		{"twice", ok + sum + ` 1 2 3 4 5 "/bin/init"` + "\n", "line 4: /bin/init listed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, es, err := Parse(resum(tc.body + "sum x\n"))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if w <= 0 {
					t.Errorf("written %d", w)
				}
				if tc.name == "good" && (es["/bin/init"] != entry{Stat{1, 2, 3, 4, 5}, sum}) {
					t.Errorf("entries %+v", es)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
	if _, _, err := Parse([]byte(ok + "sum " + strings.Repeat("0", 64) + "\n")); err == nil || !strings.Contains(err.Error(), "closing sum") {
		t.Errorf("a wrong closing sum: %v", err)
	}
}

// The cache file is outside bytes (anything may have written the store's
// hints): Parse must never panic, and what it accepts must be what Save writes
// back the same.
func FuzzParse(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	f.Add(resum(header + "\nwritten 5\n" + sum + ` 1 2 3 4 5 "/bin/init"` + "\nsum x\n"))
	f.Add([]byte("garbage"))
	f.Add(resum(header + "\nwritten 5\nsum x\n"))
	f.Add([]byte(header + "\nwritten 5\n" + sum + ` 1 2 3 4 5 "/bin/init"` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b)
		// The closing sum stops most mutations at the door: also give the
		// line parser the bytes with a sum that matches them.
		sum := sha256.Sum256(b)
		roundTrip(t, append(append([]byte{}, b...), "sum "+hex.EncodeToString(sum[:])+"\n"...))
	})
}

func roundTrip(t *testing.T, b []byte) {
	{
		w, es, err := Parse(b)
		if err != nil {
			return
		}
		c := &Cache{path: filepath.Join(t.TempDir(), "c"), entries: es, dirty: true, Now: func() time.Time { return time.Unix(0, w) }}
		if err := c.Save(); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		w2, es2, err := Parse(again)
		if err != nil || w2 != w || len(es2) != len(es) {
			t.Fatalf("what Parse accepted does not survive Save: %v, %d vs %d, %d vs %d entries", err, w2, w, len(es2), len(es))
		}
		for p, e := range es {
			if es2[p] != e {
				t.Fatalf("entry %s: %+v became %+v", p, e, es2[p])
			}
		}
	}
}
