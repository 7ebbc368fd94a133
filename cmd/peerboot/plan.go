package main

import (
	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
)

func planCmd(g *globals) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "plan [RECIPE]",
		Short: "Show the build's stages, their inputs and action keys, and what the store has",
		Long: `plan prints each stage (kernel, driver, rootfs, initramfs, image, sign) with its
inputs, its action key (sha256 of the stage name and version, the input digests and
the recipe fields it reads) and whether the store already holds its output. Inputs the
lock file does not pin are named as unresolved. It reads no network.`,
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
			p.Print(cmd.OutOrStdout(), verbose)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also list the recipe fields in each key")
	return cmd
}
