package recipe

import (
	"slices"

	"github.com/BurntSushi/toml"
)

// DefaultModules is driver.modules of the built-in defaults (defaults.toml): what the
// init loads when it cannot read the image's recipe, so that the self-test still runs.
func DefaultModules() []string {
	var r Recipe
	if _, err := toml.Decode(string(defaultsTOML), &r); err != nil || len(r.Driver.Modules) == 0 {
		// defaults.toml is compiled in and TestDefaultModules decodes it.
		return slices.Clone(KnownModules)
	}
	return r.Driver.Modules
}
