package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Every entry of flagMinimums names a command and a numeric flag it has, and
// the flag's default is within the minimum.
func TestFlagMinimumsExist(t *testing.T) {
	cmds := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds[c.CommandPath()] = c
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(rootCmd())
	for path, mins := range flagMinimums {
		c, ok := cmds[path]
		if !ok {
			t.Errorf("flagMinimums names %q, which is no command", path)
			continue
		}
		for name := range mins {
			f := c.Flags().Lookup(name)
			if f == nil {
				t.Errorf("flagMinimums: %s has no --%s", path, name)
				continue
			}
			if typ := f.Value.Type(); typ != "int" && typ != "duration" && typ != "float64" {
				t.Errorf("flagMinimums: %s --%s is a %s, not a number", path, name, typ)
			}
			// The default must pass the check itself.
			if err := checkFlagValues(withFlag(t, c, name, f.DefValue)); err != nil {
				t.Errorf("%s --%s: its default is refused: %v", path, name, err)
			}
		}
	}
}

// withFlag returns a fresh copy of the command at c's path with --name=value set.
func withFlag(t *testing.T, c *cobra.Command, name, value string) *cobra.Command {
	t.Helper()
	fresh, _, err := rootCmd().Find(strings.Fields(strings.TrimPrefix(c.CommandPath(), "peerboot")))
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Flags().Set(name, value); err != nil {
		t.Fatal(err)
	}
	return fresh
}
