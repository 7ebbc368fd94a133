package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

func recipeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "Inspect recipes"}
	cmd.AddCommand(&cobra.Command{
		Use:   "show [RECIPE]",
		Short: "Print the resolved recipe (includes and defaults applied) and its digest",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(recipeArg(args))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# %s\n# digest: %s\n# files: %v\n%s", r.Path, r.Digest, r.Files, r.Canonical())
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "matrix [RECIPE...]",
		Short: "Print the CI build matrix: each recipe with its driver flavour, as JSON",
		Long: `matrix prints {"include": [{"recipe", "path", "driver"}, ...]} for the given recipes
(default: every recipes/*.toml), the form a GitHub Actions strategy.matrix takes
through fromJSON. A recipe's driver flavour is the name of the recipes/drivers/ file
it includes (e.g. 550.163.01-p2p), else its driver.version with "-debian" when the
driver comes from a Debian package (e.g. 535.261.03-debian).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := args
			if len(paths) == 0 {
				var err error
				if paths, err = filepath.Glob("recipes/*.toml"); err != nil {
					return err
				}
			}
			type entry struct {
				Recipe string `json:"recipe"`
				Path   string `json:"path"`
				Driver string `json:"driver"`
			}
			m := struct {
				Include []entry `json:"include"`
			}{Include: []entry{}}
			for _, p := range paths {
				r, err := loadRecipe(p)
				if err != nil {
					return err
				}
				m.Include = append(m.Include, entry{Recipe: r.Name, Path: p, Driver: driverFlavour(r.Files, r.Driver.Version, r.Driver.Source.Deb != "")})
			}
			sort.Slice(m.Include, func(i, j int) bool { return m.Include[i].Recipe < m.Include[j].Recipe })
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return nil
		},
	})
	return cmd
}

// driverFlavour names a recipe's driver: the drivers/ file it includes, else
// its version, marked "-debian" when it is Debian's packaged source.
func driverFlavour(files []string, version string, deb bool) string {
	for i := len(files) - 1; i >= 0; i-- {
		if filepath.Base(filepath.Dir(files[i])) == "drivers" {
			return strings.TrimSuffix(filepath.Base(files[i]), ".toml")
		}
	}
	if deb {
		return version + "-debian"
	}
	return version
}
