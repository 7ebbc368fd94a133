package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/store"
)

func storeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "store", Short: "Inspect and fill the content-addressed store"}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify",
		Short: "Re-hash every store entry and name the corrupt ones",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openStore()
			if err != nil {
				return err
			}
			var meter *progress.Meter
			problems, err := st.Verify(cmd.Context(), func(done, total int64) {
				if meter == nil {
					meter = progress.New(cmd.ErrOrStderr(), "verify", "B", total)
				}
				meter.Set(done)
			})
			if meter != nil {
				meter.Done()
			}
			if err != nil {
				return err
			}
			for _, p := range problems {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			if len(problems) > 0 {
				return exitcode.Tag(exitcode.Integrity, fmt.Errorf("%d bad store entries in %s", len(problems), st.Root))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "store %s: all entries intact\n", st.Root)
			return nil
		},
	})
	var maxAge time.Duration
	gc := &cobra.Command{
		Use:   "gc",
		Short: "Remove scratch directories and partial downloads left by interrupted work",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := g.openStore()
			if err != nil {
				return err
			}
			stats, err := st.GC(maxAge, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d leftovers (%s) from %s\n", stats.Removed, progress.Bytes(stats.Bytes), st.Root)
			return nil
		},
	}
	gc.Flags().DurationVar(&maxAge, "older-than", 6*time.Hour, "keep leftovers younger than this (a running build's scratch, a resumable download)")
	cmd.AddCommand(gc)
	var recipePath string
	imp := &cobra.Command{
		Use:   "import FILE...",
		Short: "Add local files that match a pin of the recipe (air-gapped builds)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("store import: name at least one file"))
			}
			r, ins, _, st, err := g.recipeInputs(recipePath, true)
			if err != nil {
				return err
			}
			pins := map[string]string{}
			for _, in := range ins {
				if in.SHA256 != "" {
					pins[in.SHA256] = in.Name
				}
			}
			for _, f := range args {
				sum, err := store.HashFile(f)
				if err != nil {
					return err
				}
				name, ok := pins[sum]
				if !ok {
					return exitcode.Tag(exitcode.Integrity, fmt.Errorf("%s (sha256 %s) matches no pin of %s", f, sum, r.Path))
				}
				if err := st.Import(cmd.Context(), f, sum); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s as %s\n", filepath.Base(f), name)
			}
			return nil
		},
	}
	imp.Flags().StringVarP(&recipePath, "recipe", "r", defaultRecipe, "recipe whose pins the files must match")
	cmd.AddCommand(imp)
	return cmd
}
