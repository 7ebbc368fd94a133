package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const sample = `{"files":[{"file_name":"rollout.go","mutations":[
 {"type":"CONDITIONALS_NEGATION","status":"KILLED","line":2,"column":5},
 {"type":"INVERT_LOGICAL","status":"LIVED","line":3,"column":9},
 {"type":"CONDITIONALS_BOUNDARY","status":"NOT COVERED","line":1,"column":3},
 {"type":"ARITHMETIC_BASE","status":"TIMED OUT","line":2,"column":7},
 {"type":"ARITHMETIC_BASE","status":"NOT VIABLE","line":2,"column":8}]}]}`

var src = []string{"\tif a < b {", "\tx := y + 1", "\tif !ok || a != b {"}

func parsed(t *testing.T) []Mutant {
	t.Helper()
	ms, err := ParseReport("rollout", strings.NewReader(sample), func(string) []string { return src })
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestTallyAndRate(t *testing.T) {
	s := Tally("rollout", parsed(t), nil)
	// Killed 1 + timed out 1 of 4 (lived and not covered are misses; not viable is no mutant).
	if s.Killed != 1 || s.TimedOut != 1 || s.Lived != 1 || s.NotCovered != 1 || s.Rate() != 50 || len(s.Survivors) != 2 {
		t.Fatalf("%+v rate %.1f", s, s.Rate())
	}
	if got := s.Survivors[0].Key(); got != "rollout/rollout.go\tCONDITIONALS_BOUNDARY\t3\tif a < b {" {
		t.Fatalf("key %q", got)
	}
	// An equivalent mutant leaves the rate and the survivors.
	eq, err := ParseEquivalent(strings.NewReader("# c\nrollout/rollout.go\tINVERT_LOGICAL\t9\tif !ok || a != b {\tsame: ok implies a is set\n"))
	if err != nil {
		t.Fatal(err)
	}
	s = Tally("rollout", parsed(t), eq)
	if s.Excluded != 1 || s.Lived != 0 || len(s.Survivors) != 1 || s.Rate() < 66.6 || s.Rate() > 66.7 {
		t.Fatalf("with equivalent: %+v rate %.1f", s, s.Rate())
	}
	if _, err := ParseEquivalent(strings.NewReader("rollout/rollout.go\tINVERT_LOGICAL\t9\tif x {\n")); err == nil {
		t.Fatal("an equivalent mutant without a reason was accepted")
	}
}

// The baseline round-trips, and Compare reports a lower rate and a new
// survivor, and nothing for the same result.
func TestBaselineCompare(t *testing.T) {
	s := Tally("rollout", parsed(t), nil)
	var buf bytes.Buffer
	FormatBaseline(&buf, []Stats{s})
	b, err := ParseBaseline(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if worse := Compare(b, []Stats{s}); len(worse) != 0 {
		t.Fatalf("the same result is worse: %v", worse)
	}
	better := s
	better.Survivors = better.Survivors[1:]
	better.Lived, better.Killed = 0, 2
	if worse := Compare(b, []Stats{better}); len(worse) != 0 {
		t.Fatalf("a better result is worse: %v", worse)
	}
	w := s
	w.Killed, w.Lived = 0, 2
	w.Survivors = append(append([]Mutant{}, s.Survivors...), Mutant{Pkg: "rollout", File: "rollout.go", Type: "CONDITIONALS_NEGATION", Status: "LIVED", Line: 2, Col: 5, Source: "x := y + 1"})
	worse := Compare(b, []Stats{w})
	if len(worse) != 2 || !strings.Contains(worse[0], "kill rate 25.0%, the baseline's is 50.0%") || !strings.Contains(worse[1], "new survivor LIVED CONDITIONALS_NEGATION at rollout/rollout.go:2:5") {
		t.Fatalf("worse: %q", worse)
	}
	if _, err := ParseBaseline(strings.NewReader("rate rollout\n")); err == nil {
		t.Fatal("a malformed rate line was accepted")
	}
}

// The committed files parse, every configured package has a rate, and each
// equivalent mutant still names a line that exists (an edit that removes it
// must remove the entry).
func TestCommittedFiles(t *testing.T) {
	t.Chdir(filepath.Join("..", "..")) // make mutants runs at the module root
	root := "."
	f, err := os.Open(filepath.Join(root, "mutants", "baseline.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := ParseBaseline(f)
	if err != nil {
		t.Fatal(err)
	}
	e, err := os.Open(filepath.Join(root, "mutants", "equivalent.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	eq, err := ParseEquivalent(e)
	if err != nil {
		t.Fatal(err)
	}
	for key := range eq {
		f := strings.Split(key, "\t")
		body, err := os.ReadFile(filepath.Join(root, f[0]))
		if err != nil {
			t.Errorf("equivalent.txt names %s: %v", f[0], err)
			continue
		}
		found := false
		for _, l := range strings.Split(string(body), "\n") {
			found = found || strings.TrimSpace(l) == f[3]
		}
		if !found {
			t.Errorf("equivalent.txt: %s has no line %q any more: remove or update the entry", f[0], f[3])
		}
	}
	for _, p := range Packages {
		if ex, err := exclusions(p); err != nil {
			t.Error(err)
		} else if len(p.Files) > 0 && len(ex) == 0 {
			t.Errorf("%s: narrowed to %v but nothing excluded", p.Unit(), p.Files)
		}
		_ = b.Rates[p.Unit()] // a package not measured yet has no rate; make mutants reports it as new
	}
}

// The weekly workflow runs one job per configured package, no more, no less.
func TestWorkflowMatrix(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".github", "workflows", "mutants.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range Packages {
		want = append(want, p.Unit())
	}
	line := "package: [" + strings.Join(want, ", ") + "]"
	if !strings.Contains(string(b), line) || !strings.Contains(string(b), "make mutants MUTANTS=${{ matrix.package }}") {
		t.Fatalf("mutants.yml must have %q and run make mutants per package", line)
	}
}

// Each file belongs to one unit: a listed subdirectory is its own unit and
// out of its parent's run, and a directory split by files is split.
func TestUnits(t *testing.T) {
	for file, want := range map[string]string{
		"sign/output.go":                    "sign",
		"sign/modsign/modsign.go":           "sign/modsign",
		"selftest/verdict/pcie.go":          "selftest/verdict",
		"selftest/render.go":                "selftest",
		"nvrun/nvruntest/build.go":          "nvrun",
		"netboot/attest.go":                 "netboot",
		"netboot/rollout_server.go":         "netboot-rollout",
		"netboot/inventory_rollout.go":      "netboot-rollout",
		"build/stage.go":                    "build",
		"build/image.go":                    "build-carry",
		"internal/clonewrite/clonewrite.go": "internal/clonewrite",
	} {
		if got := pkgOfFile(file); got != want {
			t.Errorf("%s is in unit %q, want %q", file, got, want)
		}
	}
	t.Chdir(filepath.Join("..", "..")) // exclusions checks the fixture directories exist
	units := map[string]bool{}
	for _, p := range Packages {
		if units[p.Unit()] {
			t.Errorf("two units named %s", p.Unit())
		}
		units[p.Unit()] = true
		for path, fixture := range map[string]string{"selftest/pcie": "^pcietest/", "nvrun": "^nvruntest/", "selftest": "^gpufake/", "selftest/cuda": "^internal/cudaprobe/"} {
			if p.Path == path {
				if ex, err := exclusions(p); err != nil || !slices.Contains(ex, fixture) {
					t.Errorf("%s's exclusions %q (%v) leave its fixture package %s in", path, ex, err, fixture)
				}
			}
		}
		if p.Path == "sign" {
			ex, _ := exclusions(p)
			if !slices.Equal(ex, []string{"^keyref/", "^modsign/"}) {
				t.Errorf("sign's exclusions %q leave its own units' directories in", ex)
			}
		}
	}
}

func TestMutate(t *testing.T) {
	src := []byte("package x\n\nfunc f(a, b int) bool {\n\tswitch {\n\tcase a <= b && b != 0:\n\t\treturn -a > b+1\n\t}\n\treturn false\n}\n")
	for _, c := range []struct {
		line, col int
		typ, want string
	}{
		{5, 9, "CONDITIONALS_BOUNDARY", "\tcase a < b && b != 0:"},
		{5, 9, "CONDITIONALS_NEGATION", "\tcase a > b && b != 0:"},
		{5, 14, "INVERT_LOGICAL", "\tcase a <= b || b != 0:"},
		{5, 19, "CONDITIONALS_NEGATION", "\tcase a <= b && b == 0:"},
		{6, 10, "INVERT_NEGATIVES", "\t\treturn +a > b+1"},
		{6, 16, "ARITHMETIC_BASE", "\t\treturn -a > b-1"},
	} {
		out, err := Mutate(src, c.line, c.col, c.typ)
		if err != nil {
			t.Errorf("%d:%d %s: %v", c.line, c.col, c.typ, err)
			continue
		}
		if got := strings.Split(string(out), "\n")[c.line-1]; got != c.want {
			t.Errorf("%d:%d %s: %q, want %q", c.line, c.col, c.typ, got, c.want)
		}
	}
	if _, err := Mutate(src, 5, 7, "INVERT_LOGICAL"); err == nil {
		t.Error("a mutator that does not fit the operator was applied")
	}
}

// A mutant gremlins reports KILLED that does not build (a string "+" made
// "-"; an "||" made "&&" that go test's vet refuses) is NOT VIABLE, not a
// kill; one that builds stays killed; the results are kept for -reuse.
func TestKilledMustBuild(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.24\n")
	write("m/m.go", "package m\n\nfunc Name(a, b string) string { return a + \"/\" + b }\n\nfunc Two(x int) bool { return x == 1 || x == 2 }\n\nfunc Half(n int) int {\n\treturn n / 2\n}\n\nfunc Untested(n int) int {\n\treturn n / 2\n}\n")
	write("m/m_test.go", "package m\n\nimport \"testing\"\n\nfunc TestM(t *testing.T) {\n\tif Name(\"a\", \"b\") != \"a/b\" || !Two(2) || Two(3) || Half(4) != 2 {\n\t\tt.Fatal(\"wrong\")\n\t}\n}\n")
	t.Chdir(dir)
	p := Package{Path: "m"}
	ms := []Mutant{
		{Pkg: "m", File: "m.go", Type: "ARITHMETIC_BASE", Status: "KILLED", Line: 3, Col: 42, Source: "a"},                  // a - "/": no "-" on strings
		{Pkg: "m", File: "m.go", Type: "INVERT_LOGICAL", Status: "KILLED", Line: 5, Col: 38, Source: "b"},                   // x == 1 && x == 2: vet's "suspect and"
		{Pkg: "m", File: "m.go", Type: "CONDITIONALS_NEGATION", Status: "KILLED", Line: 5, Col: 33, Source: "c"},            // x != 1 || x == 2: builds
		{Pkg: "m", File: "m.go", Type: "ARITHMETIC_BASE", Status: "NOT COVERED", Line: 8, Col: 11, Source: "return n / 2"},  // n * 2: the test kills it
		{Pkg: "m", File: "m.go", Type: "ARITHMETIC_BASE", Status: "NOT COVERED", Line: 12, Col: 11, Source: "return n / 2"}, // the same key, another line: no test runs it
	}
	out := t.TempDir()
	got, err := recheckAll(p, slices.Clone(ms), out, opts{goflags: "-short", coef: 5, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var status []string
	for _, m := range got {
		status = append(status, m.Status)
	}
	if want := []string{"NOT VIABLE", "NOT VIABLE", "KILLED", "KILLED", "LIVED"}; !slices.Equal(status, want) {
		t.Fatalf("statuses %q, want %q", status, want)
	}
	s := Tally("m", got, nil)
	if s.Killed != 2 || s.Lived != 1 || s.NotViable != 2 || !strings.Contains(s.String(), "not viable 2") {
		t.Fatalf("tally %+v", s)
	}
	b, err := os.ReadFile(filepath.Join(out, "m.builds.json"))
	if err != nil || !strings.Contains(string(b), "operator - not defined") || !strings.Contains(string(b), "suspect and") {
		t.Fatalf("builds cache %s (%v): want each build failure's error", b, err)
	}
	// -reuse reads the results: with the source gone, nothing is compiled or run again.
	if err := os.Remove(filepath.Join(dir, "m", "m.go")); err != nil {
		t.Fatal(err)
	}
	again, err := recheckAll(p, slices.Clone(ms), out, opts{goflags: "-short", coef: 5, workers: 2})
	if err != nil {
		t.Fatalf("with the results kept: %v", err)
	}
	if !slices.EqualFunc(again, got, func(a, b Mutant) bool { return a.Status == b.Status }) {
		t.Fatalf("kept results differ: %+v", again)
	}
}

// -overlay: gremlins (here a stand-in script, as -gremlins names a binary)
// only lists the mutants (--dry-run: RUNNABLE); the recheck runs each. -stop
// leaves those not started NOT RUN, out of the rate, and -reuse runs them.
func TestOverlayRunsListedMutants(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.24\n", 0o644)
	write("m/m.go", "package m\n\nfunc Half(n int) int {\n\treturn n / 2\n}\n\nfunc Untested(n int) int {\n\treturn n / 2\n}\n", 0o644)
	write("m/m_test.go", "package m\n\nimport \"testing\"\n\nfunc TestM(t *testing.T) {\n\tif Half(4) != 2 {\n\t\tt.Fatal(\"wrong\")\n\t}\n}\n", 0o644)
	// The stand-in answers only a dry run, with gremlins' report for the two.
	report := `{"files":[{"file_name":"m.go","mutations":[` +
		`{"type":"ARITHMETIC_BASE","status":"RUNNABLE","line":4,"column":11},` +
		`{"type":"ARITHMETIC_BASE","status":"RUNNABLE","line":8,"column":11}]}]}`
	write("gremlins.sh", "#!/bin/sh\nout=\ndry=\nwhile [ $# -gt 0 ]; do case $1 in -o) out=$2; shift;; --dry-run) dry=1;; esac; shift; done\n"+
		"[ -n \"$dry\" ] || { echo not a dry run >&2; exit 3; }\necho '"+report+"' > \"$out\"\n", 0o755)
	t.Chdir(dir)
	p := Package{Path: "m"}
	out := t.TempDir()
	gr := tool{bin: filepath.Join(dir, "gremlins.sh"), dryRun: true}
	ms, _, err := run(p, out, "-short", 2, 5, false, gr, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	stopped, err := recheckAll(p, slices.Clone(ms), out, opts{goflags: "-short", coef: 5, workers: 2, stop: time.Now().Add(-time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if s := Tally("m", stopped, nil); s.NotRun != 2 || s.Killed+s.Lived != 0 || !strings.Contains(s.String(), "NOT RUN 2") {
		t.Fatalf("stopped before any ran: %+v, %s", s, s)
	}
	got, err := recheckAll(p, slices.Clone(ms), out, opts{goflags: "-short", coef: 5, workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	var status []string
	for _, m := range got {
		status = append(status, m.Status)
	}
	if want := []string{"KILLED", "LIVED"}; !slices.Equal(status, want) {
		t.Fatalf("statuses %q, want %q", status, want)
	}
	if s := Tally("m", got, nil); s.Killed != 1 || s.Lived != 1 || s.NotRun != 0 || s.Rechecked != 2 {
		t.Fatalf("tally %+v", s)
	}
}

// A mutant that hangs times out, and its test binary dies with go test: the
// timeout kills go test's whole process group. Killing go test alone left the
// binary spinning until its own 10-minute timeout, slowing every later mutant.
func TestTimedOutMutantLeavesNoTestBinary(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":            "module example.com/m\n\ngo 1.24\n",
		"hang/hang.go":      "package hang\n\nfunc Count(n int) int {\n\tc := 0\n\tfor i := 0; i < n; i++ {\n\t\tc++\n\t}\n\treturn c\n}\n",
		"hang/hang_test.go": "package hang\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\nfunc TestCount(t *testing.T) {\n\tos.WriteFile(os.Getenv(\"HANG_MARK\"), []byte(\"started\"), 0o644)\n\tif Count(3) != 3 {\n\t\tt.Fatal(\"wrong\")\n\t}\n}\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mark := filepath.Join(t.TempDir(), "started")
	t.Setenv("HANG_MARK", mark)
	t.Chdir(dir)
	// i++ made i--: the loop never ends.
	m := Mutant{Pkg: "hang", File: "hang.go", Type: "INCREMENT_DECREMENT", Status: "NOT COVERED", Line: 5, Col: 22, Source: "for i := 0; i < n; i++ {"}
	status, err := recheck(Package{Path: "hang"}, m, "-short", 15*time.Second)
	if err != nil || status != "TIMED OUT" {
		t.Fatalf("the hanging mutant: %q, %v; want TIMED OUT", status, err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the test binary never started within the timeout (a loaded machine?): %v", err)
	}
	if pids := processesNamed(t, "hang.test"); len(pids) > 0 {
		t.Fatalf("the timed-out mutant's test binary still runs: pids %v", pids)
	}
}

// processesNamed lists the pids whose command line starts with a path ending in name.
func processesNamed(t *testing.T, name string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		if arg0, _, _ := strings.Cut(string(b), "\x00"); strings.HasSuffix(arg0, "/"+name) {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// A report made before a fixture was declared (-reuse of an older run) is
// tallied as the unit is now: the fixture's mutants and those of a unit of its
// own are left out, the unit's own files kept.
func TestReuseLeavesOutWhatTheUnitLeavesOut(t *testing.T) {
	t.Chdir(filepath.Join("..", ".."))
	for _, c := range []struct {
		unit       string
		keep, drop []string
	}{
		{"selftest/cuda", []string{"driver.go", "peermem.go"}, []string{"internal/cudaprobe/main.go"}},
		{"selftest", []string{"render.go", "examples/examples.go"}, []string{"gpufake/cuda.go", "verdict/verdict.go", "cuda/driver.go"}},
	} {
		var p Package
		for _, q := range Packages {
			if q.Unit() == c.unit {
				p = q
			}
		}
		ex, err := exclusions(p)
		if err != nil {
			t.Fatal(err)
		}
		var ms []Mutant
		for _, f := range append(slices.Clone(c.keep), c.drop...) {
			ms = append(ms, Mutant{Pkg: p.Path, File: f, Type: "CONDITIONALS_NEGATION", Status: "LIVED", Line: 1, Col: 1})
		}
		var got []string
		for _, m := range inUnit(ms, ex) {
			got = append(got, m.File)
		}
		if !slices.Equal(got, c.keep) {
			t.Errorf("%s: kept %q, want %q", c.unit, got, c.keep)
		}
	}
}
