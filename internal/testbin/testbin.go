// Package testbin builds peerboot's commands for tests that run the real
// executables (exit codes, dlopen, the image's binaries), and runs them.
package testbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Build compiles each main package (a path relative to the caller's directory)
// into dir under the given binary name, as `make` does: static, trimmed paths,
// no build id. It returns dir.
func Build(dir string, pkgs map[string]string) (string, error) {
	return BuildTags(dir, "", pkgs)
}

// BuildTags is Build with build tags (go build -tags), e.g. "gpufake" for the
// p2pcheck the tests drive with --fake.
func BuildTags(dir, tags string, pkgs map[string]string) (string, error) {
	for name, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-tags="+tags, "-trimpath", "-ldflags=-buildid=", "-o", filepath.Join(dir, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
		}
	}
	return dir, nil
}

// MustBuildTemp builds into a new temporary directory for a TestMain; it panics on
// failure (there is no *testing.T yet) and returns the directory to remove.
func MustBuildTemp(pkgs map[string]string) string {
	return MustBuildTempTags("", pkgs)
}

// MustBuildTempTags is MustBuildTemp with build tags.
func MustBuildTempTags(tags string, pkgs map[string]string) string {
	dir, err := os.MkdirTemp("", "peerboot-testbin")
	if err != nil {
		panic(err)
	}
	if _, err := BuildTags(dir, tags, pkgs); err != nil {
		panic(err)
	}
	return dir
}

// Run executes bin with args in dir and returns stdout, stderr and the exit code;
// err is set only when the program could not run at all.
func Run(bin, dir string, args ...string) (string, string, int, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	return out.String(), errb.String(), 0, err
}
