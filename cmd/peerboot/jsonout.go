package main

import (
	"encoding/json"
	"io"

	"github.com/spf13/cobra"
)

// Every --json output is one JSON document followed by a newline, indented, with
// the shape its command's xxxJSON type gives (docs/commands.md, "Machine-readable output").
// Field names are snake_case and never change meaning; new fields may be added.

func addJSONFlag(cmd *cobra.Command, v *bool) {
	cmd.Flags().BoolVar(v, "json", false, "print the result as JSON (shape: docs/commands.md, \"Machine-readable output\")")
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
