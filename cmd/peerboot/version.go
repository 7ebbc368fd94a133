package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"
)

// versionJSON is `peerboot version --json`.
type versionJSON struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print peerboot's version",
		Args:  maxArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return printVersion(cmd.OutOrStdout(), asJSON)
		},
	}
	addJSONFlag(cmd, &asJSON)
	return cmd
}

func printVersion(w io.Writer, asJSON bool) error {
	v := versionJSON{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if asJSON {
		return writeJSON(w, v)
	}
	_, err := fmt.Fprintf(w, "peerboot %s (%s, %s/%s)\n", v.Version, v.Go, v.OS, v.Arch)
	return err
}
