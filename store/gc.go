package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GCStats says what GC removed.
type GCStats struct {
	Removed int
	Bytes   int64
	InUse   int // locked by a running build or download, kept whatever their age
}

// GC removes leftovers of interrupted work under tmp/: scratch directories and
// partial downloads older than maxAge (a partial download younger than maxAge is
// kept so fetch can still resume it). A scratch directory or partial download
// whose lock is held (a running build, a running download) is never removed, so
// even maxAge 0 is safe next to a build. Committed inputs and stage outputs are
// never touched.
func (s *Store) GC(maxAge time.Duration, now time.Time) (GCStats, error) {
	var st GCStats
	entries, err := os.ReadDir(filepath.Join(s.Root, "tmp"))
	if err != nil {
		return st, err
	}
	for _, e := range entries {
		lock := filepath.Join(s.Root, "locks", "scratch-"+e.Name()+".lock")
		if !e.IsDir() {
			sum, _ := strings.CutSuffix(e.Name(), ".partial")
			lock = filepath.Join(s.Root, "locks", "blob-"+sum+".lock")
		}
		unlock, ok, err := tryLock(lock)
		if err != nil {
			return st, err
		}
		if !ok {
			st.InUse++
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < maxAge {
			unlock(false)
			continue
		}
		p := filepath.Join(s.Root, "tmp", e.Name())
		st.Bytes += du(p)
		err = os.RemoveAll(p)
		unlock(err == nil && e.IsDir())
		if err != nil {
			return st, err
		}
		st.Removed++
	}
	// Lock files of scratches that are gone (their build ended or was killed).
	locks, _ := filepath.Glob(filepath.Join(s.Root, "locks", "scratch-*.lock"))
	for _, l := range locks {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(l), "scratch-"), ".lock")
		if _, err := os.Lstat(filepath.Join(s.Root, "tmp", name)); err == nil {
			continue
		}
		if unlock, ok, err := tryLock(l); err == nil && ok {
			unlock(true)
		}
	}
	return st, nil
}

func du(path string) int64 {
	var n int64
	filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
