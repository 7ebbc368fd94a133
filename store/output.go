package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var keyRe = regexp.MustCompile(`^[a-z0-9-]+-[0-9a-f]{64}$`)

// OutputDir is where the output of action key lives (whether or not it exists).
// Keys look like "kernel-<sha256>".
func (s *Store) OutputDir(key string) string { return filepath.Join(s.Root, "out", key) }

// HasOutput says whether a committed output exists for key.
func (s *Store) HasOutput(key string) bool {
	_, err := os.Stat(filepath.Join(s.OutputDir(key), manifestName))
	return err == nil
}

// CommitOutput writes dir's MANIFEST (sha256 of every regular file) and renames dir
// to the output of key. If another process committed key first, dir is removed and
// theirs kept: both are the same function of the same inputs.
func (s *Store) CommitOutput(key, dir string) error {
	if !keyRe.MatchString(key) {
		return fmt.Errorf("store: malformed action key %q", key)
	}
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		sum, err := HashFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+rel)
		return nil
	})
	if err != nil {
		return fmt.Errorf("hashing output %s: %w", dir, err)
	}
	sort.Strings(lines)
	body := strings.Join(lines, "\n")
	if body != "" {
		body += "\n"
	}
	if err := writeFileSync(filepath.Join(dir, manifestName), []byte(body)); err != nil {
		return err
	}
	unlock, err := s.Lock("out-" + key)
	if err != nil {
		return err
	}
	defer unlock()
	if s.HasOutput(key) {
		return os.RemoveAll(dir)
	}
	dst := s.OutputDir(key)
	os.RemoveAll(dst) // a stale directory without MANIFEST is an interrupted commit
	if err := os.Rename(dir, dst); err != nil {
		return fmt.Errorf("committing output %s: %w", key, err)
	}
	syncDir(filepath.Dir(dst))
	return nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ErrNoOutput is returned when a stage output is needed but absent.
var ErrNoOutput = errors.New("no such stage output in the store")
