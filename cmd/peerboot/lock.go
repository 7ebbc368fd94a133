package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
)

func lockCmd(g *globals) *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "lock [RECIPE]",
		Short: "Resolve the recipe's Debian packages into pins (RECIPE.lock)",
		Long: `lock downloads each repository's InRelease, verifies its OpenPGP signature against
the recipe's keyring, checks the Packages indexes against InRelease's hashes, and pins
every package the recipe needs (sources, EFI stub, and the userspace closure) into the
lock file beside the recipe. With --check it writes nothing and fails if the lock
file differs from a fresh resolve.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(recipeArg(args))
			if err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			rs := &lock.Resolver{Client: aptClient(st), AptDir: g.aptDir,
				Log: func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) }}
			f, err := rs.Resolve(cmd.Context(), r)
			if err != nil {
				return exitcode.Tag(exitcode.Network, err)
			}
			path := lock.PathFor(r.Path)
			old, _ := os.ReadFile(path)
			if check {
				if !bytes.Equal(old, f.Encode()) {
					return exitcode.Tag(exitcode.Stale, fmt.Errorf("%s differs from a fresh resolve: run `peerboot lock %s`", path, r.Path))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s is up to date (%d packages)\n", path, len(f.Debs))
				return nil
			}
			if err := lock.Write(path, f); err != nil {
				return err
			}
			var size int64
			for _, d := range f.Debs {
				size += d.Size
			}
			state := "unchanged"
			if !bytes.Equal(old, f.Encode()) {
				state = "written"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %d packages, %.1f MiB\n", path, state, len(f.Debs), float64(size)/(1<<20))
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "fail if the lock file differs from a fresh resolve; write nothing")
	return cmd
}
