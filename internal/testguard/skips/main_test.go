package main

import (
	"bytes"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// runFixture runs the real go test -json on testdata/fixture, so the command is
// checked against what test2json really writes.
func runFixture(t *testing.T, fail bool) []byte {
	t.Helper()
	cmd := exec.Command("go", "test", "-count=1", "-json", ".")
	cmd.Dir = "testdata/fixture"
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if fail {
		cmd.Env = append(cmd.Env, "FIXTURE_FAIL=1")
	}
	out, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !(ok && fail) {
		t.Fatalf("go test -json: %v\n%s", err, out)
	}
	return out
}

func TestFilter(t *testing.T) {
	for _, fail := range []bool{false, true} {
		var w bytes.Buffer
		res, err := filter(bytes.NewReader(runFixture(t, fail)), &w)
		if err != nil {
			t.Fatal(err)
		}
		want := []skip{
			{"fixture", "TestSkipsForATool", "gcc not installed"},
			{"fixture", "TestSkipsForShort", "-short: downloads from the network"},
			{"fixture", "TestSubtests/skipped", "no /dev/kvm here"},
		}
		if !reflect.DeepEqual(res.skips, want) {
			t.Errorf("fail=%v: skips\n%+v\nwant\n%+v", fail, res.skips, want)
		}
		if res.failed != fail {
			t.Errorf("fail=%v: failed %v", fail, res.failed)
		}
		out := w.String()
		if strings.Contains(out, "noise a passing test logs") || strings.Contains(out, "=== RUN") {
			t.Errorf("fail=%v: a passing test's output was shown:\n%s", fail, out)
		}
		if got := strings.Contains(out, "the wanted failure"); got != fail {
			t.Errorf("fail=%v: failing test's output shown %v:\n%s", fail, got, out)
		}
		if !strings.Contains(out, "fixture") {
			t.Errorf("fail=%v: no package result line:\n%s", fail, out)
		}
	}
}

func TestReport(t *testing.T) {
	skipped := result{skips: []skip{{"p", "TestA", "gcc not installed"}, {"p", "TestB/sub", "-short: slow"}}}
	for _, tc := range []struct {
		name        string
		res         result
		onCI, short bool
		fail        bool
		want        string
	}{
		{name: "clean", res: result{}, onCI: true},
		{name: "skips on CI", res: skipped, onCI: true, fail: true, want: "FAIL: 2 tests skipped under CI=true"},
		{name: "skips on CI with -short", res: skipped, onCI: true, short: true, want: "  p TestB/sub: -short: slow"},
		{name: "skips off CI", res: skipped, want: "  p TestA: gcc not installed\n"},
		{name: "failed test", res: result{failed: true}, fail: true},
		{name: "failed test, -short", res: result{failed: true, skips: skipped.skips}, short: true, fail: true},
	} {
		var w bytes.Buffer
		if got := report(&w, tc.res, tc.onCI, tc.short); got != tc.fail {
			t.Errorf("%s: fails %v, want %v\n%s", tc.name, got, tc.fail, w.String())
		}
		if !strings.Contains(w.String(), tc.want) {
			t.Errorf("%s: report lacks %q:\n%s", tc.name, tc.want, w.String())
		}
	}
}

// Lines that are not test2json events (a build error) go through untouched.
func TestFilterPassesOtherLines(t *testing.T) {
	var w bytes.Buffer
	if _, err := filter(strings.NewReader("# pkg\n./x.go:1:1: syntax error\n"), &w); err != nil {
		t.Fatal(err)
	}
	if w.String() != "# pkg\n./x.go:1:1: syntax error\n" {
		t.Errorf("got %q", w.String())
	}
}
