package testguard

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// recorder stands in for a *testing.T so the test sees which of Fatal and Skip a
// guard called (the embedded TB is never reached for those two).
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()           {}
func (r *recorder) Fatal(args ...any) { r.fatal = args[0].(string) }
func (r *recorder) Skip(args ...any)  { r.skip = args[0].(string) }

func TestSkip(t *testing.T) {
	for _, tc := range []struct {
		ci        string
		set       bool
		wantFatal bool
	}{
		{set: false},
		{ci: "true", set: true, wantFatal: true},
		{ci: "1", set: true, wantFatal: true},
		{ci: "TRUE", set: true, wantFatal: true},
		{ci: "false", set: true},
		{ci: "", set: true},
		{ci: "yes-please", set: true}, // not a bool: not CI
	} {
		t.Run("CI="+tc.ci, func(t *testing.T) {
			if tc.set {
				t.Setenv("CI", tc.ci)
			} else {
				t.Setenv("CI", "")
				os.Unsetenv("CI") // t.Setenv restores it afterwards
			}
			r := &recorder{TB: t}
			Skipf(r, "no %s on PATH", "gcc")
			if tc.wantFatal {
				if r.fatal != Prefix+"no gcc on PATH" || r.skip != "" {
					t.Fatalf("under CI: fatal %q skip %q, want fatal %q", r.fatal, r.skip, Prefix+"no gcc on PATH")
				}
				return
			}
			if r.skip != "no gcc on PATH" || r.fatal != "" {
				t.Fatalf("off CI: fatal %q skip %q, want skip %q", r.fatal, r.skip, "no gcc on PATH")
			}
		})
	}
}

func TestShort(t *testing.T) {
	t.Setenv("CI", "true") // -short skips are allowed on CI too
	for _, short := range []bool{false, true} {
		setShort(t, short)
		r := &recorder{TB: t}
		Short(r, "fetches from the network")
		if r.fatal != "" {
			t.Errorf("short=%v: Short failed the test: %q", short, r.fatal)
		}
		if got := r.skip != ""; got != short {
			t.Errorf("short=%v: skipped=%v (%q)", short, got, r.skip)
		}
		if short && !strings.Contains(r.skip, "fetches from the network") {
			t.Errorf("skip reason %q lacks the caller's reason", r.skip)
		}
	}
}

func setShort(t *testing.T, v bool) {
	t.Helper()
	old := flag.Lookup("test.short").Value.String()
	if err := flag.Set("test.short", map[bool]string{true: "true", false: "false"}[v]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("test.short", old) })
}
