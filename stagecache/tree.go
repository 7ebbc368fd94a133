package stagecache

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/peerboot/peerboot/store"
)

// The tree layer is a tar of a stage output without its two records
// (MANIFEST, SIZES travel as layers of their own): directories, regular files
// and symlinks in lexical walk order, permission bits only, owner 0, every
// time the epoch. So one output gives one byte stream on every builder, and
// two builders pushing the same stage push the same blob.

// epoch is every time a tree entry carries.
var epoch = time.Unix(0, 0).UTC()

// writeTree writes dir's tree to w and returns its regular files with their
// sha256 and size, in store.Records form.
func writeTree(ctx context.Context, dir string, w io.Writer) ([]store.OutputFile, error) {
	tw := tar.NewWriter(w)
	var files []store.OutputFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || store.IsRecord(rel) {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), ModTime: epoch}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case d.Type()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case d.Type().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			return fmt.Errorf("%s: a %s, not a file, directory or symlink: a stage output cannot hold it", p, info.Mode().Type())
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		sum := sha256.New()
		n, err := io.Copy(io.MultiWriter(tw, sum), f)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if n != h.Size {
			return fmt.Errorf("%s changed while it was read (%d bytes, then %d)", p, h.Size, n)
		}
		files = append(files, store.OutputFile{Path: rel, SHA256: hex.EncodeToString(sum.Sum(nil)), Size: n})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// extractTree unpacks a tree layer into root and returns its regular files as
// writeTree does. The bytes are outside input until their digest is checked
// (after this returns), so every entry is held to what writeTree writes: a
// clean relative name met once, a directory, regular file or symlink, no
// entry below a symlink, permission bits only; os.Root keeps every write
// inside root whatever the names say.
func extractTree(ctx context.Context, r io.Reader, root *os.Root) ([]store.OutputFile, error) {
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	links := map[string]bool{}
	var files []store.OutputFile
	type dirMode struct {
		name string
		perm fs.FileMode
	}
	var dirs []dirMode // their own modes last: a read-only directory is filled first
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the tree: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if err := checkName(name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("tree entry %q appears twice", name)
		}
		seen[name] = true
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if links[dir] {
				return nil, fmt.Errorf("tree entry %q lies below the symlink %q", name, dir)
			}
		}
		if h.Mode&^0o777 != 0 {
			return nil, fmt.Errorf("tree entry %q: mode %#o has bits beyond the permissions", name, h.Mode)
		}
		perm := fs.FileMode(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil {
				return nil, err
			}
			dirs = append(dirs, dirMode{name, perm})
		case tar.TypeSymlink:
			if h.Linkname == "" || strings.ContainsRune(h.Linkname, 0) {
				return nil, fmt.Errorf("tree entry %q: empty or NUL-bearing symlink target", name)
			}
			links[name] = true
			if err := root.Symlink(h.Linkname, name); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return nil, err
			}
			sum := sha256.New()
			n, err := copySparse(f, io.TeeReader(tr, sum))
			if err == nil {
				err = f.Chmod(perm)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, fmt.Errorf("writing %s: %w", name, err)
			}
			files = append(files, store.OutputFile{Path: name, SHA256: hex.EncodeToString(sum.Sum(nil)), Size: n})
		default:
			return nil, fmt.Errorf("tree entry %q: type %q is not a directory, regular file or symlink", name, h.Typeflag)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chmod(dirs[i].name, dirs[i].perm); err != nil {
			return nil, err
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// checkName accepts what writeTree writes: relative, clean, slash-separated,
// not one of the records.
func checkName(name string) error {
	if name == "" || !filepath.IsLocal(name) || path.Clean(name) != name || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("tree entry %q is not a clean relative path", name)
	}
	if store.IsRecord(name) {
		return fmt.Errorf("tree entry %q: the records travel as their own layers", name)
	}
	return nil
}

// copySparse writes r to f leaving holes for runs of zeros (a disk image is
// mostly empty, and its stage output was written sparse too).
func copySparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			chunk := buf[:k]
			if isZero(chunk) {
				_, werr := f.Seek(int64(k), io.SeekCurrent)
				if werr != nil {
					return n, werr
				}
			} else if _, werr := f.Write(chunk); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n, f.Truncate(n)
		}
		if err != nil {
			return n, err
		}
	}
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
