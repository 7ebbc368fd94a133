package recipe

import (
	"fmt"
	"slices"

	"github.com/BurntSushi/toml"
)

// Defaults is the built-in defaults (defaults.toml, the lowest layer under every
// recipe) decoded: the one statement of every default. The init and p2pcheck fall
// back on it when they run without a recipe, so their fallbacks cannot drift from
// what a recipe gets. defaults.toml is compiled in and TestDefaults decodes it, so
// the error is a build's bug, never a user's.
func Defaults() (Recipe, error) {
	var r Recipe
	if _, err := toml.Decode(string(defaultsTOML), &r); err != nil {
		return Recipe{}, fmt.Errorf("recipe/defaults.toml: %w", err)
	}
	return r, nil
}

// DefaultModules is driver.modules of Defaults: what the init loads when it cannot
// read the image's recipe, so that the self-test still runs.
func DefaultModules() []string {
	r, err := Defaults()
	if err != nil || len(r.Driver.Modules) == 0 {
		return slices.Clone(KnownModules)
	}
	return r.Driver.Modules
}
