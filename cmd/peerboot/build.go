package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/build"
	"github.com/peerboot/peerboot/progress"
)

func buildCmd(g *globals) *cobra.Command {
	var until string
	var jobs int
	var keep bool
	var outDir string
	var check []string
	var asJSON bool
	var cf cacheFlags
	cmd := &cobra.Command{
		Use:   "build [RECIPE]",
		Short: "Build the recipe's stages in order, reusing every stage output the store has",
		Long: `build runs the pipeline (kernel, driver, userspace, modules, tools, config,
initramfs, image) from the lock file's pins; it reads no network (run ` + "`peerboot fetch`" + `
first). A stage whose action key the store already holds is skipped. --stage stops
after the named stage.
--check STAGE,... builds those stages again although the store holds them and fails
(exit 6) naming the files that differ: proof that the key covers what the stage reads.

--cache-from REPO asks a registry for every stage the store lacks before building it;
a stage there must be signed by a trusted key (--cache-key, the recipe's cache.keys, or
the artifact key's own) and match every digest, else it is refused and built here
(--cache-strict: exit 6). --cache-to REPO pushes every stage the store holds after the
build, signed with the artifact key. --check on a fetched stage builds it again and
compares (docs/remote-cache.md).`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, ins, un, st, err := g.recipeInputs(recipeArg(args), true)
			if err != nil {
				return err
			}
			r := d.Recipe
			// build.Run refuses a stage it must run whose inputs the store lacks:
			// `--stage kernel` needs neither the userspace nor NVIDIA's installer.
			// No store: Run asks it only about the stages it needs.
			p, err := build.MakePlan(d, ins, un, nil)
			if err != nil {
				return err
			}
			rem, err := cf.open(r, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			start := time.Now()
			checks := map[build.StageName]bool{}
			for _, c := range check {
				checks[build.StageName(c)] = true
			}
			outs, err := build.Run(cmd.Context(), p, build.Options{Store: st, Inputs: ins, Until: build.StageName(until), Jobs: jobs, Log: cmd.ErrOrStderr(), Keep: keep, OutDir: outDir, Check: checks, Remote: rem})
			if asJSON {
				j := buildJSON{Recipe: r.Path, Digest: r.Digest, OK: err == nil, Stages: []buildStageJSON{}, Seconds: time.Since(start).Seconds()}
				if rem.From != nil || rem.To != nil {
					j.Cache = newCacheJSON(rem, outs)
				}
				for _, o := range outs {
					j.Stages = append(j.Stages, buildStageJSON{Stage: o.Stage, State: outcomeState(o), Key: o.Key, Seconds: o.Duration.Seconds(), Dir: o.Dir})
				}
				if werr := writeJSON(cmd.OutOrStdout(), j); werr != nil {
					return werr
				}
				return err
			}
			for _, o := range outs {
				fmt.Fprintf(cmd.OutOrStdout(), "%-9s %-6s %8s  %s\n", o.Stage, outcomeState(o), o.Duration.Round(100*time.Millisecond), o.Dir)
			}
			if err != nil {
				return err
			}
			if rem.From != nil || rem.To != nil {
				c := newCacheJSON(rem, outs)
				fmt.Fprintf(cmd.OutOrStdout(), "remote cache: %d fetched (%s), %d refused, %d built, %d pushed (%s)\n",
					c.RemoteHits, progress.Bytes(c.PulledBytes), len(c.Refused), c.Built, c.Pushed, progress.Bytes(c.PushedBytes))
			}
			for _, w := range ncclWarnings(r, st, p) {
				fmt.Fprintln(cmd.ErrOrStderr(), w)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "done in %s\n", time.Since(start).Round(100*time.Millisecond))
			return nil
		},
	}
	cmd.Flags().StringVar(&until, "stage", "", "stop after this stage (default: the last implemented one)")
	cmd.Flags().IntVarP(&jobs, "jobs", "j", runtime.NumCPU(), "parallel compile jobs")
	cmd.Flags().StringVarP(&outDir, "out", "o", "out", "publish the images to OUT/<recipe>/")
	cmd.Flags().StringSliceVar(&check, "check", nil, "build these stages again and compare with the store (e.g. config,initramfs,image)")
	cmd.Flags().BoolVar(&keep, "keep-scratch", false, "keep the scratch directory of each built stage")
	cf.addFrom(cmd, true)
	cf.addTo(cmd)
	addJSONFlag(cmd, &asJSON)
	return cmd
}

// buildJSON is `peerboot build --json`: the stages run (or reused), in order;
// printed on failure too, with ok false and the stages done until then.
type buildJSON struct {
	Recipe  string           `json:"recipe"`
	Digest  string           `json:"digest"`
	OK      bool             `json:"ok"`
	Stages  []buildStageJSON `json:"stages"`
	Seconds float64          `json:"seconds"`
	Cache   *cacheJSON       `json:"cache,omitempty"` // with a remote cache
}

type buildStageJSON struct {
	Stage   string  `json:"stage"` // a stage, or "publish"
	State   string  `json:"state"` // built, cached, fetched (from the remote cache), same (--check), unused
	Key     string  `json:"key"`
	Seconds float64 `json:"seconds"`
	Dir     string  `json:"dir"`
}

// outcomeState words what build did with a stage.
func outcomeState(o build.Outcome) string {
	switch {
	case o.Unneeded:
		return "unused"
	case o.Checked:
		return "same"
	case o.Pulled:
		return "fetched"
	case o.Cached:
		return "cached"
	}
	return "built"
}
