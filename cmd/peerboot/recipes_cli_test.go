package main

import (
	"bytes"
	"encoding/json"
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

// recipe init writes a platform recipe that validates and plans; validate exits 0
// for good recipes and 3 naming every problem of a bad one; show prints what is
// set (--json as an object).
func TestRecipeInitValidateShow(t *testing.T) {
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	for _, sub := range []string{"drivers", "shared"} {
		os.MkdirAll(filepath.Join(dir, "recipes", sub), 0o755)
		files, _ := filepath.Glob(filepath.Join(root, "recipes", sub, "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			os.WriteFile(filepath.Join(dir, "recipes", sub, filepath.Base(f)), b, 0o644)
		}
	}
	cache := []string{"--cache", t.TempDir()}
	os.WriteFile(filepath.Join(dir, "bad.toml"), []byte("[platform]\ngpus = \"four\"\nsokets = 1\nnuma_nodes = 0\n"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		out  string
		errs string
	}{
		{"init", []string{"recipe", "init", "--platform", "lab-8gpu", "--gpus", "8", "--cpu", "intel", "--sockets", "2", "--numa-nodes", "2"}, 0, "wrote recipes/lab-8gpu.toml\n", ""},
		{"init again", []string{"recipe", "init", "--platform", "lab-8gpu"}, 2, "", "recipes/lab-8gpu.toml exists (--force replaces it)"},
		{"init, unknown driver", []string{"recipe", "init", "--platform", "x", "--driver", "550.163.01-p2q"}, 2, "", "no driver flavour 550.163.01-p2q in recipes/drivers (did you mean 550.163.01-p2p?)"},
		{"init, no name", []string{"recipe", "init"}, 2, "", "--platform NAME is required"},
		// A flag value the recipe refuses is named by its flag, not by the line of a
		// temporary file that no longer exists.
		{"init, a decimal size", []string{"recipe", "init", "--platform", "x", "--vram", "48GB"}, 2, "", "peerboot: recipe init: --vram: want a whole number with a binary unit (B, KiB, MiB, GiB, TiB), got \"48GB\"\n"},
		{"init, a quote in the model", []string{"recipe", "init", "--platform", "x", "--gpu-model", `RTX "4090`}, 2, "", "peerboot: --gpu-model: want a model name such as \"RTX 4090\", got \"RTX \\\"4090\"\n"},
		{"init, no NUMA node", []string{"recipe", "init", "--platform", "x", "--numa-nodes", "0"}, 2, "", "peerboot: recipe init: --numa-nodes: want 1..64, got 0\n"},
		{"validate all", []string{"recipe", "validate"}, 0, "recipes/lab-8gpu.toml: ok (lab-8gpu, sha256:", ""},
		{"validate by name", []string{"recipe", "validate", "lab-8gpu"}, 0, "recipes/lab-8gpu.toml: ok", ""},
		{"plan the new recipe", []string{"plan", "lab-8gpu"}, 4, "files: (defaults) <- recipes/drivers/550.163.01-p2p.toml <- recipes/shared/pcie4-4090-thresholds.toml <- recipes/lab-8gpu.toml", "no lock file: run `peerboot lock recipes/lab-8gpu.toml`"},
		{"validate a bad one", []string{"recipe", "validate", "bad.toml", "lab-8gpu"}, 3, "recipes/lab-8gpu.toml: ok",
			"bad.toml:2: platform.gpus: wrong type: want an integer, got a string\nbad.toml:3: platform.sokets: unknown key (did you mean platform.sockets?)\nbad.toml:4: platform.numa_nodes: want 1..64, got 0\n"},
		{"show omits empty keys", []string{"recipe", "show", "lab-8gpu"}, 0, "cmdline = \"console=tty0 console=ttyS0,115200 intel_iommu=on iommu=pt panic=-1\"", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := runIn(t, dir, []string{"PEERBOOT_RECIPES="}, append(cache, c.args...)...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.errs) {
				t.Errorf("%v: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q", c.args, code, out, errs, c.code, c.out, c.errs)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "recipes", ".*")); len(left) > 0 {
		t.Errorf("init left %v behind", left)
	}
	out, _, _ := runIn(t, dir, nil, append(cache, "recipe", "show", "lab-8gpu")...)
	for _, empty := range []string{`= ""`, "= []", "[sign]", "[userspace.installer]"} {
		if strings.Contains(out, empty) {
			t.Errorf("recipe show prints an empty value (%s):\n%s", empty, out)
		}
	}
	out, errs, code := runIn(t, dir, nil, append(cache, "recipe", "show", "--json", "lab-8gpu")...)
	var j struct {
		Path, Name, Digest string
		Files              []string
		Recipe             map[string]any
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || code != 0 || j.Name != "lab-8gpu" || len(j.Files) != 4 || j.Recipe["platform"].(map[string]any)["gpus"] != 8.0 {
		t.Errorf("recipe show --json: exit %d, %v\n%s%s", code, err, out, errs)
	}
}
