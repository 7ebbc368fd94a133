// Package examples ships two self-test reports inside the binary, so that
// `peerboot report show example:fail` and `peerboot serve --demo` have
// something real to show before anything is built or booted: a healthy 4-GPU
// box (pass.json) and the same box with several faults at once (fail.json).
//
// Both are written by selftest/verdict's tests from the fixtures its render
// goldens use, judged by the same rules as a real report
// (`go test ./selftest/verdict -run TestExamples -update` rewrites them).
package examples

import (
	_ "embed"
	"fmt"
	"slices"
)

//go:embed pass.json
var pass []byte

//go:embed fail.json
var fail []byte

// Names lists the examples, in the order report show documents them.
var Names = []string{"pass", "fail"}

// Report returns the JSON of the example called name ("pass" or "fail").
func Report(name string) ([]byte, error) {
	switch name {
	case "pass":
		return slices.Clone(pass), nil
	case "fail":
		return slices.Clone(fail), nil
	}
	return nil, fmt.Errorf("no example report %q: want pass or fail", name)
}
