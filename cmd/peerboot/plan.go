package main

import (
	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
)

func planCmd(g *globals) *cobra.Command {
	var verbose, why bool
	cmd := &cobra.Command{
		Use:   "plan [RECIPE]",
		Short: "Show the build's stages, their inputs and action keys, and what the store has",
		Long: `plan prints each stage (kernel, driver, userspace, modules, config, initramfs,
image) with its inputs, its action key (sha256 of the stage name and version, the keys
of the stages it reads, the input and data file digests, the recipe fields it sees and
the build clock) and whether the store already holds its output. -v lists the recipe
fields each key covers with their values; --why names, for every key that differs
from the recipe's last build in this store, the field, input or stage that changed
it. Inputs the lock file does not pin are named as unresolved. It reads no network.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, ins, un, st, err := g.recipeInputs(recipeArg(args), false)
			if err != nil {
				return err
			}
			p, err := build.MakePlan(r, ins, un, st, imageTools())
			if err != nil {
				return err
			}
			if why {
				return p.Why(cmd.OutOrStdout(), st)
			}
			p.Print(cmd.OutOrStdout(), verbose)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also list the recipe fields in each key, with their values")
	cmd.Flags().BoolVar(&why, "why", false, "name what changed each key since the recipe's last build")
	return cmd
}
