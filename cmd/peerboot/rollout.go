package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot/client"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/optoken"
	"github.com/peerboot/peerboot/rollout"
)

// rolloutStatusJSON is `peerboot rollout status --json`: the server asked and every
// rollout it keeps (or the one named), as GET /api/rollouts gives them.
type rolloutStatusJSON struct {
	Server   string                  `json:"server"`
	Rollouts []fleetdb.RolloutStatus `json:"rollouts"`
}

// The actions' --json is the event the server recorded, as the API returns it
// (rollout.Event: kind, recipe, build, from, to, node, reason, at).

type rolloutFlags struct {
	server, token, auth string
	operatorToken       string
	asJSON              bool
}

func rolloutCmd() *cobra.Command {
	f := &rolloutFlags{}
	cmd := &cobra.Command{
		Use:   "rollout status|promote|halt|resume|clear|enroll|ak-reset|burn-in-stop",
		Short: "Show and steer the rollouts of a running peerboot serve",
		Long: `rollout talks to a running ` + "`peerboot serve`" + ` (its JSON API). status reads, protected
like the fleet pages: --token is its --page-token, --auth its --auth USER:PASSWORD.
Every other command writes, and needs the server's operator token: the file serve
created 0600 at its --operator-token (default OUT/operator.token), read here from
--operator-token FILE (default $PEERBOOT_OPERATOR_TOKEN_FILE, else out/operator.token).

  status [RECIPE]            channels and their builds, pass/fail per build, halted or
                             not, the nodes held back, the latest events
  promote RECIPE [--build ID] move a build to the next channel (default: the newest
                             build in the pipeline); works while halted
  halt RECIPE [--reason ...] stop automatic promotion
  resume RECIPE              start it again
  clear NODE                 end a node's hold: it boots its channel's build again
  enroll [NODE...] --for D   let the nodes (none named: every node) record their first
                             TPM AK for D (default 1h)
  ak-reset NODE              forget a node's AK (a replaced TPM); enroll it again after
  burn-in-stop NODE [--reason ...]
                             stop a node's running burn-in: it reads the request with
                             its next progress (peerboot.soak_progress=, default 3m),
                             ends the soak after the round and sends its report

--server defaults to $PEERBOOT_SERVER, else http://127.0.0.1:8080; --token to
$PEERBOOT_PAGE_TOKEN; --auth to $PEERBOOT_SERVE_AUTH.

Exit codes: 0 done (status: no rollout halted); 9 (selftest) status found a
rollout halted; 5 (network) the server could not be reached or answered 5xx;
2 bad command line, or the server refused the request (unknown recipe or node,
a state the action does not apply to, wrong credentials).`,
		Args: unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", "", "URL of the peerboot serve (default $PEERBOOT_SERVER or http://127.0.0.1:8080)")
	pf.StringVar(&f.token, "token", "", "the server's --page-token (default $PEERBOOT_PAGE_TOKEN)")
	pf.StringVar(&f.auth, "auth", "", "USER:PASSWORD of the server's --auth (default $PEERBOOT_SERVE_AUTH)")
	pf.StringVar(&f.operatorToken, "operator-token", "", "file of the server's operator token, for writes (default $PEERBOOT_OPERATOR_TOKEN_FILE or out/operator.token)")
	pf.BoolVar(&f.asJSON, "json", false, "print the result as JSON (shape: docs/commands.md, \"Machine-readable output\")")

	var build, reason string
	promote := &cobra.Command{
		Use:   "promote RECIPE [--build ID]",
		Short: "Move a build to the next channel",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.action(cmd, func(c *client.Client) (rollout.Event, error) { return c.Promote(cmd.Context(), args[0], build) })
		},
	}
	promote.Flags().StringVar(&build, "build", "", "the build id to promote (default: the newest in the pipeline)")
	halt := &cobra.Command{
		Use:   "halt RECIPE [--reason TEXT]",
		Short: "Stop automatic promotion",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.action(cmd, func(c *client.Client) (rollout.Event, error) { return c.Halt(cmd.Context(), args[0], reason) })
		},
	}
	halt.Flags().StringVar(&reason, "reason", "", "why, shown with the rollout (default \"manual\")")
	resume := &cobra.Command{
		Use:   "resume RECIPE",
		Short: "Start automatic promotion again",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.action(cmd, func(c *client.Client) (rollout.Event, error) { return c.Resume(cmd.Context(), args[0]) })
		},
	}
	clear := &cobra.Command{
		Use:   "clear NODE",
		Short: "End a node's hold (MAC, hostname, serial or node id)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.action(cmd, func(c *client.Client) (rollout.Event, error) { return c.Clear(cmd.Context(), args[0]) })
		},
	}
	cmd.AddCommand(rolloutStatusCmd(f), promote, halt, resume, clear, rolloutEnrollCmd(f), rolloutAKResetCmd(f), rolloutSoakStopCmd(f))
	return cmd
}

// rolloutStatusCmd reads; it exits 9 when a rollout is halted.
func rolloutStatusCmd(f *rolloutFlags) *cobra.Command {
	status := &cobra.Command{
		Use:   "status [RECIPE]",
		Short: "Show the rollouts (or one recipe's)",
		Args:  maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			out := rolloutStatusJSON{Server: c.Base()}
			if len(args) == 1 {
				one, err := c.Rollout(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				out.Rollouts = []fleetdb.RolloutStatus{one}
			} else if out.Rollouts, err = c.Rollouts(cmd.Context()); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if f.asJSON {
				if err := writeJSON(w, out); err != nil {
					return err
				}
			} else {
				printRollouts(w, out)
			}
			for _, r := range out.Rollouts {
				if r.Halted {
					return exitcode.Tag(exitcode.Selftest, fmt.Errorf("the rollout of %s is halted: %s", r.Recipe, r.HaltReason))
				}
			}
			return nil
		},
	}
	return status
}

func rolloutEnrollCmd(f *rolloutFlags) *cobra.Command {
	var enrollFor time.Duration
	enroll := &cobra.Command{
		Use:   "enroll [NODE...] [--for DURATION]",
		Short: "Open an AK enrollment window for the nodes (none named: every node)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if enrollFor <= 0 {
				return exitcode.Tag(exitcode.Usage, errors.New("--for: want a duration such as 1h"))
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			out, err := c.Enroll(cmd.Context(), args, enrollFor)
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrollment open until %s for %s\n", out.Until.UTC().Format("2006-01-02 15:04:05Z"), strings.Join(out.Nodes, " "))
			return nil
		},
	}
	enroll.Flags().DurationVar(&enrollFor, "for", time.Hour, "how long the window stays open (at most 168h)")
	return enroll
}

func rolloutAKResetCmd(f *rolloutFlags) *cobra.Command {
	akReset := &cobra.Command{
		Use:   "ak-reset NODE",
		Short: "Forget a node's TPM AK (MAC or node id)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			out, err := c.AKReset(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: AK %s forgotten; its next AK needs an enrollment window (peerboot rollout enroll %s)\n", out.Node, out.AKName, out.Node)
			return nil
		},
	}
	return akReset
}

// rolloutSoakStopCmd asks a node's burn-in to stop (docs/burn-in.md, "Halting a
// burn-in"). serve cannot reach the node: this records the request, and the node acts
// on it with its next progress POST.
func rolloutSoakStopCmd(f *rolloutFlags) *cobra.Command {
	var reason string
	stop := &cobra.Command{
		Use:   "burn-in-stop NODE [--reason TEXT]",
		Short: "Stop a node's running burn-in (MAC, hostname, serial or node id)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			out, err := c.SoakStop(cmd.Context(), args[0], reason)
			if err != nil {
				return err
			}
			if f.asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			asked := "stop requested"
			if out.Already {
				asked = "stop already requested"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s: %s at %s by %s (burn-in %s, %d rounds); the node stops after its next progress and sends its report\n",
				out.Node, asked, out.StopAt.UTC().Format("2006-01-02 15:04:05Z"), out.StopBy, out.State, out.Rounds)
			return nil
		},
	}
	stop.Flags().StringVar(&reason, "reason", "", "why, shown on the fleet page and in the node's report")
	return stop
}

// client is the API client the flags (and, without them, the environment) name.
func (f *rolloutFlags) client() (*client.Client, error) {
	opt := client.Options{Server: f.server, PageToken: f.token, Auth: f.auth, OperatorTokenFile: f.operatorToken}
	for _, d := range []struct {
		v        *string
		env, def string
	}{
		{&opt.Server, "PEERBOOT_SERVER", client.DefaultServer},
		{&opt.PageToken, "PEERBOOT_PAGE_TOKEN", ""},
		{&opt.Auth, "PEERBOOT_SERVE_AUTH", ""},
		{&opt.OperatorTokenFile, envOperatorToken, optoken.Default("out")},
	} {
		if *d.v == "" {
			*d.v = os.Getenv(d.env)
		}
		if *d.v == "" {
			*d.v = d.def
		}
	}
	return client.New(opt)
}

// action runs one rollout write and prints the event the server recorded.
func (f *rolloutFlags) action(cmd *cobra.Command, do func(*client.Client) (rollout.Event, error)) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	ev, err := do(c)
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if f.asJSON {
		return writeJSON(w, ev)
	}
	fmt.Fprintln(w, eventLine(ev))
	return nil
}

func short(id string) string {
	if id == "" {
		return "-"
	}
	return id
}

func eventLine(ev rollout.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", ev.At.UTC().Format("2006-01-02 15:04:05Z"), ev.Recipe, ev.Kind)
	if ev.Build != "" {
		fmt.Fprintf(&b, " %s", ev.Build)
	}
	if ev.From != "" || ev.To != "" {
		fmt.Fprintf(&b, " %s -> %s", short(ev.From), ev.To)
	}
	if ev.Node != "" {
		fmt.Fprintf(&b, " node %s", ev.Node)
	}
	fmt.Fprintf(&b, ": %s", ev.Reason)
	return b.String()
}

func printRollouts(w io.Writer, out rolloutStatusJSON) {
	if len(out.Rollouts) == 0 {
		fmt.Fprintf(w, "%s: no recipe has a [[rollout]] in the inventory\n", out.Server)
	}
	for i, r := range out.Rollouts {
		if i > 0 {
			fmt.Fprintln(w)
		}
		state := "running"
		if r.Halted {
			state = "HALTED: " + r.HaltReason
		}
		fmt.Fprintf(w, "recipe %s: %s (promote after %d passes within %s)\n", r.Recipe, state, r.PromoteAfter, r.Window)
		for _, c := range r.Channels {
			fmt.Fprintf(w, "  channel %-10s %s\n", c.Name, short(c.Build))
		}
		fmt.Fprintln(w, "  builds, oldest first:")
		for _, b := range r.Builds {
			fmt.Fprintf(w, "    %s  pass %d  fail %d  %s\n", b.Build, b.Pass, b.Fail, strings.Join(b.Channels, ","))
		}
		if len(r.HeldBack) > 0 {
			fmt.Fprintln(w, "  held back:")
			for _, h := range r.HeldBack {
				fmt.Fprintf(w, "    %s  failed %s, served %s (clear: peerboot rollout clear %s)\n", h.Node, h.Failed, short(h.Serve), h.Node)
			}
		}
		if len(r.Events) > 0 {
			fmt.Fprintln(w, "  events, newest first:")
			for _, ev := range r.Events[:min(len(r.Events), 10)] {
				fmt.Fprintf(w, "    %s\n", eventLine(ev))
			}
		}
	}
}
