package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

// exitCodeJSON is one entry of `peerboot exit-codes --json`.
type exitCodeJSON struct {
	Code  int    `json:"code"`
	Name  string `json:"name"`
	Means string `json:"means"`
}

func exitCodesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "exit-codes",
		Short: "List peerboot's exit codes",
		Args:  maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				list := []exitCodeJSON{}
				for _, n := range exitcode.Names {
					list = append(list, exitCodeJSON{int(n.Class), n.Name, n.Means})
				}
				return writeJSON(cmd.OutOrStdout(), struct {
					Codes []exitCodeJSON `json:"codes"`
				}{list})
			}
			for _, n := range exitcode.Names {
				fmt.Fprintf(cmd.OutOrStdout(), "%d\t%-10s\t%s\n", n.Class, n.Name, n.Means)
			}
			return nil
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}
