package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runIn runs the real binary in dir with extra environment variables.
func runIn(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(peerboot, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// A recipe is found by name from the repository root or $PEERBOOT_RECIPES; a typo
// gets the nearest name; `recipe matrix` where there are no recipes fails instead
// of printing an empty matrix CI would take for success.
func TestRecipeByName(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	cache := []string{"--cache", t.TempDir()}
	recipes := "PEERBOOT_RECIPES=" + filepath.Join(root, "recipes")
	cases := []struct {
		name string
		dir  string
		env  []string
		args []string
		code int
		out  string // stdout contains
		errs string // stderr contains
	}{
		{"by name from the root", root, nil, []string{"plan", "xeon-8gpu"}, 0, "files: (defaults) <- recipes/drivers/550.163.01-p2p.toml <- recipes/shared/pcie4-4090-thresholds.toml <- recipes/xeon-8gpu.toml", ""},
		{"a typo", root, nil, []string{"plan", "xeon8gpu"}, 3, "", "peerboot: xeon8gpu: no such recipe in recipes (did you mean xeon-8gpu?)"},
		{"a typo in a path", root, nil, []string{"plan", "recipes/xeon-8gup.toml"}, 3, "", "(did you mean recipes/xeon-8gpu.toml?)"},
		{"by name elsewhere", elsewhere, nil, []string{"plan", "xeon-8gpu"}, 3, "", "no such recipe in recipes (no such directory here): run from the repository root, give the recipe's path, or set PEERBOOT_RECIPES"},
		{"by name through PEERBOOT_RECIPES", elsewhere, []string{recipes}, []string{"plan", "xeon-8gpu"}, 0, "recipe xeon-8gpu ", ""},
		{"the default through PEERBOOT_RECIPES", elsewhere, []string{recipes}, []string{"recipe", "show"}, 0, "# " + filepath.Join(root, "recipes", "default.toml"), ""},
		{"matrix elsewhere", elsewhere, nil, []string{"recipe", "matrix"}, 3, "", "recipe matrix: no recipes in recipes"},
		{"matrix through PEERBOOT_RECIPES", elsewhere, []string{recipes}, []string{"recipe", "matrix"}, 0, `"path":"` + filepath.Join(root, "recipes", "xeon-8gpu.toml"), ""},
		{"matrix by name", root, nil, []string{"recipe", "matrix", "xeon-8gpu"}, 0, `{"include":[{"recipe":"xeon-8gpu","path":"recipes/xeon-8gpu.toml","driver":"550.163.01-p2p"}]}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runIn(t, c.dir, append([]string{"PEERBOOT_RECIPES="}, c.env...), append(cache, c.args...)...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.errs) {
				t.Errorf("%v in %s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", c.args, c.dir, code, out, errs, c.code, c.out, c.errs)
			}
			if code != 0 && out != "" {
				t.Errorf("%v failed and printed to stdout:\n%s", c.args, out)
			}
		})
	}
}
