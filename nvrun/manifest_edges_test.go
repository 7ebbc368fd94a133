package nvrun

import (
	"errors"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// Manifest lines at the edges of what parseEntry accepts.
func TestManifestEdges(t *testing.T) {
	for _, c := range []struct{ line, msg string }{
		{"x 7777 UTILITY_BINARY", ""},
		{"x 10000 UTILITY_BINARY", "mode: want octal"},
		{"firmware/a/b.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:2", ""},
		{"firmware/a.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:2", "drops more directories"},
		{"firmware/a.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:0", ""}, // the path kept whole
		{"firmware/a.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:-1", "want INHERIT_PATH_DEPTH:N"},
		{"a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:16", ""},
		{"a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:17", "want INHERIT_PATH_DEPTH:N"},
		{"firmware/a.bin 0644 FIRMWARE DEPTH:1", "want INHERIT_PATH_DEPTH:N"},
		{"firmware/a.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:x", "want INHERIT_PATH_DEPTH:N"},
		{"l 0000 UTILITY_BIN_SYMLINK a/../b", "leaves its directory"},
		{"l.so 0755 CUDA_LIB NATIVE", "missing its path field"},
		{"l.so 0755 CUDA_LIB NATIVE / MODULE:x MODULE:y", ""},
		{"x y", "want FILE MODE TYPE"},
		{"./a 0755 UTILITY_BINARY", ""},
		{"a//b 0755 UTILITY_BINARY", "leaves the payload"},
		{"a\\b 0755 UTILITY_BINARY", "leaves the payload"},
		// An arch field that is there but neither NATIVE nor COMPAT32.
		{"l.so 0755 CUDA_LIB AMD64 /", "want NATIVE or COMPAT32"},
		// A bare depth, without its INHERIT_PATH_DEPTH: prefix.
		{"firmware/a.bin 0644 FIRMWARE 1", "want INHERIT_PATH_DEPTH:N"},
	} {
		_, err := ParseManifest([]byte(nvruntest.Manifest(v) + c.line + "\n"))
		var me *ManifestError
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%q: %v", c.line, err)
		case c.msg != "" && (!errors.As(err, &me) || me.Line != 26 || !strings.Contains(err.Error(), c.msg)):
			t.Errorf("%q: got %v, want line 26: %s", c.line, err, c.msg)
		}
	}
	// The manifest's own bounds: at most maxManifest bytes, at least the header lines.
	if _, err := ParseManifest(make([]byte, maxManifest+1)); err == nil || !strings.Contains(err.Error(), "a manifest is at most") {
		t.Errorf("an oversized manifest: %v", err)
	}
	if _, err := ParseManifest([]byte("d\n1.2\n\n\n\n\n\n")); err == nil || !strings.Contains(err.Error(), "ends inside the 8 header lines") {
		t.Errorf("a short manifest: %v", err)
	}
	if _, err := ParseManifest([]byte("d\n1.2\n\n\n\n\n\n\n")); err != nil {
		t.Errorf("a manifest of only its header: %v", err)
	}
	if _, err := ParseManifest([]byte("\n1.2\n\n\n\n\n\n\n")); err == nil || !strings.Contains(err.Error(), "empty description") {
		t.Errorf("no description: %v", err)
	}
	m, err := ParseManifest([]byte(nvruntest.Manifest(v) + "\nafter 0755 UTILITY_BINARY\n"))
	if err != nil || len(m.Entries) != 17 {
		t.Errorf("entries after the first empty line are not read: %v, %d entries", err, len(m.Entries))
	}
	// A manifest whose last entry line has no newline after it: every line
	// is read, the last one too.
	m, err = ParseManifest([]byte(strings.TrimSuffix(nvruntest.Manifest(v), "\n")))
	if err != nil || len(m.Entries) != 17 || m.Entries[16].File != "firmware/gsp_tu10x.bin" {
		t.Errorf("no newline at the end: %v, %d entries", err, len(m.Entries))
	}
	e := Entry{File: "firmware/x/y.bin", InheritDepth: 2}
	if e.InstallPath() != "y.bin" {
		t.Errorf("InstallPath %q", e.InstallPath())
	}
}
