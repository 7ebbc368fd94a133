package output

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path"
	"sort"
	"strings"
)

// Sum is one line of SHA256SUMS: "HEX  PATH\n".
type Sum struct {
	SHA256 string
	Path   string
}

// ParseSums parses SHA256SUMS strictly, the form FormatSums writes: sorted,
// unique, relative slash paths, lowercase hex, two spaces, LF line ends. It is
// the one reader of the file (sign, oci, serve and flash all use it).
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

// FormatSums writes SHA256SUMS: sums sorted by path, one "HEX  PATH\n" each. It is
// the one writer of the file (build's publish and sign).
func FormatSums(sums []Sum) []byte {
	s := append([]Sum(nil), sums...)
	sort.Slice(s, func(i, j int) bool { return s[i].Path < s[j].Path })
	var b bytes.Buffer
	for _, x := range s {
		fmt.Fprintf(&b, "%s  %s\n", x.SHA256, x.Path)
	}
	return b.Bytes()
}

// Lookup is the sha256 sums lists for path.
func Lookup(sums []Sum, path string) (string, bool) {
	for _, s := range sums {
		if s.Path == path {
			return s.SHA256, true
		}
	}
	return "", false
}
