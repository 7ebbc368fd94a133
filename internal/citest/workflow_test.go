package citest

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	workflowPath = "../../.github/workflows/images.yml"
	makefilePath = "../../Makefile"
)

type step struct {
	ID   string            `yaml:"id"`
	Name string            `yaml:"name"`
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	With map[string]any    `yaml:"with"`
	Env  map[string]string `yaml:"env"`
	If   string            `yaml:"if"`
	raw  map[string]any
}

type job struct {
	raw      map[string]any
	needs    []string
	steps    []step
	outputs  map[string]any
	matrix   map[string]any
	fromJSON bool
	env      map[string]any
}

// matrixFields are the keys of each entry `peerboot recipe matrix` prints.
var matrixFields = []string{"recipe", "path", "driver"}

var (
	topKeys  = []string{"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
	jobKeys  = []string{"name", "needs", "runs-on", "container", "services", "permissions", "environment", "concurrency", "outputs", "env", "defaults", "if", "steps", "timeout-minutes", "strategy", "continue-on-error"}
	stepKeys = []string{"id", "name", "if", "uses", "run", "with", "env", "shell", "working-directory", "continue-on-error", "timeout-minutes"}
)

func load(t *testing.T) (map[string]any, map[string]*job) {
	t.Helper()
	b, err := os.ReadFile(workflowPath)
	if err != nil {
		t.Fatal(err)
	}
	var wf map[string]any
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("%s: %v", workflowPath, err)
	}
	jobsRaw, ok := wf["jobs"].(map[string]any)
	if !ok || len(jobsRaw) == 0 {
		t.Fatalf("%s: no jobs", workflowPath)
	}
	jobs := map[string]*job{}
	for name, v := range jobsRaw {
		raw, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("job %s is not a mapping", name)
		}
		j := &job{raw: raw}
		switch n := raw["needs"].(type) {
		case string:
			j.needs = []string{n}
		case []any:
			for _, x := range n {
				s, _ := x.(string)
				j.needs = append(j.needs, s)
			}
		case nil:
		default:
			t.Errorf("job %s: needs is %T", name, n)
		}
		j.outputs, _ = raw["outputs"].(map[string]any)
		j.env, _ = raw["env"].(map[string]any)
		if st, ok := raw["strategy"].(map[string]any); ok {
			switch m := st["matrix"].(type) {
			case string:
				j.fromJSON = strings.Contains(m, "fromJSON(")
			case map[string]any:
				j.matrix = m
			}
		}
		list, _ := raw["steps"].([]any)
		for i, sv := range list {
			sm, ok := sv.(map[string]any)
			if !ok {
				t.Fatalf("job %s step %d is not a mapping", name, i+1)
			}
			sb, _ := yaml.Marshal(sm)
			var s step
			if err := yaml.Unmarshal(sb, &s); err != nil {
				t.Fatalf("job %s step %d: %v", name, i+1, err)
			}
			s.raw = sm
			j.steps = append(j.steps, s)
		}
		jobs[name] = j
	}
	return wf, jobs
}

// TestWorkflowShape is the schema check actionlint would do, lightly: known
// keys, every job runnable, steps well-formed, needs acyclic, actions pinned.
func TestWorkflowShape(t *testing.T) {
	wf, jobs := load(t)
	for k := range wf {
		if !slices.Contains(topKeys, k) {
			t.Errorf("unknown top-level key %q", k)
		}
	}
	for _, k := range []string{"name", "on", "jobs"} {
		if wf[k] == nil {
			t.Errorf("no %q", k)
		}
	}
	for name, j := range jobs {
		for k := range j.raw {
			if !slices.Contains(jobKeys, k) {
				t.Errorf("job %s: unknown key %q", name, k)
			}
		}
		if _, ok := j.raw["runs-on"].(string); !ok {
			t.Errorf("job %s: no runs-on", name)
		}
		if len(j.steps) == 0 {
			t.Errorf("job %s: no steps", name)
		}
		for _, n := range j.needs {
			if jobs[n] == nil {
				t.Errorf("job %s needs %q, which is not a job", name, n)
			}
		}
		ids := map[string]bool{}
		for i, s := range j.steps {
			where := name + " step " + stepName(i, s)
			for k := range s.raw {
				if !slices.Contains(stepKeys, k) {
					t.Errorf("%s: unknown key %q", where, k)
				}
			}
			if (s.Run == "") == (s.Uses == "") {
				t.Errorf("%s: wants exactly one of run and uses", where)
			}
			if s.Uses != "" && !regexp.MustCompile(`^[\w.-]+/[\w./-]+@[\w.-]+$`).MatchString(s.Uses) {
				t.Errorf("%s: uses %q is not owner/repo@version", where, s.Uses)
			}
			if s.ID != "" {
				if ids[s.ID] {
					t.Errorf("%s: duplicate step id %q", where, s.ID)
				}
				ids[s.ID] = true
			}
		}
	}
	// needs must not loop.
	state := map[string]int{}
	var visit func(string) bool
	visit = func(n string) bool {
		switch state[n] {
		case 1:
			return false
		case 2:
			return true
		}
		state[n] = 1
		if j := jobs[n]; j != nil {
			for _, d := range j.needs {
				if !visit(d) {
					t.Errorf("needs cycle through %s -> %s", n, d)
					return false
				}
			}
		}
		state[n] = 2
		return true
	}
	for n := range jobs {
		visit(n)
	}
}

var exprRE = regexp.MustCompile(`\$\{\{(.*?)\}\}`)

// TestWorkflowExpressions checks that ${{ }} expressions refer to matrix keys,
// step ids, job outputs and env variables that exist where they are used.
func TestWorkflowExpressions(t *testing.T) {
	wf, jobs := load(t)
	topEnv, _ := wf["env"].(map[string]any)
	for name, j := range jobs {
		matrixKeys := map[string]bool{}
		for k := range j.matrix {
			matrixKeys[k] = true
		}
		if j.fromJSON {
			for _, k := range matrixFields {
				matrixKeys[k] = true
			}
		}
		envKeys := map[string]bool{}
		for k := range topEnv {
			envKeys[k] = true
		}
		for k := range j.env {
			envKeys[k] = true
		}
		seenIDs := map[string]bool{}
		check := func(where, s string, stepEnv map[string]string) {
			for _, m := range exprRE.FindAllStringSubmatch(s, -1) {
				e := m[1]
				for _, r := range regexp.MustCompile(`(?:^|[^.\w-])matrix\.([\w-]+)`).FindAllStringSubmatch(e, -1) {
					if !matrixKeys[r[1]] {
						t.Errorf("%s: matrix.%s is not a matrix key of job %s", where, r[1], name)
					}
				}
				for _, r := range regexp.MustCompile(`(?:^|[^.\w-])steps\.([\w-]+)\.outputs\.`).FindAllStringSubmatch(e, -1) {
					if !seenIDs[r[1]] {
						t.Errorf("%s: steps.%s is not an earlier step of job %s", where, r[1], name)
					}
				}
				for _, r := range regexp.MustCompile(`\bneeds\.([\w-]+)\.outputs\.([\w-]+)`).FindAllStringSubmatch(e, -1) {
					if !slices.Contains(j.needs, r[1]) {
						t.Errorf("%s: needs.%s, but job %s does not need it", where, r[1], name)
					} else if _, ok := jobs[r[1]].outputs[r[2]]; !ok {
						t.Errorf("%s: job %s has no output %s", where, r[1], r[2])
					}
				}
				for _, r := range regexp.MustCompile(`\benv\.([\w-]+)`).FindAllStringSubmatch(e, -1) {
					if _, ok := stepEnv[r[1]]; !ok && !envKeys[r[1]] {
						t.Errorf("%s: env.%s is not set", where, r[1])
					}
				}
			}
		}
		for i, s := range j.steps {
			b, _ := yaml.Marshal(s.raw)
			check(name+" step "+stepName(i, s), string(b), s.Env)
			if s.ID != "" {
				seenIDs[s.ID] = true
			}
		}
		// Job-level keys (outputs, strategy, ...) may name any of the job's steps.
		for k, v := range j.raw {
			if k == "steps" {
				continue
			}
			b, _ := yaml.Marshal(v)
			check(name+"."+k, string(b), nil)
		}
	}
}

// TestWorkflowUsesMakefileTargets: every `make X` a step runs is a Makefile
// target, and no step runs peerboot or go directly (build steps are the targets
// developers run).
func TestWorkflowUsesMakefileTargets(t *testing.T) {
	targets := makeTargets(t)
	_, jobs := load(t)
	used := map[string]bool{}
	for name, j := range jobs {
		for i, s := range j.steps {
			if s.Run == "" {
				continue
			}
			where := name + " step " + stepName(i, s)
			for _, tgt := range makeInvocations(s.Run) {
				used[tgt] = true
				if !targets[tgt] {
					t.Errorf("%s: `make %s`: no such target in the Makefile", where, tgt)
				}
			}
			if regexp.MustCompile(`(^|[\s;&|(])(\S*/)?peerboot\s|(^|[\s;&|(])go\s+(build|test|run|vet)\b`).MatchString(s.Run) {
				t.Errorf("%s: runs peerboot or go directly; make it a Makefile target:\n%s", where, s.Run)
			}
		}
	}
	// The jobs the issue asks for, in their order.
	for _, want := range []string{"lock-check", "image", "repro-compare", "sign", "verify", "publish", "stage-keys", "ci-matrix"} {
		if !used[want] {
			t.Errorf("the workflow never runs `make %s`", want)
		}
	}
	if b := jobs["build"]; b == nil || indexOfMake(b, "lock-check") > indexOfMake(b, "image") {
		t.Error("job build must run the lock check before the build")
	}
	if p := jobs["publish"]; p == nil || !slices.Contains(p.needs, "reproduce") ||
		!(indexOfMake(p, "sign") < indexOfMake(p, "verify") && indexOfMake(p, "verify") < indexOfMake(p, "publish")) {
		t.Error("job publish must need reproduce and run sign, verify, publish in that order")
	}
}

func indexOfMake(j *job, target string) int {
	for i, s := range j.steps {
		if slices.Contains(makeInvocations(s.Run), target) {
			return i
		}
	}
	return 1 << 30
}

func stepName(i int, s step) string {
	if s.Name != "" {
		return "\"" + s.Name + "\""
	}
	if s.ID != "" {
		return s.ID
	}
	return string(rune('1' + i))
}

// makeInvocations returns the targets of every make command in a shell
// script: the words after a `make` in command position (a line's start, after
// && || ; | or inside $( )) that are neither options nor VAR=value.
func makeInvocations(script string) []string {
	script = exprRE.ReplaceAllString(script, "EXPR")
	var out []string
	for _, line := range strings.Split(script, "\n") {
		words := strings.Fields(line)
		cmdPos := true
		for i := 0; i < len(words); i++ {
			w := words[i]
			isMake := (cmdPos && w == "make") || strings.HasSuffix(w, "$(make") || strings.HasSuffix(w, "`make")
			cmdPos = w == "&&" || w == "||" || w == "|" || strings.HasSuffix(w, ";") || w == "then" || w == "do"
			if !isMake {
				continue
			}
			for i++; i < len(words); i++ {
				a := words[i]
				if a == "&&" || a == "||" || a == "|" || strings.HasPrefix(a, ">") || strings.HasPrefix(a, "2>") {
					cmdPos = true
					break
				}
				if strings.HasPrefix(a, "-") || strings.Contains(a, "=") || strings.HasPrefix(a, "$") {
					continue
				}
				end := strings.TrimRight(a, "\");`'")
				if end != "" {
					out = append(out, end)
				}
				if end != a {
					cmdPos = strings.HasSuffix(a, ";")
					break
				}
			}
		}
	}
	return out
}

// makeTargets parses the Makefile's rule names (not variable assignments).
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(makefilePath)
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^([^\s:#=][^:#=]*?)\s*:([^=]|$)`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := rule.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Fields(m[1]) {
				out[name] = true
			}
		}
	}
	return out
}

func TestMakeInvocations(t *testing.T) {
	for script, want := range map[string][]string{
		`make image RECIPE=x`: {"image"},
		`echo "matrix=$(make -s ci-matrix)" >> "$GITHUB_OUTPUT"`:     {"ci-matrix"},
		"make -s stage-keys RECIPE=a >> out\nmake lock-check e2e":    {"stage-keys", "lock-check", "e2e"},
		`make sign OUTDIR=$OUTDIR ${X:+DB_KEY=env:Y} && make verify`: {"sign", "verify"},
		`apt-get install make`: nil,
	} {
		got := makeInvocations(script)
		sort.Strings(got)
		w := slices.Clone(want)
		sort.Strings(w)
		if !slices.Equal(got, w) {
			t.Errorf("makeInvocations(%q) = %q, want %q", script, got, w)
		}
	}
	if tg := makeTargets(t); !tg["image"] || tg["GO"] || tg["BIN"] {
		t.Errorf("makeTargets: %v", tg)
	}
}
