package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

func exitCodesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exit-codes",
		Short: "List peerboot's exit codes",
		Args:  exactArgs(0),
		Run: func(cmd *cobra.Command, args []string) {
			for _, n := range exitcode.Names {
				fmt.Fprintf(cmd.OutOrStdout(), "%d\t%-10s\t%s\n", n.Class, n.Name, n.Means)
			}
		},
	}
}
