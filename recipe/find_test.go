package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(a, "xeon-8gpu.toml"), filepath.Join(a, "epyc-4gpu.toml"), filepath.Join(b, "lab.toml"), filepath.Join(b, "epyc-4gpu.toml")} {
		os.WriteFile(f, []byte("name = \"x\"\n"), 0o644)
	}
	os.MkdirAll(filepath.Join(a, "drivers"), 0o755)
	os.WriteFile(filepath.Join(a, "drivers", "550.toml"), nil, 0o644)
	dirs := []string{a, b}
	cases := []struct {
		arg, want, err string
	}{
		{"xeon-8gpu", filepath.Join(a, "xeon-8gpu.toml"), ""},
		{"lab", filepath.Join(b, "lab.toml"), ""},
		{"epyc-4gpu", filepath.Join(a, "epyc-4gpu.toml"), ""}, // the first directory wins
		{filepath.Join(b, "epyc-4gpu.toml"), filepath.Join(b, "epyc-4gpu.toml"), ""},
		{"xeon8gpu", "", "xeon8gpu: no such recipe in " + a + ", " + b + " (did you mean xeon-8gpu?)"},
		{"frobnicator", "", "frobnicator: no such recipe in " + a + ", " + b + "; there are epyc-4gpu, xeon-8gpu, epyc-4gpu, lab"},
		{"550", "", "550: no such recipe"}, // drivers/ files are included, not built
		{filepath.Join(a, "xeon-8gup.toml"), "", "no such file (did you mean " + filepath.Join(a, "xeon-8gpu.toml") + "?)"},
		{"relative/nosuch.toml", "", "relative/nosuch.toml: no such file"},
	}
	for _, c := range cases {
		got, err := Find(c.arg, dirs)
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("Find(%q) = %q, %v; want %q", c.arg, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrNotFound) {
			t.Errorf("Find(%q) = %q, %v; want an ErrNotFound containing %q", c.arg, got, err, c.err)
		}
	}
	if _, err := Find("x", nil); err == nil || !strings.Contains(err.Error(), "set PEERBOOT_RECIPES") {
		t.Errorf("Find with no directories: %v", err)
	}
}
