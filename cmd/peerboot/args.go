package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

// The argument-count checks every command uses: each says what its name says,
// and a wrong count is a usage error (exit 2) naming the command's usage line.
// TestArgContract holds every command to its row.

// exactArgs wants exactly n arguments.
func exactArgs(n int) cobra.PositionalArgs { return rangeArgs(n, n) }

// maxArgs wants at most n arguments (an optional RECIPE is maxArgs(1)).
func maxArgs(n int) cobra.PositionalArgs { return rangeArgs(0, n) }

// minArgs wants n arguments or more.
func minArgs(n int) cobra.PositionalArgs { return rangeArgs(n, -1) }

// rangeArgs wants min to max arguments; max < 0 is no upper bound.
func rangeArgs(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= min && (max < 0 || len(args) <= max) {
			return nil
		}
		var want string
		switch {
		case min == max:
			want = fmt.Sprint(min)
		case max < 0:
			want = fmt.Sprintf("at least %d", min)
		case min == 0:
			want = fmt.Sprintf("at most %d", max)
		default:
			want = fmt.Sprintf("%d to %d", min, max)
		}
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: want %s argument(s), got %d (usage: %s)", commandName(cmd), want, len(args), cmd.UseLine()))
	}
}
