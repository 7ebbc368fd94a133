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
