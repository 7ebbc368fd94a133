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
	os.WriteFile(path, []byte(body+"[selftest.thresholds.PIX]\nmin_unidir_gbps = 20.5\n[driver.params.nvidia]\nNVreg_EnableResizableBar = \"1\"\n"), 0o644)
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
		"driver.params":            `{ nvidia = { NVreg_EnableResizableBar = "1" } }`,
		"selftest.deadlines":       `{ total = "5m0s", precheck = "20s", driver = "1m0s", cuda = "2m0s", nccl = "2m0s" }`,
		"outputs.formats":          `["uki", "disk", "pxe"]`,
	}
	for field, want := range cases {
		got, err := FieldTOML(r, field)
		if err != nil || got != want {
			t.Errorf("FieldTOML(%s) = %s, %v; want %s", field, got, err, want)
		}
	}
}
