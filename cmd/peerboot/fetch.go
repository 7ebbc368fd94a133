package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/fetch"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/store"
)

func fetchCmd(g *globals) *cobra.Command {
	var parallel int
	var only []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fetch [RECIPE]",
		Short: "Download every pinned input of the recipe into the store, verified by hash",
		Long: `fetch downloads the lock file's packages and the recipe's URL and git inputs into
the store, in parallel, resuming interrupted downloads. Inputs already in the store are
re-hashed; a corrupt entry is fetched again. Git inputs honour PEERBOOT_GIT_MIRRORS
("url=path,..."), verified by commit id. --only ROLE,... fetches the inputs of those
roles alone (kernel-source, driver-source, efi-stub, userspace, installer): ` + "`make test-trees`" + `
fetches the NVIDIA trees the driver tests read with --only driver-source.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, ins, un, st, err := g.recipeInputs(recipeArg(args), true)
			if err != nil {
				return err
			}
			r := d.Recipe
			if len(only) > 0 {
				roles := []string{lock.RoleKernelSource, lock.RoleDriverSource, lock.RoleEFIStub, lock.RoleUserspace, lock.RoleInstaller}
				for _, o := range only {
					if !slices.Contains(roles, o) {
						return exitcode.Tag(exitcode.Usage, fmt.Errorf("--only: want %s, got %q", strings.Join(roles, ", "), o))
					}
				}
				ins = slices.DeleteFunc(ins, func(in lock.Input) bool { return !slices.Contains(only, in.Role) })
				un = slices.DeleteFunc(un, func(u lock.Unresolved) bool { return !slices.Contains(only, u.Role) })
			}
			if len(un) > 0 {
				return exitcode.Tag(exitcode.Stale, fmt.Errorf("unresolved inputs: %v", un))
			}
			mirrors, err := fetch.GitMirrorsFromEnv()
			if err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			stats, err := fetch.Fetch(cmd.Context(), st, ins, fetch.Options{
				HTTP: httpClient(), Parallel: parallel, Log: cmd.ErrOrStderr(), GitMirrors: mirrors, Recipe: r.Path})
			if err != nil {
				var mm *store.MismatchError
				if errors.As(err, &mm) {
					return exitcode.Tag(exitcode.Integrity, err)
				}
				return exitcode.Tag(exitcode.Network, err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), fetchJSON{Recipe: r.Path, Inputs: len(ins), Present: stats.Present,
					Downloaded: stats.Downloaded, Bytes: stats.Bytes, Replaced: stats.Replaced})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d inputs: %d already in the store, %d downloaded (%s), %d corrupt entries replaced\n",
				len(ins), stats.Present, stats.Downloaded, progress.Bytes(stats.Bytes), stats.Replaced)
			return nil
		},
	}
	cmd.Flags().IntVarP(&parallel, "jobs", "j", 4, "parallel downloads")
	addJSONFlag(cmd, &asJSON)
	cmd.Flags().StringSliceVar(&only, "only", nil, "fetch only the inputs of these roles (kernel-source, driver-source, efi-stub, userspace, installer)")
	return cmd
}

// fetchJSON is `peerboot fetch --json`.
type fetchJSON struct {
	Recipe     string `json:"recipe"`
	Inputs     int    `json:"inputs"`     // pinned inputs (of the --only roles)
	Present    int    `json:"present"`    // already in the store, intact
	Downloaded int    `json:"downloaded"` // fetched now
	Bytes      int64  `json:"bytes"`      // transferred
	Replaced   int    `json:"replaced"`   // corrupt store entries fetched again
}
