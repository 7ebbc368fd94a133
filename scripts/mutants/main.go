// Command mutants is `make mutants`: mutation testing of the packages whose
// checks users rely on, with github.com/go-gremlins/gremlins at a pinned
// version (fetched by `go run` through the module proxy, never vendored). One
// package at a time, tests run with -short (the quick loop's and CI's unit
// phase), it reports each package's kill rate and its surviving mutants, and
// compares them with the committed baseline (mutants/baseline.txt): a lower
// rate or a survivor the baseline does not list fails the run. Equivalent
// mutants (no test can tell them from the original) are listed in
// mutants/equivalent.txt, each with a reason, and left out of the rate.
//
//	go run ./scripts/mutants [-update] [-reuse [-recheck-lived]] [-skip REGEXP] [-files F,F... PKG] [-workers N] [-timeout-coefficient N] [-overlay] [-stop D] [-gremlins BIN] [PKG...]
//
// -update rewrites the baseline from this run (for the packages run). See
// docs/testing.md.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Gremlins is the pinned mutation tool; `go run` fetches exactly this version.
const Gremlins = "github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0"

// Package is one unit of the run: a directory (gremlins mutates it and the
// packages under it, less those that are units of their own) and, when only
// some of its files hold the checks in question, those files.
type Package struct {
	Name  string // in MUTANTS, the baseline and the workflow; "": Path
	Path  string
	Files []string // "": every file
	// Fixtures are subdirectories of Path that hold test helpers (or a tool
	// run by hand), not checks users rely on: left out of the unit (a mutant
	// there tests the tests).
	Fixtures []string
}

// Unit is the package's name in MUTANTS, the baseline and the workflow.
func (p Package) Unit() string {
	if p.Name != "" {
		return p.Name
	}
	return p.Path
}

// Packages are the packages whose checks users rely on (issue 35). A
// subdirectory listed on its own is left out of its parent's unit, so each
// unit is one package's mutants run against that package's tests (gremlins
// runs the tests of the mutated file's package only) and can be run alone.
var Packages = []Package{
	{Path: "rollout"},
	{Path: "store"},
	// nvruntest builds .run installers for nvrun's tests.
	{Path: "nvrun", Fixtures: []string{"nvruntest"}},
	{Path: "patch"},
	{Path: "attest"},
	{Path: "sign"},
	{Path: "sign/keyref"},
	{Path: "sign/modsign"},
	// gpufake is the FAKE GPU libraries (CUDA, NVML, NCCL) the measurements' tests run on.
	{Path: "selftest", Fixtures: []string{"gpufake"}},
	{Path: "selftest/verdict"},
	// pcietest writes fake sysfs trees and config spaces for the tests.
	{Path: "selftest/pcie", Fixtures: []string{"pcietest"}},
	{Path: "selftest/kmsg"},
	// cudaprobe is a development driver run by hand on a GPU host (no tests, no
	// check a user relies on: the boot image runs p2pcheck).
	{Path: "selftest/cuda", Fixtures: []string{"internal/cudaprobe"}},
	{Path: "selftest/nccl"},
	{Path: "selftest/nvml"},
	{Path: "selftest/dl"},
	// The stage keys: which recipe fields and inputs each stage's key covers.
	{Path: "build", Files: []string{"fields.go", "stage.go"}},
	// Serve's operator auth and the report pipeline's answers (netboot), its
	// two decision stages, and where the store spends nonces and applies the
	// rollout rules (sqldb's attest.go and rollout.go).
	{Path: "netboot", Files: []string{"operator.go", "pipeline.go"}},
	{Path: "netboot/attestation"},
	{Path: "netboot/vote"},
	{Path: "netboot/fleetdb/sqldb", Files: []string{"attest.go", "rollout.go"}},
	// Serve's rollouts: a unit of its own, a run of its own.
	{Name: "netboot-rollout", Path: "netboot", Files: []string{"rollout_server.go", "inventory_rollout.go"}},
	// Where a clone of the previous output is taken as written and what
	// changed in it: the carry's bytes are only as right as these answers.
	{Path: "internal/clonewrite"},
	// The carry of initrd segments and UKI sections (image.go): what a
	// rebuild takes from the previous build unread, a unit of its own.
	{Name: "build-carry", Path: "build", Files: []string{"image.go"}},
}

// Mutant is one mutation gremlins made and what the tests did about it.
type Mutant struct {
	Pkg, File, Type, Status string
	Line, Col               int
	Source                  string // the mutated line, trimmed: the key that survives edits above it
	Rechecked               bool   // gremlins said not covered; recheck ran it
}

// Key identifies a mutant across runs: file, mutator, column and the line's
// text, not its number (an edit above it moves the number).
func (m Mutant) Key() string {
	return strings.Join([]string{m.Pkg + "/" + m.File, m.Type, strconv.Itoa(m.Col), m.Source}, "\t")
}

// cacheKey identifies a mutant within one report, for the recheck and build
// caches: Key and the line number. Key alone would give every `if err != nil {`
// at one column of a file one result, whichever of them ran first.
func (m Mutant) cacheKey() string { return m.Key() + "\t" + strconv.Itoa(m.Line) }

// Stats is one package's result.
type Stats struct {
	Pkg                                           string
	Killed, TimedOut, Lived, NotCovered, Excluded int
	NotViable                                     int      // do not build: no mutants of the code, not counted
	NotRun                                        int      // -stop came first: not counted, the rate is partial
	Rechecked                                     int      // of those counted, how many recheck ran
	Survivors                                     []Mutant // lived or not covered, not excluded
}

// Rate is the kill rate: killed (a timeout counts as killed: the mutant made
// the tests hang) over every mutant not excluded as equivalent, the ones no
// test even runs (not covered) included: those are misses too.
func (s Stats) Rate() float64 {
	n := s.Killed + s.TimedOut + s.Lived + s.NotCovered
	if n == 0 {
		return 100
	}
	return 100 * float64(s.Killed+s.TimedOut) / float64(n)
}

func (s Stats) String() string {
	str := fmt.Sprintf("%-10s %6.1f%%  killed %d  timed out %d  lived %d  not covered %d  equivalent %d  not viable %d  (rechecked %d)",
		s.Pkg, s.Rate(), s.Killed, s.TimedOut, s.Lived, s.NotCovered, s.Excluded, s.NotViable, s.Rechecked)
	if s.NotRun > 0 {
		str += fmt.Sprintf("  NOT RUN %d (stopped: a partial figure)", s.NotRun)
	}
	return str
}

// report is the JSON gremlins writes with -o.
type report struct {
	Files []struct {
		FileName  string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// ParseReport reads gremlins' JSON for pkg; src gives a file's lines (for Source).
func ParseReport(pkg string, r io.Reader, src func(file string) []string) ([]Mutant, error) {
	var rep report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return nil, fmt.Errorf("gremlins report for %s: %w", pkg, err)
	}
	var out []Mutant
	for _, f := range rep.Files {
		lines := src(f.FileName)
		for _, m := range f.Mutations {
			mu := Mutant{Pkg: pkg, File: f.FileName, Type: m.Type, Status: m.Status, Line: m.Line, Col: m.Column}
			if m.Line >= 1 && m.Line <= len(lines) {
				mu.Source = strings.TrimSpace(lines[m.Line-1])
			}
			out = append(out, mu)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		return a.Type < b.Type
	})
	return out, nil
}

// opts are how the mutants run: go test's flags, the timeout coefficient,
// how many at a time, and when to stop starting new ones.
type opts struct {
	goflags string
	coef    int
	workers int       // mutants run at once (gremlins' workers, the recheck's)
	lived   bool      // -recheck-lived
	stop    time.Time // zero: never; after it no mutant starts, the rest are NOT RUN
}

// recheckAll runs every mutant gremlins reported not covered (recheck.go),
// and every one it only listed (RUNNABLE: a -overlay run's --dry-run report),
// o.workers at a time, keeping the results in out/PKG.recheck.json so -reuse
// does not run them again, then compiles those it reported killed
// (checkBuilds).
//
// With o.lived set (-recheck-lived), the mutants that lived are run again too:
// after adding tests, that measures them without a whole gremlins run (tests
// only added can kill more mutants, never fewer; it holds while the package's
// code is the code the report was made of). So are those that timed out: on a
// loaded machine a mutant's run can pass the timeout without hanging, and a
// timeout counts as a kill; run again with the timeout measured now, a real
// hang times out again, and one that was only slow says what its tests did.
func recheckAll(p Package, ms []Mutant, out string, o opts) ([]Mutant, error) {
	cacheFile := filepath.Join(out, p.file()+".recheck.json")
	cache := map[string]string{}
	if b, err := os.ReadFile(cacheFile); err == nil {
		json.Unmarshal(b, &cache)
	}
	var todo []int
	timeouts := map[string]time.Duration{} // by the mutated file's directory
	for i, m := range ms {
		again := o.lived && (m.Status == "LIVED" || m.Status == "TIMED OUT")
		if m.Status != "NOT COVERED" && m.Status != "RUNNABLE" && !again {
			continue
		}
		st, ok := cache[m.cacheKey()]
		if o.lived && (st == "LIVED" || st == "TIMED OUT") {
			ok = false // run again: tests may have been added since (a kill stays a kill)
		}
		if ok {
			ms[i].Status, ms[i].Rechecked = st, true
			continue
		}
		todo = append(todo, i)
		dir := filepath.Dir(filepath.Join(p.Path, m.File))
		if timeouts[dir] == 0 {
			// Measured before any mutant runs: the workers' load would stretch it.
			t, err := baseTime(dir, o.goflags)
			if err != nil {
				return nil, err
			}
			timeouts[dir] = time.Duration(o.coef)*t + 10*time.Second
		}
	}
	var (
		mu       sync.Mutex // cache, its file, ms and firstErr
		firstErr error
		wg       sync.WaitGroup
		next     = make(chan int)
	)
	for range max(1, o.workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m := ms[i]
				st, err := recheck(p, m, o.goflags, timeouts[filepath.Dir(filepath.Join(p.Path, m.File))])
				mu.Lock()
				if err != nil {
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					continue
				}
				cache[m.cacheKey()] = st
				ms[i].Status, ms[i].Rechecked = st, true
				// Kept after each: a recheck stopped half way keeps what it ran.
				b, _ := json.MarshalIndent(cache, "", "  ")
				werr := os.WriteFile(cacheFile, b, 0o644)
				firstErr = cmp.Or(firstErr, werr)
				mu.Unlock()
				fmt.Fprintf(os.Stderr, "mutants: recheck %-11s %s %s/%s:%d:%d\n", st, m.Type, m.Pkg, m.File, m.Line, m.Col)
			}
		}()
	}
	for _, i := range todo {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed || (!o.stop.IsZero() && time.Now().After(o.stop)) {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	for i := range ms {
		if ms[i].Status == "RUNNABLE" || (ms[i].Status == "NOT COVERED" && !ms[i].Rechecked) {
			ms[i].Status = "NOT RUN" // -stop came first
		}
	}
	b, _ := json.MarshalIndent(cache, "", "  ")
	if err := os.WriteFile(cacheFile, b, 0o644); err != nil {
		return nil, err
	}
	return checkBuilds(p, ms, out, o.goflags)
}

// checkBuilds compiles each mutant gremlins reported KILLED (Builds) and
// makes those that do not build NOT VIABLE: gremlins counts them as kills.
// The results are kept in out/PKG.builds.json (key -> "" when it builds, else
// the first error), written after each, so -reuse compiles none twice.
func checkBuilds(p Package, ms []Mutant, out, goflags string) ([]Mutant, error) {
	cacheFile := filepath.Join(out, p.file()+".builds.json")
	cache := map[string]string{}
	if b, err := os.ReadFile(cacheFile); err == nil {
		json.Unmarshal(b, &cache)
	}
	for i, m := range ms {
		if m.Status != "KILLED" || m.Rechecked { // recheck tells a build failure from a kill itself
			continue
		}
		why, ok := cache[m.cacheKey()]
		if !ok {
			builds, msg, err := Builds(p, m, goflags)
			if err != nil {
				return nil, err
			}
			if why = msg; builds {
				why = ""
			} else if why == "" {
				why = "does not build"
			}
			cache[m.cacheKey()] = why
			b, _ := json.MarshalIndent(cache, "", "  ")
			if err := os.WriteFile(cacheFile, b, 0o644); err != nil {
				return nil, err
			}
			if why != "" {
				fmt.Fprintf(os.Stderr, "mutants: not viable %s %s/%s:%d:%d: %s\n", m.Type, m.Pkg, m.File, m.Line, m.Col, why)
			}
		}
		if why != "" {
			ms[i].Status = "NOT VIABLE"
		}
	}
	return ms, nil
}

// Tally counts a package's mutants, leaving out those equivalent lists.
func Tally(pkg string, ms []Mutant, equivalent map[string]string) Stats {
	s := Stats{Pkg: pkg}
	for _, m := range ms {
		if _, ok := equivalent[m.Key()]; ok && (m.Status == "LIVED" || m.Status == "NOT COVERED") {
			s.Excluded++
			continue
		}
		if m.Rechecked && (m.Status == "KILLED" || m.Status == "TIMED OUT" || m.Status == "LIVED") {
			s.Rechecked++
		}
		switch m.Status {
		case "KILLED":
			s.Killed++
		case "TIMED OUT":
			s.TimedOut++
		case "LIVED":
			s.Lived++
			s.Survivors = append(s.Survivors, m)
		case "NOT COVERED":
			s.NotCovered++
			s.Survivors = append(s.Survivors, m)
		case "NOT VIABLE": // does not build: no mutant of the code
			s.NotViable++
		case "NOT RUN": // -stop came first
			s.NotRun++
		} // SKIPPED: not run
	}
	return s
}

// Baseline is the committed result: each package's rate and survivors.
type Baseline struct {
	Rates     map[string]float64
	Survivors map[string]map[string]bool // pkg -> survivor keys
}

// ParseBaseline reads mutants/baseline.txt:
//
//	rate PKG PERCENT
//	survivor PKG/FILE<TAB>TYPE<TAB>COL<TAB>SOURCE
func ParseBaseline(r io.Reader) (*Baseline, error) {
	b := &Baseline{Rates: map[string]float64{}, Survivors: map[string]map[string]bool{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "rate "):
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], "%"), 64)
			if len(f) != 3 || err != nil {
				return nil, fmt.Errorf("baseline line %d: want \"rate PKG PERCENT\", got %q", n, line)
			}
			b.Rates[f[1]] = v
		case strings.HasPrefix(line, "survivor "):
			key := strings.TrimPrefix(line, "survivor ")
			pkg, _, ok := strings.Cut(key, "\t")
			if !ok || strings.Count(key, "\t") != 3 {
				return nil, fmt.Errorf("baseline line %d: want \"survivor PKG/FILE<TAB>TYPE<TAB>COL<TAB>SOURCE\", got %q", n, line)
			}
			p := pkgOfFile(pkg)
			if b.Survivors[p] == nil {
				b.Survivors[p] = map[string]bool{}
			}
			b.Survivors[p][key] = true
		default:
			return nil, fmt.Errorf("baseline line %d: unknown line %q", n, line)
		}
	}
	return b, sc.Err()
}

// pkgOfFile finds the configured unit a "PKG/FILE" path belongs to: the one
// of the longest path that holds it (a unit narrowed to files holds those).
func pkgOfFile(p string) string {
	best, unit := "", ""
	for _, pk := range Packages {
		if !strings.HasPrefix(p, pk.Path+"/") || len(pk.Path) <= len(best) {
			continue
		}
		if len(pk.Files) > 0 && (filepath.Dir(p) != pk.Path || !slices.Contains(pk.Files, filepath.Base(p))) {
			continue
		}
		best, unit = pk.Path, pk.Unit()
	}
	if unit == "" {
		return filepath.Dir(p)
	}
	return unit
}

// FormatBaseline writes the baseline for stats.
func FormatBaseline(w io.Writer, stats []Stats) {
	fmt.Fprintln(w, "# make mutants' committed result (go run ./scripts/mutants -update rewrites it):")
	fmt.Fprintln(w, "# each package's kill rate with -short, and every surviving mutant (lived or not")
	fmt.Fprintln(w, "# covered; equivalent ones are in equivalent.txt). A lower rate, or a survivor not")
	fmt.Fprintln(w, "# listed here, fails make mutants.")
	for _, s := range stats {
		fmt.Fprintf(w, "rate %s %.1f%%\n", s.Pkg, s.Rate())
	}
	for _, s := range stats {
		for _, m := range s.Survivors {
			fmt.Fprintf(w, "survivor %s\n", m.Key())
		}
	}
}

// Compare says what got worse than the baseline: a rate more than 0.05
// points lower (the baseline keeps one decimal), or a survivor it does not
// list. Packages the baseline lacks are new and only reported.
func Compare(b *Baseline, stats []Stats) []string {
	var worse []string
	for _, s := range stats {
		base, ok := b.Rates[s.Pkg]
		if !ok {
			continue
		}
		if s.Rate() < base-0.05 {
			worse = append(worse, fmt.Sprintf("%s: kill rate %.1f%%, the baseline's is %.1f%%", s.Pkg, s.Rate(), base))
		}
		for _, m := range s.Survivors {
			if !b.Survivors[s.Pkg][m.Key()] {
				worse = append(worse, fmt.Sprintf("%s: new survivor %s %s at %s/%s:%d:%d: %s", s.Pkg, m.Status, m.Type, m.Pkg, m.File, m.Line, m.Col, m.Source))
			}
		}
	}
	return worse
}

// ParseEquivalent reads mutants/equivalent.txt: one mutant a line, as a
// baseline survivor's key, then a tab and the reason no test can kill it.
func ParseEquivalent(r io.Reader) (map[string]string, error) {
	eq := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 || strings.TrimSpace(f[4]) == "" {
			return nil, fmt.Errorf("equivalent.txt line %d: want PKG/FILE<TAB>TYPE<TAB>COL<TAB>SOURCE<TAB>REASON, got %q", n, line)
		}
		eq[strings.Join(f[:4], "\t")] = f[4]
	}
	return eq, sc.Err()
}

// exclusions are gremlins -E patterns (matched against paths relative to
// p.Path) leaving out the files of p's directory that p does not name, and
// the subdirectories that are units of their own.
func exclusions(p Package) ([]string, error) {
	if len(p.Files) == 0 {
		var out []string
		for _, q := range Packages {
			if rel, ok := strings.CutPrefix(q.Path, p.Path+"/"); ok {
				out = append(out, "^"+regexp.QuoteMeta(rel)+"/")
			}
		}
		for _, f := range p.Fixtures {
			if _, err := os.Stat(filepath.Join(p.Path, f)); err != nil {
				return nil, fmt.Errorf("mutants: %s lists the fixture directory %s: %w", p.Path, f, err)
			}
			out = append(out, "^"+regexp.QuoteMeta(f)+"/")
		}
		return out, nil
	}
	all, err := filepath.Glob(filepath.Join(p.Path, "*.go"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range all {
		base := filepath.Base(f)
		if strings.HasSuffix(base, "_test.go") || slices.Contains(p.Files, base) {
			continue
		}
		out = append(out, "^"+regexp.QuoteMeta(base)+"$")
	}
	for _, f := range p.Files {
		if _, err := os.Stat(filepath.Join(p.Path, f)); err != nil {
			return nil, fmt.Errorf("mutants: %s lists %s: %w", p.Path, f, err)
		}
	}
	// Subdirectories are not part of a package narrowed to files.
	out = append(out, "/")
	return out, nil
}

// file is the unit's name in mutants.out's file names.
func (p Package) file() string { return strings.ReplaceAll(p.Unit(), "/", "_") }

// tool says how gremlins runs: bin, a gremlins v0.6.0 binary (-gremlins: a
// machine without the module proxy), or "" for `go run` of the pinned
// version; with dryRun (-overlay) it only lists the mutants, and the recheck
// runs each of them.
type tool struct {
	bin    string
	dryRun bool
}

func run(p Package, dir, goflags string, workers, coef int, reuse bool, gr tool, log io.Writer) ([]Mutant, time.Duration, error) {
	ex, err := exclusions(p)
	if err != nil {
		return nil, 0, err
	}
	out := filepath.Join(dir, p.file()+".json")
	if reuse {
		var ms []Mutant
		var took time.Duration
		if _, err := os.Stat(out); err != nil {
			// An interrupted run wrote no JSON; its log has a line per mutant done.
			ms, took, err = readLog(p, strings.TrimSuffix(out, ".json")+".log")
			if err != nil {
				return nil, 0, err
			}
		} else if ms, took, err = readReport(p, out, 0); err != nil {
			return nil, 0, err
		}
		return inUnit(ms, ex), took, nil
	}
	args := []string{"unleash", "--workers", strconv.Itoa(workers), "--timeout-coefficient", strconv.Itoa(coef),
		"--invert-logical", "-o", out}
	if gr.dryRun {
		args = append(args, "--dry-run")
	}
	for _, e := range ex {
		args = append(args, "-E", e)
	}
	args = append(args, "./"+p.Path)
	cmd := exec.Command("go", append([]string{"run", Gremlins}, args...)...)
	if gr.bin != "" {
		cmd = exec.Command(gr.bin, args...)
	}
	// -short: the quick loop's tests, which must catch these on their own.
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("gremlins on %s: %w (its output: %s)", p.Unit(), err, dir)
	}
	return readReport(p, out, time.Since(start))
}

// inUnit leaves out the mutants of files the unit leaves out now (ex, as
// gremlins' -E takes them): a report made before a fixture or a unit of its
// own was declared is tallied as the unit is.
func inUnit(ms []Mutant, ex []string) []Mutant {
	var res []*regexp.Regexp
	for _, e := range ex {
		res = append(res, regexp.MustCompile(e))
	}
	return slices.DeleteFunc(ms, func(m Mutant) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(m.File) })
	})
}

var logLine = regexp.MustCompile(`^\s*(KILLED|LIVED|NOT COVERED|TIMED OUT|NOT VIABLE|SKIPPED) ([A-Z_]+) at (.+):(\d+):(\d+)$`)

// readLog reads the mutants an interrupted gremlins run logged, as a report.
func readLog(p Package, file string) ([]Mutant, time.Duration, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	type mu struct {
		Type   string `json:"type"`
		Status string `json:"status"`
		Line   int    `json:"line"`
		Column int    `json:"column"`
	}
	files := map[string][]mu{}
	for _, l := range strings.Split(string(b), "\n") {
		m := logLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[4])
		col, _ := strconv.Atoi(m[5])
		files[m[3]] = append(files[m[3]], mu{m[2], m[1], line, col})
	}
	var rep struct {
		Files []struct {
			FileName  string `json:"file_name"`
			Mutations []mu   `json:"mutations"`
		} `json:"files"`
	}
	for _, f := range slices.Sorted(maps.Keys(files)) {
		rep.Files = append(rep.Files, struct {
			FileName  string `json:"file_name"`
			Mutations []mu   `json:"mutations"`
		}{f, files[f]})
	}
	j, _ := json.Marshal(rep)
	fmt.Fprintf(os.Stderr, "mutants: %s: no report, reading the %d mutants its log lists (an interrupted run)\n", p.Path, strings.Count(string(j), `"status"`))
	return readReport(p, "", 0, j)
}

func readReport(p Package, out string, took time.Duration, raw ...[]byte) ([]Mutant, time.Duration, error) {
	if len(raw) > 0 {
		ms, err := ParseReport(p.Path, bytes.NewReader(raw[0]), func(file string) []string {
			b, _ := os.ReadFile(filepath.Join(p.Path, file))
			return strings.Split(string(b), "\n")
		})
		return ms, took, err
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	ms, err := ParseReport(p.Path, f, func(file string) []string {
		b, _ := os.ReadFile(filepath.Join(p.Path, file))
		return strings.Split(string(b), "\n")
	})
	return ms, took, err
}

func main() {
	update := flag.Bool("update", false, "rewrite mutants/baseline.txt with this run's result")
	workers := flag.Int("workers", 1, "gremlins workers (each runs a package's tests)")
	coef := flag.Int("timeout-coefficient", 3, "a mutant's test run may take this many times the unmutated run")
	out := flag.String("out", "mutants.out", "where gremlins' reports and logs go")
	reuse := flag.Bool("reuse", false, "do not run gremlins: tally the reports already in -out (after editing equivalent.txt)")
	lived := flag.Bool("recheck-lived", false, "with -reuse: run the mutants that lived (or timed out) again (after adding tests)")
	files := flag.String("files", "", "comma-separated: mutate only these files of the one unit named (a sample; not with -update: the baseline holds whole units)")
	skip := flag.String("skip", "", "go test -skip REGEXP for every run: leave out slow tests on a slow machine (a mutant only they kill counts as lived: the rate can only be lower)")
	bin := flag.String("gremlins", "", "a gremlins v0.6.0 binary to run instead of `go run` of the pinned version (a machine without the module proxy)")
	dry := flag.Bool("overlay", false, "gremlins only lists the mutants; each runs through go test -overlay, -workers at a time (many cores: no module copy per worker)")
	stop := flag.Duration("stop", 0, "start no mutant after this long; those left are NOT RUN and the figures partial (-reuse continues)")
	flag.Parse()
	goflags := "-short"
	if *skip != "" {
		if strings.ContainsAny(*skip, " \t") {
			fmt.Fprintln(os.Stderr, "mutants: -skip: no spaces (it goes in GOFLAGS)")
			os.Exit(2)
		}
		goflags += " -skip=" + *skip
	}
	var sample []string
	if *files != "" {
		sample = strings.Split(*files, ",")
		if *update || len(flag.Args()) != 1 {
			fmt.Fprintln(os.Stderr, "mutants: -files samples one unit (name it) and does not go in the baseline (no -update)")
			os.Exit(2)
		}
	}
	o := opts{goflags: goflags, coef: *coef, workers: *workers, lived: *lived}
	if *stop > 0 {
		o.stop = time.Now().Add(*stop)
	}
	if *update && *stop > 0 {
		fmt.Fprintln(os.Stderr, "mutants: -stop makes partial figures: not with -update")
		os.Exit(2)
	}
	if err := mainErr(*update, *reuse, *out, o, tool{bin: *bin, dryRun: *dry}, flag.Args(), sample); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func mainErr(update, reuse bool, out string, o opts, gr tool, only, sample []string) error {
	eqf, err := os.Open("mutants/equivalent.txt")
	if err != nil {
		return err
	}
	eq, err := ParseEquivalent(eqf)
	eqf.Close()
	if err != nil {
		return err
	}
	bf, err := os.Open("mutants/baseline.txt")
	if err != nil {
		return err
	}
	base, err := ParseBaseline(bf)
	bf.Close()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var stats []Stats
	for _, p := range Packages {
		if len(only) > 0 && !slices.Contains(only, p.Unit()) {
			continue
		}
		if sample != nil {
			for _, f := range sample {
				if len(p.Files) > 0 && !slices.Contains(p.Files, f) {
					return fmt.Errorf("-files: %s is not one of %s's files %v", f, p.Unit(), p.Files)
				}
			}
			p.Files = sample
		}
		logf := io.Discard
		if !reuse {
			f, err := os.Create(filepath.Join(out, p.file()+".log"))
			if err != nil {
				return err
			}
			defer f.Close()
			logf = f
		}
		start := time.Now()
		ms, took, err := run(p, out, o.goflags, o.workers, o.coef, reuse, gr, logf)
		if err != nil {
			return err
		}
		if ms, err = recheckAll(p, ms, out, o); err != nil {
			return err
		}
		if gr.dryRun {
			took = time.Since(start) // gremlins only listed them; the recheck ran them
		}
		s := Tally(p.Unit(), ms, eq)
		fmt.Printf("%s  (%s)\n", s, took.Round(time.Second))
		for _, m := range s.Survivors {
			fmt.Printf("    %-11s %-22s %s/%s:%d:%d  %s\n", m.Status, m.Type, m.Pkg, m.File, m.Line, m.Col, m.Source)
		}
		stats = append(stats, s)
	}
	if update {
		// Keep the baseline's packages this run did not cover.
		var all []Stats
		for _, p := range Packages {
			if i := slices.IndexFunc(stats, func(s Stats) bool { return s.Pkg == p.Unit() }); i >= 0 {
				all = append(all, stats[i])
			} else if r, ok := base.Rates[p.Unit()]; ok {
				all = append(all, baselineStats(p, r, base.Survivors[p.Unit()]))
			}
		}
		f, err := os.Create("mutants/baseline.txt")
		if err != nil {
			return err
		}
		FormatBaseline(f, all)
		return f.Close()
	}
	for _, s := range stats {
		if s.NotRun > 0 {
			return fmt.Errorf("%s: %d mutants not run (-stop): partial figures, not compared with the baseline; -reuse runs the rest", s.Pkg, s.NotRun)
		}
	}
	if worse := Compare(base, stats); len(worse) > 0 {
		return fmt.Errorf("worse than mutants/baseline.txt (a test stopped catching a mutant; equivalent ones go in mutants/equivalent.txt with a reason):\n  %s", strings.Join(worse, "\n  "))
	}
	return nil
}

// baselineStats stands in for a package this run skipped, so -update keeps it.
// Only its rate and survivors matter to FormatBaseline.
func baselineStats(p Package, rate float64, survivors map[string]bool) Stats {
	s := Stats{Pkg: p.Unit()}
	// Reproduce the rate over 1000 mutants: FormatBaseline prints one decimal.
	s.Killed = int(rate*10 + 0.5)
	s.Lived = 1000 - s.Killed
	for _, k := range slices.Sorted(maps.Keys(survivors)) {
		f := strings.SplitN(k, "\t", 4)
		pf := f[0]
		col, _ := strconv.Atoi(f[2])
		s.Survivors = append(s.Survivors, Mutant{Pkg: p.Path, File: strings.TrimPrefix(pf, p.Path+"/"), Type: f[1], Col: col, Source: f[3]})
	}
	return s
}
