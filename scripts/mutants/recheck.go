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

// recheck runs the tests against mutant m (of package p, at the module root)
// and returns its status: KILLED, LIVED, TIMED OUT, or NOT VIABLE (does not build).
func recheck(p Package, m Mutant, goflags string, timeout time.Duration) (string, error) {
	file := filepath.Join(p.Path, m.File)
	src, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	mut, err := Mutate(src, m.Line, m.Col, m.Type)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	dir, err := os.MkdirTemp("", "mutants-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	mf := filepath.Join(dir, filepath.Base(file))
	ov := filepath.Join(dir, "overlay.json")
	b, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mf}})
	if err := os.WriteFile(mf, mut, 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-failfast", "-count=1", "-overlay", ov, "./"+filepath.Dir(file))
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "TIMED OUT", nil
	case err == nil:
		return "LIVED", nil
	case errors.As(err, &ee) && ee.ExitCode() == 1 && !strings.Contains(string(out), "[build failed]") && !strings.Contains(string(out), "[setup failed]"):
		return "KILLED", nil
	case errors.As(err, &ee):
		return "NOT VIABLE", nil
	}
	return "", err
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
