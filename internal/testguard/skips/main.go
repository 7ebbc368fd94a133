// Command skips reads `go test -json` on stdin, prints what plain `go test`
// would (the output of failing tests and each package's result line), and then
// lists every test that skipped, with its reason. It exits 1 when a test or
// package failed, and under CI=true also when any test skipped: `make test`
// runs without -short, so every skip is a guard CI would hit. Given -short (the
// tests ran with it), skips are listed and allowed.
//
// scripts/skips.sh runs it behind `go test`; `make test` goes through that.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/internal/testguard"
)

// event is one line of test2json's output (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is one skipped test and the reason it logged.
type skip struct {
	Package, Test, Reason string
}

// result is what a run of go test showed.
type result struct {
	skips  []skip
	failed bool
}

// filter copies the events of r to w as plain go test would show them and
// collects the skips and failures. Lines that are not JSON go through as they are.
func filter(r io.Reader, w io.Writer) (result, error) {
	var res result
	buf := map[string][]string{} // package + "\x00" + test -> its output so far
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		id := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			if e.Test == "" {
				if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "=== ") {
					io.WriteString(w, e.Output)
				}
				continue
			}
			buf[id] = append(buf[id], e.Output)
		case "skip":
			if e.Test != "" {
				res.skips = append(res.skips, skip{e.Package, e.Test, reason(buf[id])})
			}
			delete(buf, id)
		case "fail", "build-fail":
			res.failed = true
			for _, l := range buf[id] {
				if !strings.HasPrefix(l, "=== ") {
					io.WriteString(w, l)
				}
			}
			delete(buf, id)
		case "pass":
			delete(buf, id)
		}
	}
	sort.Slice(res.skips, func(i, j int) bool {
		a, b := res.skips[i], res.skips[j]
		return a.Package < b.Package || a.Package == b.Package && a.Test < b.Test
	})
	return res, sc.Err()
}

// reason is what a skipped test logged, without go test's own lines.
func reason(out []string) string {
	var parts []string
	for _, l := range out {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		// "file_test.go:12: why" -> "why"; the position stays in the log above.
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], "_test.go:") {
			t = t[i+2:]
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " / ")
}

// report prints the skips and says whether the run fails: on a failure, or on
// any skip under CI unless the tests ran with -short.
func report(w io.Writer, res result, onCI, short bool) bool {
	if len(res.skips) == 0 {
		return res.failed
	}
	fmt.Fprintf(w, "\n%d skipped tests:\n", len(res.skips))
	for _, s := range res.skips {
		fmt.Fprintf(w, "  %s %s: %s\n", s.Package, s.Test, s.Reason)
	}
	switch {
	case short:
		fmt.Fprintln(w, "(the tests ran with -short: skips allowed)")
	case onCI:
		fmt.Fprintf(w, "FAIL: %d tests skipped under CI=true: each is a guard CI must not hit\n", len(res.skips))
		return true
	default:
		fmt.Fprintln(w, "(each would fail the run under CI=true)")
	}
	return res.failed
}

func main() {
	short := flag.Bool("short", false, "the tests ran with -short: list skips, do not fail on them")
	flag.Parse()
	res, err := filter(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skips: reading go test -json:", err)
		os.Exit(2)
	}
	if report(os.Stdout, res, testguard.OnCI(), *short) {
		os.Exit(1)
	}
}
