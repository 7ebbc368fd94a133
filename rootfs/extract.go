package rootfs

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"syscall"

	"github.com/peerboot/peerboot/debfile"
)

// skipped are package paths that never help an appliance boot.
var skipped = regexp.MustCompile(`^usr/share/(doc|man|info|lintian|bug|locale)(/|$)`)

// imagePath maps a package path to the image, applying the usr-merge; false for
// a path that leaves the tree or is dropped.
func imagePath(name string) (string, bool) {
	p, ok := mergedPath(name)
	if !ok {
		return "", false
	}
	return p, !skipped.MatchString(p)
}

// mergedPath cleans a path inside the image and applies the usr-merge (bin, sbin,
// lib, lib64 are links into usr/ that the tree never writes through).
func mergedPath(name string) (string, bool) {
	p := path.Clean(strings.TrimPrefix(name, "./"))
	if p == "." || p == "" {
		return "", false
	}
	if strings.HasPrefix(p, "../") || p == ".." || path.IsAbs(p) {
		return "", false
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if p == l || strings.HasPrefix(p, l+"/") {
			p = "usr/" + p
		}
	}
	return p, true
}

// usrMergeLinks are the top-level links Build makes; a package (trixie's
// base-files) that ships them as symlinks finds them already in place.
var usrMergeLinks = map[string]bool{"usr/bin": true, "usr/sbin": true, "usr/lib": true, "usr/lib64": true}

func extractDeb(debPath, root string) error {
	f, err := os.Open(debPath)
	if err != nil {
		return err
	}
	defer f.Close()
	t, err := openTree(root)
	if err != nil {
		return err
	}
	defer t.Close()
	return debfile.Data(f, func(h *tar.Header, body io.Reader) error {
		p, ok := imagePath(h.Name)
		if !ok {
			return nil
		}
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = t.mkdirAll(p)
		case tar.TypeReg:
			// Streamed: a package's file is never held in memory whole.
			err = t.writeFile(p, body, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			if usrMergeLinks[p] && path.Clean(strings.TrimPrefix(h.Name, "./")) != p {
				return nil // ./lib -> usr/lib: the tree's own usr-merge link
			}
			// Created as shipped (absolute targets included): a link is only ever
			// made, never followed while writing.
			err = t.symlink(p, h.Linkname)
		case tar.TypeLink:
			// A hardlink becomes a copy: the initramfs stores no hardlinks.
			target, ok := mergedPath(h.Linkname)
			if !ok {
				return fmt.Errorf("hardlink %s -> %s leaves the tree", h.Name, h.Linkname)
			}
			err = t.copyEntry(p, target)
		default:
			return fmt.Errorf("%s: unsupported tar entry type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		return nil
	})
}

// writeFile writes data at image path p (usr-merge applied) under root, through
// the same checks as package entries: no directory on the way may be a symlink,
// and a symlink at p is replaced, not written through.
func writeFile(root, p string, data []byte, mode os.FileMode) error {
	return writeFrom(root, p, bytes.NewReader(data), mode)
}

// writeFrom is writeFile for bytes streamed from r.
func writeFrom(root, p string, r io.Reader, mode os.FileMode) error {
	ip, ok := mergedPath(p)
	if !ok {
		return fmt.Errorf("%s: not a path inside the image", p)
	}
	t, err := openTree(root)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.writeFile(ip, r, mode); err != nil {
		return fmt.Errorf("/%s: %w", ip, err)
	}
	return nil
}

// writeSymlink makes image path p (usr-merge applied) a symlink to target under
// root, replacing a file or link there; no directory on the way may be a symlink.
func writeSymlink(root, p, target string) error {
	ip, ok := mergedPath(p)
	if !ok {
		return fmt.Errorf("%s: not a path inside the image", p)
	}
	t, err := openTree(root)
	if err != nil {
		return err
	}
	defer t.Close()
	if err := t.symlink(ip, target); err != nil {
		return fmt.Errorf("/%s: %w", ip, err)
	}
	return nil
}

// tree writes into an image root. Every path is resolved inside the root
// (os.Root: openat one component at a time, nothing escapes), and every directory
// on the way must be a real directory: the tree is full of symlinks that packages
// ship (many absolute, many pointing nowhere on the build host), and a write that
// followed one could land anywhere, on the host included, as builds run as root.
type tree struct {
	root *os.Root
	dirs map[string]bool // directories checked or made; the tree never turns one into a link
}

func openTree(dir string) (*tree, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &tree{root: r, dirs: map[string]bool{".": true}}, nil
}

func (t *tree) Close() error { return t.root.Close() }

// SymlinkError is a write refused because a directory on its path is a symlink.
type SymlinkError struct {
	Dir, Target string // the link, as an image path, and where it points
}

func (e *SymlinkError) Error() string {
	return fmt.Sprintf("/%s is a symlink (to %s): refusing to go through it", e.Dir, e.Target)
}

// dir checks that p is a real directory, making it and its parents (0755) when
// create is set.
func (t *tree) dir(p string, create bool) error {
	if t.dirs[p] {
		return nil
	}
	if err := t.dir(path.Dir(p), create); err != nil {
		return err
	}
	info, err := t.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist) && create:
		if err := t.root.Mkdir(p, 0o755); err != nil {
			return err
		}
		if err := t.root.Chmod(p, 0o755); err != nil { // umask must not change the image
			return err
		}
	case err != nil:
		return err
	case info.Mode()&fs.ModeSymlink != 0:
		target, _ := t.root.Readlink(p)
		return &SymlinkError{Dir: p, Target: target}
	case !info.IsDir():
		return fmt.Errorf("/%s is a file, not a directory", p)
	}
	t.dirs[p] = true
	return nil
}

func (t *tree) mkdirAll(p string) error { return t.dir(p, true) }

// clear removes a file or symlink at p, so that a later entry replaces it (as dpkg
// does) instead of writing through it. A directory stays and is an error.
func (t *tree) clear(p string) error {
	info, err := t.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if info.IsDir() {
		return fmt.Errorf("/%s is a directory", p)
	}
	return t.root.Remove(p)
}

func (t *tree) writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := t.mkdirAll(path.Dir(p)); err != nil {
		return err
	}
	if err := t.clear(p); err != nil {
		return err
	}
	// O_EXCL: a name that reappeared since clear is never followed.
	f, err := t.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode) // umask must not change what lands in the image
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *tree) symlink(p, target string) error {
	if err := t.mkdirAll(path.Dir(p)); err != nil {
		return err
	}
	if err := t.clear(p); err != nil {
		return err
	}
	return t.root.Symlink(target, p)
}

// copyEntry lays down at p a copy of the entry at target, both inside the tree:
// a regular file's bytes and mode, or a symlink's target. Nothing outside the tree
// is read: target's directories must be real ones and target itself is not followed.
func (t *tree) copyEntry(p, target string) error {
	if err := t.dir(path.Dir(target), false); err != nil {
		return fmt.Errorf("hardlink target /%s: %w", target, err)
	}
	info, err := t.root.Lstat(target)
	if err != nil {
		return fmt.Errorf("hardlink target /%s is not in the tree (an earlier entry of the package): %w", target, err)
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		l, err := t.root.Readlink(target)
		if err != nil {
			return err
		}
		return t.symlink(p, l)
	case !info.Mode().IsRegular():
		return fmt.Errorf("hardlink target /%s is not a regular file", target)
	}
	f, err := t.root.OpenFile(target, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return t.writeFile(p, f, info.Mode().Perm())
}
