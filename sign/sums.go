package sign

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Sum is one line of SHA256SUMS: "HEX  PATH\n".
type Sum struct {
	SHA256 string
	Path   string
}

// ParseSums parses SHA256SUMS strictly, the form build.Publish writes: sorted,
// unique, relative slash paths, lowercase hex, two spaces, LF line ends.
func ParseSums(b []byte) ([]Sum, error) {
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%s: empty or not ending in a newline", SumsFile)
	}
	var out []Sum
	for i, line := range strings.Split(string(b[:len(b)-1]), "\n") {
		h, p, ok := strings.Cut(line, "  ")
		if !ok || len(h) != 64 || strings.ToLower(h) != h {
			return nil, fmt.Errorf("%s:%d: want \"<64 lowercase hex>  PATH\", got %q", SumsFile, i+1, line)
		}
		if _, err := hex.DecodeString(h); err != nil {
			return nil, fmt.Errorf("%s:%d: sha256 %q is not hex", SumsFile, i+1, h)
		}
		if p == "" || path.Clean(p) != p || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
			return nil, fmt.Errorf("%s:%d: path %q is not a clean relative path", SumsFile, i+1, p)
		}
		if n := len(out); n > 0 && out[n-1].Path >= p {
			return nil, fmt.Errorf("%s:%d: path %q is out of order or repeated", SumsFile, i+1, p)
		}
		out = append(out, Sum{SHA256: h, Path: p})
	}
	return out, nil
}

// FormatSums writes sums sorted by path, as build.Publish does.
func FormatSums(sums []Sum) []byte {
	s := append([]Sum(nil), sums...)
	sort.Slice(s, func(i, j int) bool { return s[i].Path < s[j].Path })
	var b bytes.Buffer
	for _, x := range s {
		fmt.Fprintf(&b, "%s  %s\n", x.SHA256, x.Path)
	}
	return b.Bytes()
}

// HashFile returns a file's sha256, hex.
func HashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeAtomic writes data to p through a temporary file in the same directory.
func writeAtomic(p string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}
