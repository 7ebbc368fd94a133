package main

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/recipe"
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

// errorJSON is what a command run with --json prints on standard output when
// it fails before printing its own document: {"error": {...}}.
type errorJSON struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code     int           `json:"code"`     // the exit code
	Class    string        `json:"class"`    // its name in ` + "`peerboot exit-codes`" + `
	Message  string        `json:"message"`  // as printed on standard error
	Problems []problemLine `json:"problems"` // a recipe's problems, one each; empty otherwise
}

// problemLine is one recipe problem: where, which key, what.
type problemLine struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Key     string `json:"key"`
	Message string `json:"message"`
}

func errorDocument(err error, code int) errorJSON {
	e := errorBody{Code: code, Message: err.Error(), Problems: []problemLine{}}
	for _, n := range exitcode.Names {
		if int(n.Class) == code {
			e.Class = n.Name
		}
	}
	if code >= 128 {
		e.Class = "interrupted"
	}
	var es recipe.Errors
	var one *recipe.Error
	switch {
	case errors.As(err, &es):
		for _, p := range es {
			e.Problems = append(e.Problems, problemLine{p.File, p.Line, p.Key, p.Msg})
		}
	case errors.As(err, &one):
		e.Problems = append(e.Problems, problemLine{one.File, one.Line, one.Key, one.Msg})
	}
	return errorJSON{e}
}

// jsonRequested says whether cmd was given --json.
func jsonRequested(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Changed && f.Value.String() == "true"
}

// countingWriter counts what a command wrote to standard output.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
