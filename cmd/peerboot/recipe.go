package main

import (
	"fmt"

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
	return cmd
}
