package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/store"
)

// The store commands' --json shapes (docs/commands.md, "Machine-readable output").
type storeVerifyJSON struct {
	Root     string             `json:"root"`
	OK       bool               `json:"ok"`
	Problems []storeProblemJSON `json:"problems"`
}

type storeProblemJSON struct {
	Path string `json:"path"`
	What string `json:"what"`
}

type storeGCJSON struct {
	Root    string `json:"root"`
	Removed int    `json:"removed"`
	Bytes   int64  `json:"bytes"`
	InUse   int    `json:"in_use"`
}

type storeImportJSON struct {
	Recipe   string              `json:"recipe"`
	Imported []storeImportedJSON `json:"imported"`
}

// storeImportedJSON is store.Imported with its JSON names.
type storeImportedJSON struct {
	File   string `json:"file"`
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

func storeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "store", Short: "Inspect and fill the content-addressed store"}
	cmd.AddCommand(storeVerifyCmd(g), storeGCCmd(g), storeImportCmd(g), storePushCmd(g))
	return cmd
}

func storeVerifyCmd(g *globals) *cobra.Command {
	var verifyJSON bool
	ver := &cobra.Command{
		Use:   "verify",
		Short: "Re-hash every store entry and name the corrupt ones",
		Args:  maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openStore()
			if err != nil {
				return err
			}
			var meter *progress.Meter
			problems, err := st.Verify(cmd.Context(), func(done, total int64) {
				if meter == nil {
					meter = progress.New(cmd.ErrOrStderr(), "verify", "B", total)
				}
				meter.Set(done)
			})
			if meter != nil {
				meter.Done()
			}
			if err != nil {
				return err
			}
			var bad error
			if len(problems) > 0 {
				bad = exitcode.Tag(exitcode.Integrity, fmt.Errorf("%d bad store entries in %s", len(problems), st.Root))
			}
			if verifyJSON {
				j := storeVerifyJSON{Root: st.Root, OK: len(problems) == 0, Problems: []storeProblemJSON{}}
				for _, p := range problems {
					j.Problems = append(j.Problems, storeProblemJSON{Path: p.Path, What: p.Msg})
				}
				if err := writeJSON(cmd.OutOrStdout(), j); err != nil {
					return err
				}
				return bad
			}
			for _, p := range problems {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			if bad != nil {
				return bad
			}
			fmt.Fprintf(cmd.OutOrStdout(), "store %s: all entries intact\n", st.Root)
			return nil
		},
	}
	addJSONFlag(ver, &verifyJSON)
	return ver
}

func storeGCCmd(g *globals) *cobra.Command {
	var gcJSON bool
	var maxAge time.Duration
	gc := &cobra.Command{
		Use:   "gc",
		Short: "Remove scratch directories and partial downloads left by interrupted work",
		Args:  maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openStore()
			if err != nil {
				return err
			}
			stats, err := st.GC(maxAge, time.Now())
			if err != nil {
				return err
			}
			if gcJSON {
				return writeJSON(cmd.OutOrStdout(), storeGCJSON{Root: st.Root, Removed: stats.Removed, Bytes: stats.Bytes, InUse: stats.InUse})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d leftovers (%s) from %s\n", stats.Removed, progress.Bytes(stats.Bytes), st.Root)
			return nil
		},
	}
	addJSONFlag(gc, &gcJSON)
	gc.Flags().DurationVar(&maxAge, "older-than", 6*time.Hour, "keep leftovers younger than this (a running build's scratch, a resumable download)")
	return gc
}

func storeImportCmd(g *globals) *cobra.Command {
	var importJSON bool
	var recipePath string
	imp := &cobra.Command{
		Use:   "import [RECIPE.toml] FILE...",
		Short: "Add local files that match a pin of the recipe (air-gapped builds)",
		Long: `import adds local files (downloaded elsewhere) to the store, each only if its sha256
matches a pin of the recipe. RECIPE comes first, as for every other command: a first
argument ending in .toml is the recipe (default recipes/default.toml; -r RECIPE works
too). --json prints what was imported as JSON.`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("recipe") && len(args) > 0 && strings.HasSuffix(args[0], ".toml") {
				recipePath, args = args[0], args[1:]
			}
			if len(args) == 0 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("store import: name at least one file"))
			}
			// Every file is checked before the first is imported: a typo is a usage
			// error, not a half-done import.
			for _, f := range args {
				if fi, err := os.Stat(f); err != nil || !fi.Mode().IsRegular() {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("store import: %s: no such file", f))
				}
			}
			d, ins, _, st, err := g.recipeInputs(recipePath, true)
			if err != nil {
				return err
			}
			pins := map[string]string{}
			for _, in := range ins {
				if in.SHA256 != "" {
					pins[in.SHA256] = in.Name
				}
			}
			done, err := st.ImportPinned(cmd.Context(), args, pins)
			if errors.Is(err, store.ErrNoPin) {
				err = exitcode.Tag(exitcode.Integrity, fmt.Errorf("%w of %s", err, d.Recipe.Path))
			}
			if importJSON {
				if err != nil {
					return err
				}
				j := storeImportJSON{Recipe: d.Recipe.Path, Imported: []storeImportedJSON{}}
				for _, im := range done {
					j.Imported = append(j.Imported, storeImportedJSON(im))
				}
				return writeJSON(cmd.OutOrStdout(), j)
			}
			for _, im := range done {
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s as %s\n", filepath.Base(im.File), im.Name)
			}
			return err
		},
	}
	addJSONFlag(imp, &importJSON)
	imp.Flags().StringVarP(&recipePath, "recipe", "r", defaultRecipe, "recipe whose pins the files must match")
	return imp
}

func storePushCmd(g *globals) *cobra.Command {
	var asJSON bool
	var cf cacheFlags
	cmd := &cobra.Command{
		Use:   "push [RECIPE]",
		Short: "Push every stage of the recipe the store holds to a remote stage cache",
		Long: `push sends each stage of the recipe's plan whose output the store holds to the
remote stage cache (--cache-to, $PEERBOOT_CACHE_TO or the recipe's cache.to), signed with
the artifact key (--artifact-key or the recipe's sign.artifact_key); a stage the cache
already has is left as it is. It builds nothing and only reads the store, so a warm store
seeds a cache for other machines (docs/remote-cache.md). A stage that cannot be pushed
is named and push exits 5.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, ins, un, st, err := g.recipeInputs(recipeArg(args), true)
			if err != nil {
				return err
			}
			r := d.Recipe
			rem, err := cf.open(r, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if rem.To == nil {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("store push: no cache to push to: --cache-to, $%s or the recipe's cache.to", envCacheTo))
			}
			p, err := build.MakePlan(d, ins, un, st)
			if err != nil {
				return err
			}
			outs, err := build.Push(cmd.Context(), p, build.Options{Store: st, Inputs: ins, Log: cmd.ErrOrStderr(), Remote: rem})
			if err != nil {
				return err
			}
			c := newCacheJSON(rem, outs)
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), c); err != nil {
					return err
				}
			} else {
				for _, o := range outs {
					state := "present"
					switch {
					case o.PushError != "":
						state = "failed"
					case o.Pushed:
						state = "pushed"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%-9s %-7s %8s  %s\n", o.Stage, state, o.Duration.Round(100*time.Millisecond), o.Key)
				}
			}
			if len(c.PushErrors) > 0 {
				return exitcode.Tag(exitcode.Network, fmt.Errorf("store push: %d stages not pushed to %s", len(c.PushErrors), c.To))
			}
			return nil
		},
	}
	cf.addTo(cmd)
	addJSONFlag(cmd, &asJSON)
	return cmd
}
