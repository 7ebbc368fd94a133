// Package fsutil holds the file copies and syncs several stages need: one implementation,
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
)

// CopyFile copies src to dst, creating parent directories and replacing dst (a
// symlink at dst is replaced, never written through). The mode is set
// explicitly, so the umask cannot change it; mode 0 keeps src's permissions.
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
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
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
