// Package build runs the pipeline: a list of stages, each a value that says
// what its key covers and how it runs, and one loop that asks the store first.
package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/internal/statcache"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// stage is one step of the pipeline. Its key is sha256 of its name, version,
// the keys of the stages it reads, the digests of the pinned inputs and data
// files it reads, the recipe fields it sees, and the build clock when it uses
// one. Its run gets exactly those things and nothing else: a recipe holding
// only Fields, the Data bytes the plan hashed, the inputs of Roles, the
// outputs of Deps. So nothing it reads can bypass its key.
type stage struct {
	Name    StageName
	Version int         // bump when the stage's code changes what it writes
	Deps    []StageName // stages whose outputs the run reads
	// Reads names, for a dep of which the run reads only some files, those
	// files: before the run, only they are checked in the store, and only they
	// are looked at for hard links at commit (the image stage reads vmlinuz of
	// the kernel output's 12,000 files).
	Reads  map[StageName][]string
	Roles  []string // pinned input roles the run reads
	Fields []string // recipe fields the run sees (wholeRecipe: all of it)
	Clock  clockKind

	// DataFields are recipe fields that name data files; the plan reads those
	// files (through Data) and keys their bytes.
	DataFields []string
	// Data reads the stage's data files at plan time. Missing ones are
	// unresolved (not an error), so `plan` works before `make`.
	Data func(pc *planContext) (data []Datum, unresolved []string, err error)
	Run  func(ctx context.Context, sr *stageRun) error
}

// clockKind says which build clock a stage's run uses. The clock is the
// recipe's source_date_epoch when set; otherwise the newest date among inputs:
// the stage's own and those of the stages it reads (clockOwn: already in its key
// through their digests, so a userspace bump does not recompile the kernel), or
// every input of the build (clockAll: for the small stages that stamp the whole
// image, keyed by a digest over all input digests).
type clockKind int

const (
	clockNone clockKind = iota
	clockOwn
	clockAll
)

// Datum is one data file a stage reads: a kernel fragment, a patch, a key, a binary.
type Datum struct {
	Name  string // as the key line and the run name it ("fragment base.config")
	Bytes []byte
	// Path is set instead of Bytes for a big file (the image binaries): the
	// plan keys it by Sum, from the store's stat cache, and a run reads it
	// with read, which checks it still has that digest.
	Path string
	Sum  string // "sha256:HEX"; set by MakePlan
}

// read is the datum's bytes: Bytes, or Path's content when it still has the
// digest the plan keyed.
func (d Datum) read() ([]byte, error) {
	if d.Path == "" {
		return d.Bytes, nil
	}
	b, err := os.ReadFile(d.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name, err)
	}
	if got := digest(b); got != d.Sum {
		return nil, fmt.Errorf("%s: %s changed since the plan keyed it (%s, now %s): run the build again", d.Name, d.Path, d.Sum, got)
	}
	return b, nil
}

// StageName names a stage of the pipeline: the first part of its key, the
// directory name of its run, and what --stage takes.
type StageName string

// The stages, in pipeline order.
const (
	StageKernel    StageName = "kernel"
	StageDriver    StageName = "driver"
	StageUserspace StageName = "userspace"
	StageModules   StageName = "modules"
	StageTools     StageName = "tools"
	StageConfig    StageName = "config"
	StageInitramfs StageName = "initramfs"
	StageImage     StageName = "image"
)

// pipeline is every stage in order. Keep it the one list: plan, build, the key
// test and `plan -v` all read it.
func pipeline() []*stage {
	return []*stage{kernelStage(), driverStage(), userspaceStage(), modulesStage(), toolsStage(), configStage(), initramfsStage(), imageStage()}
}

// StageNames in pipeline order.
func StageNames() []StageName {
	var names []StageName
	for _, s := range pipeline() {
		names = append(names, s.Name)
	}
	return names
}

// Item is one line of a stage's key.
type Item struct {
	Kind  string // "stage", "input", "data", "field" or "clock"
	Name  string
	Value string
}

// Stage is one planned stage.
type Stage struct {
	Name       StageName
	Version    int
	Fields     []string // the recipe fields the key covers (declared, then data fields)
	Items      []Item
	Key        string   // "<name>-<sha256>"; "" when an input is unresolved
	Cached     bool     // the store holds the output
	Remote     bool     // the remote cache holds it (Plan.AskRemote), the store does not
	Unresolved []string // why Key is unknown

	def    *stage
	view   *recipe.Resolved // the recipe as the run sees it
	data   []Datum
	inputs []lock.Input
	// clockInputs are the inputs whose newest date is the stage's clock.
	clockInputs []lock.Input
}

// Plan is every stage of a recipe's build.
type Plan struct {
	Recipe *recipe.Resolved
	Tools  Tools
	Stages []*Stage
}

// planContext is what a stage's Data function may read.
type planContext struct {
	Recipe *recipe.Resolved
	Tools  Tools

	// The module-signing material, read on first use: the kernel and modules
	// stages both key the certificate, from one read.
	signing     *ModuleSigning
	signingErr  error
	signingRead bool
}

// moduleSigning is the recipe's module-signing material, read once.
func (pc *planContext) moduleSigning() (*ModuleSigning, error) {
	if !pc.signingRead {
		pc.signing, pc.signingErr = moduleSigning(pc.Recipe)
		pc.signingRead = true
	}
	return pc.signing, pc.signingErr
}

// Stage returns the planned stage by name.
func (p *Plan) Stage(name StageName) *Stage {
	for _, s := range p.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// MakePlan computes every stage's key from pinned inputs, the data ReadData
// read and recipe fields, and asks the store which outputs it has. It reads no
// network and no data file: the bytes it keys are those ReadData checked, and
// those the stages' runs get.
func MakePlan(d *Data, ins []lock.Input, un []lock.Unresolved, st *store.Store) (*Plan, error) {
	r, tools := d.Recipe, d.Tools
	p := &Plan{Recipe: r, Tools: tools}
	// The data files named by path (the image binaries) are keyed by their
	// digests from the store's stat cache: a no-op rebuild reads none of them.
	cachePath := d.StatCache
	if cachePath == "" && st != nil {
		cachePath = st.HintPath(store.StatCacheHint)
	}
	sums := statcache.Load(cachePath)
	defer sums.Save() // a hint: a store it cannot be written to costs a hash next time
	byRole := map[string][]lock.Input{}
	for _, in := range ins {
		byRole[in.Role] = append(byRole[in.Role], in)
	}
	missing := map[string][]string{}
	for _, u := range un {
		missing[u.Role] = append(missing[u.Role], u.String())
	}
	for _, def := range pipeline() {
		s := &Stage{Name: def.Name, Version: def.Version, def: def}
		for _, d := range def.Deps {
			dep := p.Stage(d)
			if dep == nil {
				return nil, fmt.Errorf("stage %s reads stage %s, which does not come before it", def.Name, d)
			}
			if dep.Key == "" {
				s.Unresolved = append(s.Unresolved, "needs stage "+string(d)+", whose key is unknown")
				continue
			}
			s.Items = append(s.Items, Item{"stage", string(d), dep.Key})
			s.clockInputs = append(s.clockInputs, dep.clockInputs...)
		}
		for _, role := range def.Roles {
			for _, in := range byRole[role] {
				s.Items = append(s.Items, Item{"input", role + " " + in.Name, in.Digest()})
				s.inputs = append(s.inputs, in)
				s.clockInputs = append(s.clockInputs, in)
			}
			s.Unresolved = append(s.Unresolved, missing[role]...)
		}
		if sd, ok := d.stages[def.Name]; ok {
			s.data = slices.Clone(sd.data)
			for i, datum := range s.data {
				if datum.Path == "" {
					s.Items = append(s.Items, Item{"data", datum.Name, digest(datum.Bytes)})
					continue
				}
				sum, err := sums.Digest(datum.Path)
				if err != nil {
					s.Unresolved = append(s.Unresolved, fmt.Sprintf("%s: %v", datum.Name, err))
					continue
				}
				s.data[i].Sum = sum
				s.Items = append(s.Items, Item{"data", datum.Name, sum})
			}
			s.Unresolved = append(s.Unresolved, sd.unresolved...)
		}
		view, err := project(r, def.Fields)
		if err != nil {
			return nil, err
		}
		s.view = view
		for _, f := range def.Fields {
			if f == wholeRecipe {
				s.Items = append(s.Items, Item{"field", "recipe", r.Digest})
				continue
			}
			v, err := fieldValue(r, f)
			if err != nil {
				return nil, err
			}
			s.Items = append(s.Items, Item{"field", f, v})
		}
		s.Fields = append(slices.Clone(def.Fields), def.DataFields...)
		if def.Clock == clockAll {
			s.clockInputs = ins
		}
		if it, ok := clockItem(r, def.Clock, ins); ok {
			s.Items = append(s.Items, it)
		}
		if len(s.Unresolved) == 0 {
			s.Key = stageKey(s)
			s.Cached = st != nil && st.HasOutput(s.Key)
		}
		p.Stages = append(p.Stages, s)
	}
	return p, nil
}

func stageKey(s *Stage) string {
	h := sha256.New()
	fmt.Fprintf(h, "stage %s\nversion %d\n", s.Name, s.Version)
	for _, it := range s.Items {
		fmt.Fprintf(h, "%s %s %s\n", it.Kind, it.Name, it.Value)
	}
	return string(s.Name) + "-" + hex.EncodeToString(h.Sum(nil))
}

// clockItem is the build clock's key line, if it needs one (see clockKind).
func clockItem(r *recipe.Resolved, kind clockKind, ins []lock.Input) (Item, bool) {
	switch {
	case kind == clockNone:
		return Item{}, false
	case r.SourceDateEpoch > 0:
		return Item{"clock", "source_date_epoch", strconv.FormatInt(r.SourceDateEpoch, 10)}, true
	case kind == clockOwn:
		return Item{}, false // the newest of inputs the key already covers
	}
	var ds []string
	for _, in := range ins {
		ds = append(ds, in.Digest())
	}
	sort.Strings(ds)
	return Item{"clock", "newest of all inputs", digest([]byte(strings.Join(ds, "\n")))}, true
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Print writes the plan for people: each stage, whether it would run, its key
// and what the key covers. verbose adds the recipe fields' values.
func (p *Plan) Print(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "recipe %s  %s\n", p.Recipe.Name, p.Recipe.Digest)
	fmt.Fprintf(w, "  files: %s\n\n", strings.Join(p.Recipe.Files, " <- "))
	for i, s := range p.Stages {
		status := "run: not in store"
		switch {
		case s.Key == "":
			status = "blocked: unresolved inputs"
		case s.Cached:
			status = "cached"
		case s.Remote:
			status = "remote: in the cache"
		}
		key := s.Key
		if key == "" {
			key = "(unknown)"
		}
		fmt.Fprintf(w, "%d. %-9s %-26s %s\n", i+1, s.Name, status, key)
		for _, u := range s.Unresolved {
			fmt.Fprintf(w, "     unresolved: %s\n", u)
		}
		if verbose {
			fields := "none"
			if len(s.Fields) > 0 {
				fields = strings.ReplaceAll(strings.Join(s.Fields, ", "), wholeRecipe, "the whole resolved recipe (by its digest)")
			}
			fmt.Fprintf(w, "     covers fields: %s\n", fields)
		}
		for _, it := range s.Items {
			if it.Kind == "field" && !verbose {
				continue
			}
			v := it.Value
			if it.Kind == "field" && it.Name != "recipe" {
				if t, err := FieldTOML(p.Recipe, it.Name); err == nil {
					v = t
				}
			}
			if !verbose && len(v) > 80 {
				v = v[:77] + "..."
			}
			fmt.Fprintf(w, "     %-5s %-48s %s\n", it.Kind, it.Name, v)
		}
	}
}
