package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An output whose listed file was replaced by a symlink or a directory is not
// reused, and store verify names it: a symlink would make the build read (and
// the image carry) bytes from wherever it points. The symlink's target name is
// as long as the file was, so the size check alone cannot see it; the
// directory case has no SIZES (an output from before SIZES), so only the
// regular-file check can. (Issue 35: no test failed without that check.)
func TestReplacedOutputIsNotReused(t *testing.T) {
	const body = "kernel bytes" // 12 bytes
	cases := []struct {
		name    string
		noSizes bool
		replace func(t *testing.T, p string)
	}{
		{"symlink of the same size", false, func(t *testing.T, p string) {
			// "vmlinuz.real" is 12 bytes, as long as the file was, and holds its bytes.
			os.WriteFile(filepath.Join(filepath.Dir(p), "vmlinuz.real"), []byte(body), 0o644)
			os.Remove(p)
			if err := os.Symlink("vmlinuz.real", p); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink, no SIZES", true, func(t *testing.T, p string) {
			os.Remove(p)
			if err := os.Symlink("/etc/hostname", p); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory, no SIZES", true, func(t *testing.T, p string) {
			os.Remove(p)
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, _ := Open(t.TempDir())
			key := "kernel-" + strings.Repeat("ab", 32)
			commitTestOutput(t, st, key, map[string]string{"boot/vmlinuz": body})
			if c.noSizes {
				os.Remove(filepath.Join(st.OutputDir(key), "SIZES"))
			}
			if err := st.CheckOutput(key); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(st.OutputDir(key), "boot", "vmlinuz")
			c.replace(t, p)
			if l, err := os.Readlink(p); err == nil && !c.noSizes && len(l) != len(body) {
				t.Fatalf("the link's target %q must be %d bytes, as the file was", l, len(body))
			}
			if st.HasOutput(key) {
				t.Fatal("an output whose file was replaced is reused")
			}
			if err := st.CheckOutput(key); err == nil || !strings.Contains(err.Error(), "boot/vmlinuz: not a regular file") {
				t.Fatalf("got %v", err)
			}
			ps, err := st.Verify(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, pr := range ps {
				found = found || (pr.Path == p && strings.Contains(pr.String(), "not a regular file"))
			}
			if !found {
				t.Fatalf("store verify: %v, want %s named as not a regular file", ps, p)
			}
		})
	}
}
