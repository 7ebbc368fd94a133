package recipe

import (
	"slices"
	"testing"
)

// The defaults load every module nvidia-open builds, in KnownModules' order: the two
// lists are one fact, and this test keeps them so.
func TestDefaultModules(t *testing.T) {
	l, err := parseLayer(defaultsFile, defaultsTOML)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.data["driver"].(map[string]any)["modules"]; !ok {
		t.Fatal("defaults.toml sets no driver.modules")
	}
	if got := DefaultModules(); !slices.Equal(got, KnownModules) {
		t.Errorf("DefaultModules() = %q, KnownModules = %q", got, KnownModules)
	}
}

// The fallbacks of the init and p2pcheck are Defaults' fields: each must be set.
func TestDefaults(t *testing.T) {
	d, err := Defaults()
	if err != nil {
		t.Fatal(err)
	}
	dl := d.Selftest.Deadlines
	for name, v := range map[string]Duration{"total": dl.Total, "precheck": dl.Precheck, "driver": dl.Driver, "cuda": dl.CUDA, "nccl": dl.NCCL} {
		if v.Std() <= 0 {
			t.Errorf("selftest.deadlines.%s = %v, want a positive default", name, v)
		}
	}
	for name, v := range map[string]Size{"copy_size": d.Selftest.CopySize, "nccl_min": d.Selftest.NCCLMin, "nccl_max": d.Selftest.NCCLMax} {
		if v <= 0 {
			t.Errorf("selftest.%s = %v, want a positive default", name, v)
		}
	}
	if !d.Selftest.Verify {
		t.Error("selftest.verify defaults to false")
	}
}
