package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Scratch is a directory a stage builds in, under tmp/. It is locked (flock on
// locks/scratch-<name>.lock) for as long as it is open, and GC never removes a
// locked scratch, however old its mtime: a long compile writes deep inside it and
// leaves the directory's own mtime alone.
type Scratch struct {
	Dir  string
	lock *os.File
}

// OpenScratch makes an empty, locked scratch directory for stage, on the store's
// filesystem so CommitOutput can rename it (or a directory inside it) into place.
// Remove or Release it when the stage is done.
func (s *Store) OpenScratch(stage string) (*Scratch, error) {
	for {
		sc, retry, err := s.openScratch(stage)
		if !retry {
			return sc, err
		}
	}
}

// openScratch takes the lock first and makes the directory second, so GC never
// finds the directory unlocked. If GC swept the fresh lock file before it was
// locked, it says to retry.
func (s *Store) openScratch(stage string) (*Scratch, bool, error) {
	f, err := os.CreateTemp(filepath.Join(s.Root, "locks"), "scratch-"+stage+"-*.lock")
	if err != nil {
		return nil, false, fmt.Errorf("scratch for %s: %w", stage, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	if !sameFile(f) {
		f.Close()
		return nil, true, nil
	}
	name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f.Name()), "scratch-"), ".lock")
	sc := &Scratch{Dir: filepath.Join(s.Root, "tmp", name), lock: f}
	if err := os.Mkdir(sc.Dir, 0o755); err != nil {
		sc.unlock(true)
		return nil, false, fmt.Errorf("scratch for %s: %w", stage, err)
	}
	return sc, false, nil
}

// sameFile says whether f's path still names f's inode.
func sameFile(f *os.File) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(f.Name())
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// Remove deletes the scratch directory, then drops the lock.
func (sc *Scratch) Remove() error {
	err := os.RemoveAll(sc.Dir)
	sc.unlock(err == nil)
	return err
}

// Release drops the lock and keeps the directory (`build --keep`, or to look at
// a failure): GC may collect it once it is older than its --older-than.
func (sc *Scratch) Release() { sc.unlock(false) }

func (sc *Scratch) unlock(removeFile bool) {
	if sc.lock == nil {
		return
	}
	if removeFile {
		os.Remove(sc.lock.Name()) // while still locked: GC never takes a lock being removed for a live dir
	}
	syscall.Flock(int(sc.lock.Fd()), syscall.LOCK_UN)
	sc.lock.Close()
	sc.lock = nil
}

// NewScratch is OpenScratch for callers that keep only the path: the scratch
// stays locked until the process exits (a build's scratch lives as long as the
// build), so GC never removes it under a running build.
func (s *Store) NewScratch(stage string) (string, error) {
	sc, err := s.OpenScratch(stage)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.held = append(s.held, sc) // reachable, so no finalizer closes the lock
	s.mu.Unlock()
	return sc.Dir, nil
}

// tryLock takes the lock at path without waiting. ok is false when someone holds
// it; a missing file is (nil, true, nil): nothing locks it.
func tryLock(path string) (unlock func(remove bool), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return func(bool) {}, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("locking %s: %w", path, err)
	}
	return func(remove bool) {
		if remove {
			os.Remove(path)
		}
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, true, nil
}
