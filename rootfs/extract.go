package rootfs

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/peerboot/peerboot/debfile"
)

// skipped are package paths that never help an appliance boot.
var skipped = regexp.MustCompile(`^usr/share/(doc|man|info|lintian|bug|locale)(/|$)`)

// imagePath maps a package path to the image, applying the usr-merge.
func imagePath(name string) (string, bool) {
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
	return p, !skipped.MatchString(p)
}

func extractDeb(debPath, root string) error {
	f, err := os.Open(debPath)
	if err != nil {
		return err
	}
	defer f.Close()
	return debfile.Data(f, func(h *tar.Header, body io.Reader) error {
		p, ok := imagePath(h.Name)
		if !ok {
			return nil
		}
		dst := filepath.Join(root, p)
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, body); err != nil {
				return err
			}
			return writeFile(root, p, buf.Bytes(), os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			os.MkdirAll(filepath.Dir(dst), 0o755)
			os.Remove(dst)
			return os.Symlink(h.Linkname, dst)
		case tar.TypeLink:
			// A hardlink becomes a copy: the initramfs stores no hardlinks.
			target, ok := imagePath(h.Linkname)
			if !ok {
				return fmt.Errorf("hardlink %s -> %s leaves the tree", h.Name, h.Linkname)
			}
			data, err := os.ReadFile(filepath.Join(root, target))
			if err != nil {
				return fmt.Errorf("hardlink %s: %w", h.Name, err)
			}
			info, _ := os.Stat(filepath.Join(root, target))
			return writeFile(root, p, data, info.Mode().Perm())
		}
		return fmt.Errorf("%s: unsupported tar entry type %q", h.Name, h.Typeflag)
	})
}

func writeFile(root, p string, data []byte, mode os.FileMode) error {
	dst := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	os.Remove(dst) // replace a symlink rather than write through it
	if err := os.WriteFile(dst, data, mode); err != nil {
		return err
	}
	return os.Chmod(dst, mode) // umask must not change what lands in the image
}
