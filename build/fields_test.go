package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/recipe"
)

// plan -v shows values as a recipe writes them, never Go's %v of a struct.
func TestFieldTOML(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.toml")
	body := strings.NewReplacer("%s", strings.Repeat("a", 64)).Replace(planRecipe)
	os.WriteFile(path, []byte(body+"[selftest.thresholds.PIX]\nmin_unidir_gbps = 20.5\n[driver.params.nvidia]\nNVreg_EnableResizableBar = \"1\"\n[driver.params.nvidia-drm]\nmodeset = \"1\"\nfbdev = \"0\"\n"), 0o644)
	r, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"kernel.base":              `"tinyconfig"`,
		"selftest.copy_size":       `"256MiB"`,
		"selftest.deadlines.total": `"5m0s"`,
		"selftest.verify":          `true`,
		"platform.gpus":            `0`,
		"platform.gpu_numa":        `[]`,
		"selftest.thresholds":      `{ PIX = { min_unidir_gbps = 20.5, min_bidir_gbps = 0, max_latency_us = 0 } }`,
		"driver.params":            `{ nvidia = { NVreg_EnableResizableBar = "1" }, nvidia-drm = { fbdev = "0", modeset = "1" } }`, // maps in key order, each level
		"selftest.deadlines":       `{ total = "5m0s", precheck = "20s", driver = "1m0s", cuda = "2m0s", nccl = "2m0s" }`,
		"outputs.formats":          `["uki", "disk", "pxe"]`,
	}
	for field, want := range cases {
		got, err := FieldTOML(r, field)
		if err != nil || got != want {
			t.Errorf("FieldTOML(%s) = %s, %v; want %s", field, got, err, want)
		}
	}
	// A path the schema does not have is an error, never a value: a key no
	// table has (the last one included), or a key under a leaf.
	for field, want := range map[string]string{
		"kernel.invented": `recipe field "kernel.invented": no key invented`,
		"invented":        `recipe field "invented": no key invented`,
		"name.x":          `recipe field "name.x": x is not a table`,
	} {
		if got, err := FieldTOML(r, field); err == nil || err.Error() != want {
			t.Errorf("FieldTOML(%s) = %q, %v; want the error %q", field, got, err, want)
		}
	}
}
