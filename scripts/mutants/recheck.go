package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// gremlins decides "not covered" from go test's coverage blocks, and a
// condition in a `case` clause of a tagless switch lies in no block: every
// mutant there is reported not covered, however many tests run it. Much of
// this code checks in `switch { case err != nil: ... }` form, so recheck runs
// each not-covered mutant itself: the same token swap gremlins would make
// (its mapping, engine/mappings.go), applied through go test -overlay (no
// copy of the tree, nothing written to it), with the package's tests at -short.

// swaps are gremlins' token mutations, by mutator.
var swaps = map[string]map[string]string{
	"ARITHMETIC_BASE":       {"+": "-", "-": "+", "*": "/", "/": "*", "%": "*"},
	"CONDITIONALS_BOUNDARY": {">=": ">", ">": ">=", "<=": "<", "<": "<="},
	"CONDITIONALS_NEGATION": {"==": "!=", "!=": "==", ">=": "<", ">": "<=", "<=": ">", "<": ">="},
	"INCREMENT_DECREMENT":   {"++": "--", "--": "++"},
	"INVERT_LOGICAL":        {"&&": "||", "||": "&&"},
	"INVERT_NEGATIVES":      {"-": "+"},
}

// operators, longest first, so "<=" is not read as "<".
var operators = []string{"&&", "||", "==", "!=", "<=", ">=", "++", "--", "<", ">", "+", "-", "*", "/", "%"}

// Mutate applies mutator typ to the operator at line:col (1-based, bytes) of src.
func Mutate(src []byte, line, col int, typ string) ([]byte, error) {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(src[off:], '\n')
		if i < 0 {
			return nil, fmt.Errorf("no line %d", line)
		}
		off += i + 1
	}
	off += col - 1
	if off < 0 || off >= len(src) {
		return nil, fmt.Errorf("no column %d on line %d", col, line)
	}
	for _, op := range operators {
		if !bytes.HasPrefix(src[off:], []byte(op)) {
			continue
		}
		to, ok := swaps[typ][op]
		if !ok {
			return nil, fmt.Errorf("%s does not apply to %q at %d:%d", typ, op, line, col)
		}
		out := append(append(append([]byte{}, src[:off]...), to...), src[off+len(op):]...)
		return out, nil
	}
	return nil, fmt.Errorf("no operator at %d:%d (%q)", line, col, src[off:min(len(src), off+8)])
}

// overlay writes mutant m of package p to a temporary directory with a go
// -overlay file that puts it in place of the original, and returns the
// overlay's path, the package's directory (relative, as go wants it) and a
// cleanup.
func overlay(p Package, m Mutant) (ov, pkgDir string, cleanup func(), err error) {
	file := filepath.Join(p.Path, m.File)
	src, err := os.ReadFile(file)
	if err != nil {
		return "", "", nil, err
	}
	mut, err := Mutate(src, m.Line, m.Col, m.Type)
	if err != nil {
		return "", "", nil, fmt.Errorf("%s: %w", file, err)
	}
	dir, err := os.MkdirTemp("", "mutants-")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	abs, err := filepath.Abs(file)
	if err != nil {
		cleanup()
		return "", "", nil, err
	}
	mf := filepath.Join(dir, filepath.Base(file))
	ov = filepath.Join(dir, "overlay.json")
	b, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mf}})
	if err := os.WriteFile(mf, mut, 0o644); err != nil {
		cleanup()
		return "", "", nil, err
	}
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		cleanup()
		return "", "", nil, err
	}
	return ov, "./" + filepath.Dir(file), cleanup, nil
}

// buildFailed says whether go test's output is that of a package that did not
// build: a compile error, or a finding of the vet checks go test runs first.
// Both exit 1, as a failing test does.
func buildFailed(out []byte) bool {
	return bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]"))
}

// recheck runs the tests against mutant m (of package p, at the module root)
// and returns its status: KILLED, LIVED, TIMED OUT, or NOT VIABLE (does not build).
func recheck(p Package, m Mutant, goflags string, timeout time.Duration) (string, error) {
	ov, pkgDir, cleanup, err := overlay(p, m)
	if err != nil {
		return "", err
	}
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-failfast", "-count=1", "-overlay", ov, pkgDir)
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	// A timed-out mutant's test binary is go test's child: killing go test
	// alone left it spinning until its own 10-minute timeout, slowing every
	// later mutant on the machine (and timing some out falsely). So go test
	// runs in a process group of its own, and the timeout kills the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "TIMED OUT", nil
	case err == nil:
		return "LIVED", nil
	case errors.As(err, &ee) && ee.ExitCode() == 1 && !buildFailed(out):
		return "KILLED", nil
	case errors.As(err, &ee):
		return "NOT VIABLE", nil
	}
	return "", err
}

// Builds says whether mutant m builds as go test builds it (the package and
// its tests compiled, go test's vet checks run; no test run), and if not,
// the first error. gremlins v0.6.0 reads go test's exit status 1 as KILLED,
// but go test exits 1 when the package does not build too: a string "+" made
// "-", or an "&&" that vet refuses (x == a && x == b), would count as a kill.
func Builds(p Package, m Mutant, goflags string) (bool, string, error) {
	ov, pkgDir, cleanup, err := overlay(p, m)
	if err != nil {
		return false, "", err
	}
	defer cleanup()
	cmd := exec.Command("go", "test", "-c", "-o", os.DevNull, "-overlay", ov, pkgDir)
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return true, "", nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false, "", err
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return false, "", fmt.Errorf("go test -c %s: %w", pkgDir, err)
	}
	return false, firstError(out), nil
}

// firstError is the first line of go's output that is not a "# package" header.
func firstError(out []byte) string {
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return strings.TrimSpace(string(out))
}

// baseTime is how long the tests of the package in dir take unmutated, for
// recheck's timeout (recheck runs that package's tests).
func baseTime(dir, goflags string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.Command("go", "test", "-count=1", "./"+dir)
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("the unmutated tests of %s fail: %w\n%s", dir, err, out)
	}
	return time.Since(start), nil
}
