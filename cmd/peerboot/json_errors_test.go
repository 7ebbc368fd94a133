package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Under --json a command that fails before printing its document prints
// {"error": {code, class, message, problems}} on standard output instead, with
// the same exit code; the text still goes to standard error. A command that
// printed its document (report show of a FAIL) prints nothing more.
func TestErrorsAsJSON(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	src := "source = { url = \"https://example.invalid/s.tar.xz\", sha256 = \"" + strings.Repeat("a", 64) + "\" }\n"
	os.WriteFile(bad, []byte("[platform]\ngpus = \"four\"\nsokets = 1\n[outputs]\nefi_stub = { url = \"https://example.invalid/stub.deb\", sha256 = \""+strings.Repeat("a", 64)+"\" }\n[kernel]\n"+src+"[driver]\nversion = \"535.261.03\"\n"+src), 0o644)
	cases := []struct {
		args     []string
		code     int
		class    string
		problems []string // "line key"
	}{
		{[]string{"plan", "--json", bad}, 3, "recipe", []string{"2 platform.gpus", "3 platform.sokets"}},
		{[]string{"plan", "--json", "nosuch"}, 3, "recipe", nil},
		{[]string{"doctor", "--json", "--for", "bogus"}, 2, "usage", nil},
		{[]string{"fetch", "--json", "-j", "0", bad}, 2, "usage", nil},
		{[]string{"store", "import", "--json", "nosuch.run"}, 2, "usage", nil},
	}
	for _, c := range cases {
		out, errs, code := runEnv(t, nil, append([]string{"--cache", dir}, c.args...)...)
		var e errorJSON
		if err := json.Unmarshal([]byte(out), &e); err != nil || code != c.code || e.Error.Code != c.code || e.Error.Class != c.class || e.Error.Message == "" || errs == "" {
			t.Errorf("%v: exit %d, %v\nstdout:\n%s\nstderr:\n%s", c.args, code, err, out, errs)
			continue
		}
		var got []string
		for _, p := range e.Error.Problems {
			if p.File != bad {
				t.Errorf("%v: problem in %s, want %s", c.args, p.File, bad)
			}
			got = append(got, strings.Join([]string{itoa(p.Line), p.Key}, " "))
		}
		if strings.Join(got, ",") != strings.Join(c.problems, ",") {
			t.Errorf("%v: problems %v, want %v", c.args, got, c.problems)
		}
	}
	out, _, code := runEnv(t, nil, "report", "show", "--json", "example:fail")
	if code != 9 || strings.HasPrefix(out, "{\n  \"error\"") || !strings.Contains(out, `"verdict": "fail"`) || !json.Valid([]byte(out)) {
		t.Errorf("report show --json of a FAIL: exit %d, want 9 and the report alone:\n%.300s", code, out)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
