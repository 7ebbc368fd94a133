package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/peerboot/peerboot/exitcode"
)

// flagMinimums are the smallest values numeric flags accept, by command path
// and flag name: a count of 0 (`build -j 0`) would hang or do nothing, and
// cobra's parsing accepts any integer. Every duration flag is refused when
// negative besides (`store gc --older-than -5h`). TestFlagMinimumsExist keeps
// this table in step with the flags.
var flagMinimums = map[string]map[string]int64{
	"peerboot build":       {"jobs": 1},
	"peerboot fetch":       {"jobs": 1},
	"peerboot report show": {"width": 0},
	"peerboot report diff": {"min-change": 0},
	"peerboot serve":       {"burst": 1, "source-burst": 1, "keep-reports": -1, "keep-unreported": -1, "max-conns": 1, "tftp-max": 1, "tftp-per-source": 1},
	"peerboot run":         {"timeout": 1},
	"peerboot store gc":    {"older-than": 0},
	"peerboot flash":       {"block-size": 4096},
}

// checkFlagValues refuses a flag value below its minimum, or a negative
// duration, as a usage error naming the flag.
func checkFlagValues(cmd *cobra.Command) error {
	mins := flagMinimums[cmd.CommandPath()]
	var bad error
	cmd.Flags().Visit(func(f *pflag.Flag) { // only the flags given
		if bad != nil {
			return
		}
		min, hasMin := mins[f.Name]
		switch f.Value.Type() {
		case "duration":
			d, err := time.ParseDuration(f.Value.String())
			if err != nil {
				return
			}
			if d < 0 || (hasMin && int64(d) < min) {
				want := "a duration of 0 or more"
				if hasMin && min > 0 {
					want = "a positive duration"
				}
				bad = fmt.Errorf("--%s: want %s, got %s", f.Name, want, f.Value)
			}
		case "int", "int64", "float64":
			if !hasMin {
				return
			}
			v, err := strconv.ParseFloat(f.Value.String(), 64)
			if err != nil {
				return
			}
			if v < float64(min) {
				bad = fmt.Errorf("--%s: want %d or more, got %s", f.Name, min, f.Value)
			}
		}
	})
	if bad != nil {
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: %w", commandName(cmd), bad))
	}
	return nil
}
