package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
)

// argContract is each command's argument count, min to max (-1: no bound):
// what its usage line promises. A command missing here fails the test, so a
// new command states its contract.
var argContract = map[string][2]int{
	"version":              {0, 0},
	"exit-codes":           {0, 0},
	"doctor":               {0, 0},
	"docs":                 {0, 0},
	"lock":                 {0, 1},
	"build":                {0, 1},
	"fetch":                {0, 1},
	"plan":                 {0, 1},
	"run":                  {1, 1}, // OUTDIR, unless --efi or --pxe-dir stands for it
	"store verify":         {0, 0},
	"store gc":             {0, 0},
	"store import":         {1, -1},
	"store push":           {0, 1},
	"recipe show":          {0, 1},
	"recipe matrix":        {0, -1},
	"recipe init":          {0, 0},
	"recipe validate":      {0, -1},
	"keys init":            {1, 1},
	"sign":                 {1, 1},
	"verify":               {1, 1},
	"flash":                {2, 2},
	"reports":              {1, 1},
	"report list":          {1, 1},
	"publish":              {1, 2}, // OUTDIR --http DIR, or OUTDIR REF
	"pull":                 {2, 2},
	"report show":          {1, 1},
	"report diff":          {2, 2},
	"serve":                {0, -1},
	"rollout status":       {0, 1},
	"rollout promote":      {1, 1},
	"rollout halt":         {1, 1},
	"rollout resume":       {1, 1},
	"rollout clear":        {1, 1},
	"rollout enroll":       {0, -1},
	"rollout ak-reset":     {1, 1},
	"rollout burn-in-stop": {1, 1},
}

// TestArgContract runs every command with one argument too few and one too
// many: each is a usage error (exit 2) that names the command, before anything
// is read or started.
func TestArgContract(t *testing.T) {
	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.HasSubCommands() {
				walk(sub)
				continue
			}
			seen[commandName(sub)] = true
		}
	}
	walk(rootCmd())
	for name := range seen {
		if _, ok := argContract[name]; !ok {
			t.Errorf("command %q has no row in argContract", name)
		}
	}
	for name := range argContract {
		if !seen[name] {
			t.Errorf("argContract names %q, which is no command", name)
		}
	}
	for name, c := range argContract {
		min, max := c[0], c[1]
		var cases [][]string
		if min > 0 {
			cases = append(cases, words(min-1))
		}
		if max >= 0 {
			cases = append(cases, words(max+1))
		}
		for _, extra := range cases {
			t.Run(fmt.Sprintf("%s/%d", name, len(extra)), func(t *testing.T) {
				root := rootCmd()
				var out, errs bytes.Buffer
				root.SetOut(&out)
				root.SetErr(&errs)
				// Every argument names something absent, and --cache a store
				// no command gets far enough to open.
				root.SetArgs(append(append(strings.Fields(name), extra...), "--cache", t.TempDir()+"/store"))
				err := root.ExecuteContext(context.Background())
				if code := exitcode.Of(err); code != int(exitcode.Usage) {
					t.Fatalf("%s with %d argument(s): exit %d (%v), want %d (usage)", name, len(extra), code, err, exitcode.Usage)
				}
				re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `: want .*argument|^` + regexp.QuoteMeta(name) + `: want OUTDIR|name at least one file|want a report file`)
				if !re.MatchString(err.Error()) {
					t.Errorf("%s with %d argument(s): %q does not say what the command wants", name, len(extra), err)
				}
				if out.Len() > 0 {
					t.Errorf("%s with %d argument(s) printed %q before refusing", name, len(extra), out.String())
				}
			})
		}
	}
}

func words(n int) []string {
	var w []string
	for i := range n {
		w = append(w, fmt.Sprintf("/nonexistent/arg%d", i))
	}
	return w
}

// TestRangeArgsWording pins the wording each kind of contract gives.
func TestRangeArgsWording(t *testing.T) {
	cmd := &cobra.Command{Use: "thing A B"}
	for _, c := range []struct {
		check cobra.PositionalArgs
		n     int
		want  string // "" accepted
	}{
		{exactArgs(2), 2, ""},
		{exactArgs(2), 1, "thing: want 2 argument(s), got 1 (usage: thing A B)"},
		{exactArgs(2), 3, "thing: want 2 argument(s), got 3 (usage: thing A B)"},
		{maxArgs(1), 0, ""},
		{maxArgs(1), 2, "thing: want at most 1 argument(s), got 2 (usage: thing A B)"},
		{minArgs(1), 5, ""},
		{minArgs(1), 0, "thing: want at least 1 argument(s), got 0 (usage: thing A B)"},
		{rangeArgs(1, 2), 3, "thing: want 1 to 2 argument(s), got 3 (usage: thing A B)"},
	} {
		err := c.check(cmd, words(c.n))
		got := ""
		if err != nil {
			got = err.Error()
			if exitcode.Of(err) != int(exitcode.Usage) {
				t.Errorf("%q: exit %d, want 2", got, exitcode.Of(err))
			}
		}
		if got != c.want {
			t.Errorf("%d args: got %q, want %q", c.n, got, c.want)
		}
	}
}
