package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

func recipeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "recipe", Short: "Inspect, check and start recipes"}
	var showJSON, showAll bool
	show := &cobra.Command{
		Use:   "show [RECIPE]",
		Short: "Print the resolved recipe (includes and defaults applied) and its digest",
		Long: `show prints the recipe as the build sees it: includes and defaults merged, keys
sorted, with its digest and the files merged (lowest first). Keys left empty are
left out (--all prints them too, as the digest's input has them). --json prints
{path, name, digest, files, recipe} with the recipe as a JSON object.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(recipeArg(args))
			if err != nil {
				return err
			}
			text := r.Canonical()
			if !showAll || showJSON {
				if text, err = prunedTOML(text); err != nil {
					return err
				}
			}
			if showJSON {
				var m map[string]any
				if _, err := toml.Decode(string(text), &m); err != nil {
					return err
				}
				return writeJSON(cmd.OutOrStdout(), struct {
					Path   string         `json:"path"`
					Name   string         `json:"name"`
					Digest string         `json:"digest"`
					Files  []string       `json:"files"`
					Recipe map[string]any `json:"recipe"`
				}{r.Path, r.Name, r.Digest, r.Files, m})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# %s\n# digest: %s\n# files: %s\n%s", r.Path, r.Digest, strings.Join(r.Files, " <- "), text)
			return nil
		},
	}
	show.Flags().BoolVar(&showAll, "all", false, "also print the keys left empty")
	addJSONFlag(show, &showJSON)
	cmd.AddCommand(show, recipeValidateCmd(), recipeInitCmd())
	cmd.AddCommand(&cobra.Command{
		Use:   "matrix [RECIPE...]",
		Short: "Print the CI build matrix: each recipe with its driver flavour, as JSON",
		Long: `matrix prints {"include": [{"recipe", "path", "driver"}, ...]} for the given recipes
(default: every recipes/*.toml, or *.toml of each $PEERBOOT_RECIPES directory; none
found is an error, exit 3, never an empty matrix), the form a GitHub Actions strategy.matrix takes
through fromJSON. A recipe's driver flavour is the name of the recipes/drivers/ file
it includes (e.g. 550.163.01-p2p), else its driver.version with "-debian" when the
driver comes from a Debian package (e.g. 535.261.03-debian). Without arguments it
fails when a recipes/drivers/*.toml flavour is built by no recipe: every flavour CI
publishes is one some platform recipe picks.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths := args
			dirs := recipeDirs()
			if len(paths) == 0 {
				for _, d := range dirs {
					found, err := filepath.Glob(filepath.Join(d, "*.toml"))
					if err != nil {
						return err
					}
					paths = append(paths, found...)
				}
				// An empty matrix would pass CI having built nothing.
				if len(paths) == 0 {
					return exitcode.Tag(exitcode.Recipe, fmt.Errorf("recipe matrix: no recipes in %s: run from the repository root, name the recipes, or set PEERBOOT_RECIPES", strings.Join(dirs, ", ")))
				}
			}
			m, err := buildMatrix(paths)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				for _, d := range dirs {
					if missing, err := unbuiltFlavours(filepath.Join(d, "drivers"), m); err != nil {
						return err
					} else if len(missing) > 0 {
						return exitcode.Tag(exitcode.Recipe, fmt.Errorf("recipe matrix: driver flavour %s is built by no %s/*.toml: add a platform recipe that includes it", strings.Join(missing, ", "), d))
					}
				}
			}
			b, err := json.Marshal(struct {
				Include []matrixEntry `json:"include"`
			}{m})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", b)
			return nil
		},
	})
	return cmd
}

type matrixEntry struct {
	Recipe string `json:"recipe"`
	Path   string `json:"path"`
	Driver string `json:"driver"`
}

// buildMatrix loads each recipe and names its driver flavour, sorted by recipe.
func buildMatrix(paths []string) ([]matrixEntry, error) {
	m := []matrixEntry{}
	for _, p := range paths {
		r, err := loadRecipe(p)
		if err != nil {
			return nil, err
		}
		m = append(m, matrixEntry{Recipe: r.Name, Path: r.Path, Driver: driverFlavour(r.Files, r.Driver.Version, r.Driver.Source.Deb != "")})
	}
	sort.Slice(m, func(i, j int) bool { return m[i].Recipe < m[j].Recipe })
	return m, nil
}

// unbuiltFlavours lists the driver files in dir no matrix entry builds.
func unbuiltFlavours(dir string, m []matrixEntry) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, f := range files {
		flavour := strings.TrimSuffix(filepath.Base(f), ".toml")
		if !slices.ContainsFunc(m, func(e matrixEntry) bool { return e.Driver == flavour }) {
			missing = append(missing, flavour)
		}
	}
	return missing, nil
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

// prunedTOML re-encodes a canonical recipe without its empty values ("" and [];
// 0 is kept: a count of zero GPUs means something), so show prints what is set.
func prunedTOML(canonical []byte) ([]byte, error) {
	var m map[string]any
	if _, err := toml.Decode(string(canonical), &m); err != nil {
		return nil, fmt.Errorf("re-reading the resolved recipe: %w", err)
	}
	prune(m)
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// prune drops empty strings, empty lists and tables left empty by that.
func prune(m map[string]any) {
	for k, v := range m {
		switch x := v.(type) {
		case string:
			if x == "" {
				delete(m, k)
			}
		case []any:
			if len(x) == 0 {
				delete(m, k)
			}
		case []map[string]any:
			if len(x) == 0 {
				delete(m, k)
			}
			for _, e := range x {
				prune(e)
			}
		case map[string]any:
			prune(x)
			if len(x) == 0 {
				delete(m, k)
			}
		}
	}
}
