package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/fetch"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/store"
)

func fetchCmd(g *globals) *cobra.Command {
	var parallel int
	cmd := &cobra.Command{
		Use:   "fetch [RECIPE]",
		Short: "Download every pinned input of the recipe into the store, verified by hash",
		Long: `fetch downloads the lock file's packages and the recipe's URL and git inputs into
the store, in parallel, resuming interrupted downloads. Inputs already in the store are
re-hashed; a corrupt entry is fetched again. Git inputs honour PEERBOOT_GIT_MIRRORS
("url=path,..."), verified by commit id.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, ins, un, st, err := g.recipeInputs(recipeArg(args), true)
			if err != nil {
				return err
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
			fmt.Fprintf(cmd.OutOrStdout(), "%d inputs: %d already in the store, %d downloaded (%s), %d corrupt entries replaced\n",
				len(ins), stats.Present, stats.Downloaded, progress.Bytes(stats.Bytes), stats.Replaced)
			return nil
		},
	}
	cmd.Flags().IntVarP(&parallel, "jobs", "j", 4, "parallel downloads")
	return cmd
}
