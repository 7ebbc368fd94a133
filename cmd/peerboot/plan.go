package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/stagecache"
)

// planJSON is `peerboot plan --json`.
type planJSON struct {
	Recipe    recipeJSON        `json:"recipe"`
	Lock      lockStateJSON     `json:"lock"`
	Stages    []build.StageJSON `json:"stages"`
	Unfetched []inputJSON       `json:"unfetched"` // pinned inputs the store lacks: `peerboot fetch`
}

type recipeJSON struct {
	Name   string   `json:"name"`
	Path   string   `json:"path"`
	Digest string   `json:"digest"`
	Files  []string `json:"files"`
}

// lockStateJSON: State is "current", "missing", "stale" or "not-needed" (a
// recipe with no Debian packages); Message says what to run when it is not current.
type lockStateJSON struct {
	Path    string `json:"path"`
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

type inputJSON struct {
	Role   string `json:"role"`
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	URL    string `json:"url"`
}

func newRecipeJSON(r *recipe.Resolved) recipeJSON {
	return recipeJSON{Name: r.Name, Path: r.Path, Digest: r.Digest, Files: r.Files}
}

func newInputJSON(in lock.Input) inputJSON {
	return inputJSON{Role: in.Role, Name: in.Name, Kind: string(in.Kind), Digest: in.Digest(), Size: in.Size, URL: in.URL}
}

func planCmd(g *globals) *cobra.Command {
	var verbose, why, asJSON bool
	var cf cacheFlags
	cmd := &cobra.Command{
		Use:   "plan [RECIPE]",
		Short: "Show the build's stages, their inputs and action keys, and what the store has",
		Long: `plan prints each stage (kernel, driver, userspace, modules, tools, config,
initramfs, image) with its inputs, its action key (sha256 of the stage name and
version, the keys of the stages it reads, the input and data file digests, the recipe
fields it sees and the build clock) and whether the store already holds its output.
-v lists the recipe fields each key covers with their values; --why names, for every
key that differs from the recipe's last build in this store, the field, input or stage
that changed it (text only; a store without an earlier build of the recipe exits 2).
It reads no network.

A lock file that is missing or out of date with the recipe is named and plan exits 4
(stale) after printing what it can: the stages whose inputs the lock must pin are
blocked. Pinned inputs the store does not hold yet are listed ("peerboot fetch").
--json prints the plan as JSON (docs/commands.md, "Machine-readable output").

With a remote stage cache (--cache-from, $PEERBOOT_CACHE_FROM or the recipe's
cache.from) each stage the store lacks is looked up there: "remote: in the cache" is a
remote hit that build fetches (and checks) instead of building; this asks the registry
for tags only.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if why && asJSON {
				return exitcode.Tag(exitcode.Usage, errors.New("plan: --why prints text only: leave out --json"))
			}
			d, ins, un, st, err := g.recipeInputs(recipeArg(args), false)
			if err != nil {
				return err
			}
			r := d.Recipe
			_, lockErr, err := readLock(r)
			if err != nil {
				return err
			}
			p, err := build.MakePlan(d, ins, un, st)
			if err != nil {
				return err
			}
			if from, _ := cf.refs(r); from != "" && !why {
				c, err := stagecache.Open(from, stagecache.Options{})
				if err != nil {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("--cache-from: %w", err))
				}
				if err := p.AskRemote(cmd.Context(), c); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if why {
				if err := p.Why(w, st); err != nil {
					return err
				}
				return lockErr
			}
			var unfetched []lock.Input
			var unfetchedBytes int64
			for _, in := range ins {
				if in.Kind != "git" && !st.HasBlob(in.SHA256) {
					unfetched = append(unfetched, in)
					unfetchedBytes += in.Size
				}
			}
			ls := lockStateJSON{Path: lock.PathFor(r.Path), State: "current"}
			switch {
			case lockErr != nil && strings.Contains(lockErr.Error(), lock.ErrMissing.Error()):
				ls.State, ls.Message = "missing", lockErr.Error()
			case lockErr != nil:
				ls.State, ls.Message = "stale", lockErr.Error()
			case !needsLock(r):
				ls.State = "not-needed"
			}
			if asJSON {
				j := planJSON{Recipe: newRecipeJSON(r), Lock: ls, Stages: p.JSON(), Unfetched: []inputJSON{}}
				for _, in := range unfetched {
					j.Unfetched = append(j.Unfetched, newInputJSON(in))
				}
				if err := writeJSON(w, j); err != nil {
					return err
				}
				return lockErr
			}
			p.Print(w, verbose)
			if len(unfetched) > 0 {
				fmt.Fprintf(w, "\nnot in the store yet: %d pinned inputs (%s): run `peerboot fetch %s`\n", len(unfetched), progress.Bytes(unfetchedBytes), r.Path)
				for _, in := range unfetched {
					fmt.Fprintf(w, "  %-14s %s\n", in.Role, in.Name)
				}
			}
			if lockErr != nil {
				return exitcode.Tag(exitcode.Stale, fmt.Errorf("%w; %d inputs unresolved until then", lockErr, len(un)))
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also list the recipe fields in each key, with their values")
	cmd.Flags().BoolVar(&why, "why", false, "name what changed each key since the recipe's last build")
	cf.addFrom(cmd, false)
	addJSONFlag(cmd, &asJSON)
	return cmd
}
