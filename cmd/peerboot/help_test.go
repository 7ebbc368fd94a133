package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every command's --help, as a user sees it, is pinned by a golden file in
// testdata/help/ (go test ./cmd/peerboot/ -run TestHelpGolden -update rewrites
// them after checking): a help text changed by accident, a flag renamed or a
// usage line rendered oddly (root --help once printed "--version peerboot
// version") shows up in review.
func TestHelpGolden(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		paths = append(paths, path)
		for _, s := range c.Commands() {
			walk(s, append(path[:len(path):len(path)], s.Name()))
		}
	}
	walk(rootCmd(), nil)
	if len(paths) < 30 {
		t.Fatalf("only %d commands: the walk is broken", len(paths))
	}
	want := map[string]bool{}
	for _, p := range paths {
		name := strings.Join(append([]string{"peerboot"}, p...), "_")
		want[name+".golden"] = true
		t.Run(name, func(t *testing.T) {
			root := rootCmd()
			machineIndependent(root) // -j's default is the CPU count
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(append([]string{}, p...), "--help"))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			cmd, _, _ := root.Find(p)
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if strings.Contains(f.Usage, "`") {
					t.Errorf("--%s: its usage %q has a backquote, which the help takes for the value's name", f.Name, f.Usage)
				}
			})
			golden := filepath.Join("testdata", "help", name+".golden")
			if *update {
				os.MkdirAll(filepath.Dir(golden), 0o755)
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/peerboot/ -run TestHelpGolden -update)", err)
			}
			if string(b) != got {
				t.Errorf("peerboot %s --help differs from %s (go test ./cmd/peerboot/ -run TestHelpGolden -update after checking):\n--- got\n%s--- want\n%s", strings.Join(p, " "), golden, got, b)
			}
		})
	}
	// No golden for a command that is gone.
	entries, _ := os.ReadDir(filepath.Join("testdata", "help"))
	for _, e := range entries {
		if !want[e.Name()] {
			if *update {
				os.Remove(filepath.Join("testdata", "help", e.Name()))
				continue
			}
			t.Errorf("testdata/help/%s: no such command any more", e.Name())
		}
	}
}
