package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/source"
	"github.com/peerboot/peerboot/store"
)

// Options tune a build.
type Options struct {
	Store  *store.Store
	Inputs []lock.Input
	Until  StageName // last stage to run; "" = the last one
	Jobs   int
	Log    io.Writer
	Keep   bool   // keep scratch directories (for debugging a failed stage)
	OutDir string // where the image stage's outputs are published (OutDir/<recipe>/)
	// Check names stages to run again although the store holds their output,
	// comparing what they write with it file by file: proof that a warm
	// rebuild gives what a build from empty gives.
	Check map[StageName]bool
	// Remote shares stage outputs through registries (docs/remote-cache.md).
	Remote Remote
}

// Outcome reports one stage of a run.
type Outcome struct {
	Stage    string
	Key      string
	Cached   bool
	Checked  bool // run again and found identical to the store's output
	Unneeded bool // not asked of the store: every stage that reads it was there
	Duration time.Duration
	Dir      string // the stage output in the store (for "publish": the output directory)
	// The remote cache: Pulled is a stage fetched from Remote.From (its tree's
	// bytes in PulledBytes), PushedBytes what was sent to Remote.To (0: nothing,
	// or the cache had it), Refused why a fetched stage was refused.
	Pulled      bool
	PulledBytes int64
	Pushed      bool
	PushedBytes int64
	Refused     string
	PushError   string // a push that failed (a warning: the stage itself is good)
}

// stageRun is everything a stage's run may read, and where it writes.
type stageRun struct {
	Name    StageName
	Recipe  *recipe.Resolved // only the stage's declared fields are set
	Data    []Datum          // the bytes the plan hashed, in plan order
	Inputs  []lock.Input     // the pinned inputs of the stage's roles
	Deps    map[StageName]string
	Epoch   int64 // the build clock, when the stage declared Clock
	Store   *store.Store
	Scratch string
	Out     string
	Base    string // the stage's previous output (see runStage), "" for none or when checking
	Jobs    int
	Log     io.Writer
}

// Dep is the output directory of a stage this one declared in Deps.
func (sr *stageRun) Dep(name StageName) string {
	d, ok := sr.Deps[name]
	if !ok {
		panic("build: a stage read the output of " + string(name) + ", which it does not declare in Deps")
	}
	return d
}

// Datum returns the data the plan read under name, and whether there was one.
func (sr *stageRun) Datum(name string) ([]byte, bool) {
	for _, d := range sr.Data {
		if d.Name == name {
			return d.Bytes, true
		}
	}
	return nil, false
}

func joinStages(names []StageName) string {
	var s []string
	for _, n := range names {
		s = append(s, string(n))
	}
	return strings.Join(s, ", ")
}

// Run executes the plan's stages in order up to opt.Until, skipping every stage
// whose output the store already has.
func Run(ctx context.Context, p *Plan, opt Options) ([]Outcome, error) {
	names := StageNames()
	until := opt.Until
	if until == "" {
		until = names[len(names)-1]
	}
	if p.Stage(until) == nil {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("unknown stage %q (stages: %s)", until, joinStages(names)))
	}
	for name := range opt.Check {
		if p.Stage(name) == nil {
			return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("--check: unknown stage %q (stages: %s)", name, joinStages(names)))
		}
	}
	if opt.Jobs <= 0 {
		opt.Jobs = 1
	}
	clock := &buildClock{recipe: p.Recipe, store: opt.Store, dates: map[string]int64{}}
	prev := previousKeys(opt.Store, p.Recipe.Name)
	last := slices.Index(names, until)
	for _, s := range p.Stages[:last+1] {
		if s.Key == "" {
			return nil, exitcode.Tag(exitcode.Stale, fmt.Errorf("stage %s: unresolved inputs: %s", s.Name, strings.Join(s.Unresolved, "; ")))
		}
	}
	// Which stages run: walking back from the last one, a needed stage runs
	// when the store lacks its output (or --check asks), and then the stages it
	// reads are needed too. A no-op rebuild asks the store about one stage.
	// A stage the store lacks is asked of the remote cache first, and once
	// fetched (verified) it is in the store like any other: a refused one runs.
	need, run := map[StageName]bool{until: true}, map[StageName]bool{}
	for name := range opt.Check {
		need[name] = slices.Index(names, name) <= last
	}
	// A stage needed only by runs that read some of its files (stage.Reads)
	// is checked for those files alone; whole is who needs all of it.
	whole, some := map[StageName]bool{}, map[StageName][]string{}
	for name := range need {
		whole[name] = true
	}
	rr := newRemoteRun()
	for i := last; i >= 0; i-- {
		s := p.Stages[i]
		if !need[s.Name] {
			continue
		}
		var files []string // nil: all of them
		if !whole[s.Name] {
			files = some[s.Name]
		}
		have := s.Cached || opt.Store.CheckOutputFiles(s.Key, files) == nil
		if !have {
			var err error
			if have, err = rr.pull(ctx, opt, s, clock); err != nil {
				return nil, err
			}
		}
		if opt.Check[s.Name] || !have {
			run[s.Name] = true
			for _, d := range s.def.Deps {
				need[d] = true
				if only, ok := s.def.Reads[d]; ok {
					some[d] = append(some[d], only...)
				} else {
					whole[d] = true
				}
			}
		}
	}
	// Only the stages that run read their inputs: `--stage driver` needs no
	// userspace package and no NVIDIA installer in the store.
	for _, s := range p.Stages[:last+1] {
		if !run[s.Name] {
			continue
		}
		for _, in := range s.inputs {
			if in.Kind == lock.KindGit || opt.Store.HasBlob(in.SHA256) {
				continue
			}
			how := fmt.Sprintf("run `peerboot fetch %s`", p.Recipe.Path)
			if in.Role == lock.RoleInstaller {
				how += fmt.Sprintf(", or on a machine that cannot reach NVIDIA bring the file with `peerboot store import %s %s` (checked against its sha256 pin)", p.Recipe.Path, in.Name)
			}
			return nil, exitcode.Tag(exitcode.Stale, fmt.Errorf("stage %s: input %s is not in the store: %s", s.Name, in.Name, how))
		}
	}
	var outs []Outcome
	for _, s := range p.Stages[:last+1] {
		start := time.Now()
		o := Outcome{Stage: string(s.Name), Key: s.Key, Dir: opt.Store.OutputDir(s.Key), Refused: rr.refused[s.Name]}
		o.PulledBytes, o.Pulled = rr.pulled[s.Name]
		switch {
		case !need[s.Name]:
			o.Unneeded = true
			fmt.Fprintf(opt.Log, "%s: not needed (what reads it is in the store) (%s)\n", s.Name, s.Key)
		case !run[s.Name] && o.Pulled:
			o.Cached = true
		case !run[s.Name]:
			o.Cached = true
			fmt.Fprintf(opt.Log, "%s: cached (%s)\n", s.Name, s.Key)
		case opt.Check[s.Name] && opt.Store.HasOutput(s.Key):
			fmt.Fprintf(opt.Log, "%s: checking (%s): building again to compare with the store\n", s.Name, s.Key)
			if err := runStage(ctx, p, s, opt, clock, prev[s.Name], true); err != nil {
				return outs, err
			}
			o.Cached, o.Checked = true, true
		default:
			fmt.Fprintf(opt.Log, "%s: building (%s)\n", s.Name, s.Key)
			if err := runStage(ctx, p, s, opt, clock, prev[s.Name], false); err != nil {
				return outs, err
			}
		}
		rr.push(ctx, opt, s, clock)
		o.PushedBytes, o.Pushed = rr.pushed[s.Name]
		o.PushError = rr.pushErrors[s.Name]
		o.Duration = time.Since(start) + rr.pullTime[s.Name] // a fetch happened before the loop
		outs = append(outs, o)
	}
	if until == names[len(names)-1] {
		// Remembered for `plan --why`; losing it loses only that explanation.
		if err := SaveRecord(opt.Store, p); err != nil {
			fmt.Fprintf(opt.Log, "warning: cannot record the plan for `plan --why`: %v\n", err)
		}
	}
	if until == names[len(names)-1] && opt.OutDir != "" {
		start := time.Now()
		epoch, err := clock.newest(ctx, opt.Inputs)
		if err != nil {
			return outs, err
		}
		dir, err := Publish(ctx, p, opt.Store, opt.Inputs, epoch, opt.OutDir)
		if err != nil {
			return outs, exitcode.Tag(exitcode.Build, err)
		}
		outs = append(outs, Outcome{Stage: "publish", Duration: time.Since(start), Dir: dir})
	}
	return outs, nil
}

// runStage runs one stage in a scratch directory and commits its output, or
// with check compares it with the output the store already holds. The commit
// resumes hashing from base (the stage's output in the recipe's last build)
// where a file starts as it did there, and takes the sums of files hard-linked
// from the stage's deps from their MANIFESTs.
func runStage(ctx context.Context, p *Plan, s *Stage, opt Options, clock *buildClock, base string, check bool) error {
	sc, err := opt.Store.OpenScratch(string(s.Name))
	if err != nil {
		return err
	}
	if opt.Keep {
		defer sc.Release()
	} else {
		defer sc.Remove()
	}
	scratch := sc.Dir
	sr := &stageRun{
		Name: s.Name, Recipe: s.view, Data: s.data, Inputs: s.inputs, Deps: map[StageName]string{},
		Store: opt.Store, Scratch: scratch, Out: filepath.Join(scratch, "out"), Jobs: opt.Jobs, Log: opt.Log,
	}
	for _, d := range s.def.Deps {
		sr.Deps[d] = opt.Store.OutputDir(p.Stage(d).Key)
	}
	// A check builds from empty: a stage starting from base could hide a
	// difference in what it fails to rewrite.
	if base != "" && !check && opt.Store.HasOutput(base) {
		sr.Base = opt.Store.OutputDir(base)
	}
	if s.def.Clock != clockNone {
		if sr.Epoch, err = clock.newest(ctx, s.clockInputs); err != nil {
			return exitcode.Tag(exitcode.Build, fmt.Errorf("stage %s: %w", s.Name, err))
		}
	}
	if err := os.MkdirAll(sr.Out, 0o755); err != nil {
		return err
	}
	if err := s.def.Run(ctx, sr); err != nil {
		if opt.Keep {
			err = fmt.Errorf("%w\n(scratch kept at %s)", err, scratch)
		}
		return exitcode.Tag(exitcode.Build, fmt.Errorf("stage %s: %w", s.Name, err))
	}
	if check {
		if err := opt.Store.CompareOutput(s.Key, sr.Out); err != nil {
			return exitcode.Tag(exitcode.Integrity, fmt.Errorf("stage %s: a build from empty differs from the stored output, so its key misses something it reads: %w", s.Name, err))
		}
		return nil
	}
	co := store.CommitOptions{Base: base, Log: sr.Log}
	for _, d := range s.def.Deps {
		co.Links = append(co.Links, store.Link{Key: p.Stage(d).Key, Files: s.def.Reads[d]})
	}
	return opt.Store.CommitOutputWith(s.Key, sr.Out, co)
}

// unpack extracts the stage's single input of role into dir and returns the tree root.
func (sr *stageRun) unpack(ctx context.Context, role, dir string) (string, error) {
	var in *lock.Input
	for i := range sr.Inputs {
		if sr.Inputs[i].Role == role {
			in = &sr.Inputs[i]
			break
		}
	}
	if in == nil {
		return "", fmt.Errorf("no pinned %s input", role)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(sr.Log, "unpacking %s\n", in.Name)
	return source.Unpack(ctx, sr.Store, *in, dir)
}

// buildClock reads the build clock: the recipe's source_date_epoch, else the
// newest own date of the given inputs (a .deb's data.tar time, a git commit's
// committer time), each input read once per build.
type buildClock struct {
	recipe *recipe.Resolved
	store  *store.Store
	dates  map[string]int64 // input digest -> its date
}

func (c *buildClock) newest(ctx context.Context, ins []lock.Input) (int64, error) {
	if e := c.recipe.SourceDateEpoch; e > 0 {
		return e, nil
	}
	var newest int64
	for _, in := range ins {
		t, err := c.dateOf(ctx, in)
		if err != nil {
			return 0, err
		}
		newest = max(newest, t)
	}
	if newest == 0 {
		return 0, fmt.Errorf("cannot derive the build clock from the inputs: set source_date_epoch in the recipe")
	}
	return newest, nil
}

// dateOf is in's own date, read once per build (or known from a fetched
// stage that signed it).
func (c *buildClock) dateOf(ctx context.Context, in lock.Input) (int64, error) {
	if t, ok := c.dates[in.Digest()]; ok {
		return t, nil
	}
	t, err := c.date(ctx, in)
	if err != nil {
		return 0, err
	}
	c.dates[in.Digest()] = t
	return t, nil
}

func (c *buildClock) date(ctx context.Context, in lock.Input) (int64, error) {
	switch in.Kind {
	case lock.KindDeb:
		f, err := os.Open(c.store.BlobPath(in.SHA256))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		t, err := debfile.DataTime(f)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", in.Name, err)
		}
		return t, nil
	case lock.KindGit:
		out, err := exec.CommandContext(ctx, "git", "--git-dir", c.store.GitDir(in.URL), "show", "-s", "--format=%ct", in.Commit).Output()
		if err != nil {
			return 0, fmt.Errorf("%s: reading commit time: %w", in.Name, err)
		}
		return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	}
	return 0, nil
}
