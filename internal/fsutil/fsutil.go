// Package fsutil holds the file copies, syncs, atomic writes and hashing several stages need: one implementation,
// so every stage treats modes, symlinks and existing files the same way.
package fsutil

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// CopyFile copies src to dst, creating parent directories and replacing dst (a
// symlink at dst is replaced, never written through). The mode is set
// explicitly, so the umask cannot change it; mode 0 keeps src's permissions.
// Holes in src stay holes in dst: a disk image is mostly holes, and a dense
// copy of one writes all of them.
func CopyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if mode == 0 {
		info, err := in.Stat()
		if err != nil {
			return err
		}
		mode = info.Mode().Perm()
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	os.Remove(dst)
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if err := copySparse(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// copySparse copies in's data extents (SEEK_DATA/SEEK_HOLE) to the empty out
// at the same offsets and sets out's size; where the filesystem cannot say, it
// copies everything.
func copySparse(out, in *os.File) error {
	info, err := in.Stat()
	if err != nil {
		return err
	}
	size, fd := info.Size(), int(in.Fd())
	for pos := int64(0); pos < size; {
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole from pos on
		}
		if err != nil {
			if _, err := in.Seek(0, io.SeekStart); err != nil {
				return err
			}
			_, err = io.Copy(out, in)
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		pos = hole
	}
	return out.Truncate(size)
}

// CopyTree copies directories, regular files (keeping their permissions) and
// symlinks (as symlinks) from src to dst. skip, if set, leaves out regular
// files by their path relative to src.
func CopyTree(src, dst string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			os.Remove(target)
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			if skip != nil && skip(rel) {
				return nil
			}
			return CopyFile(path, target, 0)
		}
		return nil
	})
}

// SyncTree fsyncs every file and directory under dir, so a rename that publishes it
// cannot expose files whose data is not on disk yet. EINVAL (special files that
// cannot be synced) is not an error.
func SyncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("syncing %s: %w", p, err)
		}
		return nil
	})
}

// HashFile returns the hex sha256 of the file at path: the one file hasher of the
// module (the store's blobs and outputs, sign's and oci's output files, flash's image).
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// WriteAtomic replaces path with what write writes, the module's one atomic file
// writer: write fills a temporary file beside path, which is given mode (set
// explicitly, so the umask cannot change it), synced, renamed over path, and the
// directory synced, so a reader or a crash sees the old file or the new one,
// never a part. Every error is returned, a failed sync's included; on one, path
// is left as it was and the temporary file removed.
func WriteAtomic(path string, mode os.FileMode, write func(f *os.File) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	err = write(f)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return Sync(dir)
}

// WriteFileAtomic is WriteAtomic of data.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return WriteAtomic(path, mode, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// Sync fsyncs the file or directory at path (a directory: so that a rename or a
// new entry in it is on disk).
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return nil
}
