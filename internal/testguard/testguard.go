// Package testguard is how a peerboot test skips: a guard that CI would skip
// (a missing tool, input or build output) is a failure there, because CI (a
// fresh Debian bookworm box running `make test` as root with CI=true) is
// expected to have everything `make deps` and the test target provide. Away
// from CI the same guard skips, so a laptop without QEMU still runs the rest.
//
// Only -short skips are allowed everywhere: `make test` never passes -short.
package testguard

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// Prefix starts every message of a guard that fails under CI, so a log search
// finds them all.
const Prefix = "a guard CI would skip: "

// OnCI reports whether the tests run under CI: the CI environment variable is
// set to a true value ("true", "1", as CI services and `make test` set it).
func OnCI() bool {
	v, ok := os.LookupEnv("CI")
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// Skip skips tb with reason, or fails it under CI (see OnCI). Call it where
// the test would have called tb.Skip.
func Skip(tb testing.TB, reason string) {
	tb.Helper()
	if OnCI() {
		tb.Fatal(Prefix + reason)
		return
	}
	tb.Skip(reason)
}

// Skipf is Skip with a format.
func Skipf(tb testing.TB, format string, args ...any) {
	tb.Helper()
	Skip(tb, fmt.Sprintf(format, args...))
}

// Short skips tb when the tests run with -short (a network fetch, a long
// build): that skip is always allowed, since `make test` never asks for it.
func Short(tb testing.TB, reason string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("-short: " + reason)
	}
}
