package recipe

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookupGPU(t *testing.T) {
	for model, want := range map[string]string{
		"RTX 5090": "GB202/120", "RTX 5090 D": "GB202/120", "rtx  5090": "GB202/120",
		"RTX 4090": "AD102/89", "RTX 4090 48G": "AD102/89", "RTX 3090": "GA102/86",
		"RTX 50900": "", "A100": "", "": "",
	} {
		g, ok := LookupGPU(model)
		got := ""
		if ok {
			got = g.Chip + "/" + itoa(g.SM)
		}
		if got != want {
			t.Errorf("LookupGPU(%q) = %q, want %q", model, got, want)
		}
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{
		{"2.25.1-1", "2.25.1", true}, {"2.25.1~rc1-1", "2.25.1", true}, {"2.29.7-1-1", "2.25.1", true},
		{"2.22.3-1-1", "2.25.1", false}, {"2.3.7-1", "2.25.1", false}, {"1:2.0", "2.25.1", true},
		{"2.25.0-9", "2.25.1", false}, {"not a version!", "2.25.1", false},
	} {
		if got := AtLeast(c.v, c.min); got != c.want {
			t.Errorf("AtLeast(%q, %q) = %v, want %v", c.v, c.min, got, c.want)
		}
	}
}

// The rule is reported where the offending key was written, also when a platform
// recipe takes its userspace from a driver include.
func TestCompatErrorAtTheIncludedLine(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"drivers/595.toml": `[[repo]]
suite = "trixie"
components = ["main", "contrib"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"

[kernel]
source = { deb = "linux-source-6.12" }

[driver]
version = "595.45.04"
source = { deb = "nvidia-open-kernel-source" }

[userspace]
packages = [
  "libcudart12",
  "libnccl2",
]
`,
		"p.toml": `include = ["drivers/595.toml"]
[platform]
gpus = 4
gpu_model = "RTX 5090"
vram = "32607MiB"
bar1 = "32GiB"
`,
	})
	_, err := Load(filepath.Join(dir, "p.toml"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("got %v, want one error", err)
	}
	if e := es[0]; filepath.Base(e.File) != "595.toml" || e.Line != 17 || e.Key != "userspace.packages[1]" || !strings.Contains(e.Msg, `write "libnccl2 >= 2.25.1"`) {
		t.Errorf("got %s:%d %s: %s", e.File, e.Line, e.Key, e.Msg)
	}
	// The same platform on a 4090 takes any NCCL.
	dir2 := writeTree(t, map[string]string{"drivers/595.toml": mustReadTree(t, dir, "drivers/595.toml"),
		"p.toml": strings.Replace(mustReadTree(t, dir, "p.toml"), "RTX 5090", "RTX 4090", 1)})
	if _, err := Load(filepath.Join(dir2, "p.toml")); err != nil {
		t.Errorf("RTX 4090: %v", err)
	}
}

func mustReadTree(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
