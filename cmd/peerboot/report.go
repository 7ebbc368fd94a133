package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/examples"
)

// errReportsDiffer is what `report diff` returns when the verdict changed or a fail
// finding was added; it exits 1, the way diff(1) does for "different".
var errReportsDiffer = errors.New("reports differ")

func reportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Show or compare self-test reports",
		Long: `report reads the self-test reports that peerboot run --report, p2pcheck --out and the
image's report partition write, or a console log holding a PEERBOOT-REPORT line (the
last one wins).`,
	}
	cmd.AddCommand(reportShowCmd(), reportDiffCmd(), reportListCmd())
	return cmd
}

func reportShowCmd() *cobra.Command {
	var asJSON bool
	var width int
	cmd := &cobra.Command{
		Use:   "show FILE",
		Short: "Print a self-test report in full",
		Long: `show prints a report: the verdict, every layer's version, the GPUs, the pair topology,
one bandwidth matrix per copy method and direction ("!" marks a cell with a fail
finding), the NCCL sizes and transports, the findings with their hints, and the phase
durations. FILE is a report JSON or a console log with a PEERBOOT-REPORT line.

The view fits the console: --width columns, else $COLUMNS, else the terminal's width,
else 80. GPUs are named by model ("RTX 4090 48GB"). A report that p2pcheck could not
have written (a verdict other than pass or fail, a GPU index outside the report, a
mismatch past the end of its copy) is refused, as serve refuses it.

FILE example:fail (or example:pass) is a report shipped inside peerboot: a 4-GPU box
with several faults at once, each finding with its hint (or the same box healthy).

--json prints the decoded report as JSON instead. Exit 0 for a pass verdict, 9 for a
fail (as run, reports and p2pcheck); 2 when FILE holds no valid report.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("report show: want a report file, got %d argument(s) (example:fail shows a shipped one)", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := readReport(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				b, err := selftest.Encode(r)
				if err != nil {
					return err
				}
				if _, err := out.Write(b); err != nil {
					return err
				}
			} else if _, err := fmt.Fprint(out, selftest.RenderWidth(r, consoleWidth(out, width, os.Getenv))); err != nil {
				return err
			}
			if r.Verdict != selftest.Pass {
				return exitcode.Tag(exitcode.Selftest, fmt.Errorf("%s: self-test verdict: %s", args[0], r.Verdict))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report JSON")
	cmd.Flags().IntVar(&width, "width", 0, "lay the report out for this many columns (default: $COLUMNS, the terminal's width, else 80)")
	return cmd
}

func reportDiffCmd() *cobra.Command {
	var asJSON bool
	var minPercent float64
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two self-test reports",
		Long: `diff compares report A (before) with report B (after): the verdict, the versions of the
recipe, kernel, driver, CUDA, NCCL and modules, the findings added and removed (matched
by status, ID and subject), every copy's bandwidth (source, destination, method,
direction) with the change in percent, and NCCL's bus bandwidth per size. Copies that
moved by less than --min-change percent are counted, not listed. --json prints the
whole comparison, every copy included.

Exit 0 when the verdicts are equal and B adds no fail finding; 1 when the verdict
changed (either way) or a fail finding was added; 2 when a file holds no report.
A or B may be a shipped example: ` + "`peerboot report diff example:pass example:fail`" + `.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := readReport(args[0])
			if err != nil {
				return err
			}
			b, err := readReport(args[1])
			if err != nil {
				return err
			}
			d := selftest.Diff(a, b)
			out := cmd.OutOrStdout()
			if asJSON {
				js, err := json.MarshalIndent(d, "", "  ")
				if err != nil {
					return fmt.Errorf("encoding the comparison: %w", err)
				}
				if _, err := out.Write(append(js, '\n')); err != nil {
					return err
				}
			} else if _, err := fmt.Fprint(out, selftest.RenderDiff(d, minPercent)); err != nil {
				return err
			}
			if d.Clean {
				return nil
			}
			why := "a fail finding was added"
			if d.Verdict.A != d.Verdict.B {
				why = fmt.Sprintf("verdict %s -> %s", d.Verdict.A, d.Verdict.B)
			}
			return exitcode.Tag(exitcode.Internal, fmt.Errorf("%w: %s", errReportsDiffer, why))
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	cmd.Flags().Float64Var(&minPercent, "min-change", 5, "list copies whose bandwidth changed by at least this many percent")
	return cmd
}

// consoleWidth is the width to lay a report out for: the flag, else $COLUMNS, else
// the terminal's width when out is one, else selftest.DefaultWidth.
func consoleWidth(out io.Writer, flag int, getenv func(string) string) int {
	if flag > 0 {
		return flag
	}
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("COLUMNS"))); err == nil && n > 0 {
		return n
	}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
			return w
		}
	}
	return selftest.DefaultWidth
}

// examplePrefix names a report shipped in the binary: example:pass, example:fail.
const examplePrefix = "example:"

// readReport loads a report from a JSON file or from a console log that carries a
// PEERBOOT-REPORT line, or a shipped example. Problems are usage errors (exit 2):
// the file is the argument.
func readReport(path string) (*selftest.Report, error) {
	var b []byte
	var err error
	if name, ok := strings.CutPrefix(path, examplePrefix); ok {
		b, err = examples.Report(name)
		if err != nil {
			return nil, exitcode.Tag(exitcode.Usage, err)
		}
	} else if path == "-" { // standard input, as a pipe from p2pcheck --json or curl
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("reading the report: %w", err))
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		r, err := selftest.Decode(b)
		var pe *selftest.PosError
		switch {
		case errors.As(err, &pe):
			// path:line:col:, the form editors jump to.
			return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s:%d:%d: %w", path, pe.Line, pe.Col, pe.Err))
		case err != nil:
			return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: %w", path, err))
		}
		return r, nil
	}
	r, err := selftest.FindLine(b)
	if errors.Is(err, selftest.ErrNoMarker) {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: neither a report JSON nor a console log with a %s line", path, selftest.Marker))
	}
	if err != nil {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: %w", path, err))
	}
	return r, nil
}
