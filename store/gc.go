package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// GCStats says what GC removed.
type GCStats struct {
	Removed int
	Bytes   int64
}

// GC removes leftovers of interrupted work under tmp/: scratch directories and
// partial downloads older than maxAge (a running build's scratch is younger; a
// partial download younger than maxAge is kept so fetch can still resume it).
// Committed inputs and stage outputs are never touched.
func (s *Store) GC(maxAge time.Duration, now time.Time) (GCStats, error) {
	var st GCStats
	entries, err := os.ReadDir(filepath.Join(s.Root, "tmp"))
	if err != nil {
		return st, err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < maxAge {
			continue
		}
		p := filepath.Join(s.Root, "tmp", e.Name())
		st.Bytes += du(p)
		if err := os.RemoveAll(p); err != nil {
			return st, err
		}
		st.Removed++
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
