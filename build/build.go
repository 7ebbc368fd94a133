package build

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/fetch"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/source"
	"github.com/peerboot/peerboot/store"
)

// Implemented lists the stages Run can execute today, in order.
var Implemented = []string{"kernel", "driver", "rootfs", "initramfs", "image"}

// Options tune a build.
type Options struct {
	Store  *store.Store
	Inputs []lock.Input
	Until  string // last stage to run; "" = the last implemented one
	Jobs   int
	Log    io.Writer
	Keep   bool   // keep scratch directories (for debugging a failed stage)
	OutDir string // where the image stage's outputs are published (OutDir/<recipe>/)
}

// Outcome reports one stage of a run.
type Outcome struct {
	Stage    string
	Key      string
	Cached   bool
	Duration time.Duration
	Dir      string // the stage output in the store (for "publish": the output directory)
}

// Run executes the plan's stages in order up to opt.Until, skipping every stage
// whose output the store already has.
func Run(ctx context.Context, p *Plan, opt Options) ([]Outcome, error) {
	until := opt.Until
	if until == "" {
		until = Implemented[len(Implemented)-1]
	}
	if !contains(StageNames, until) {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("unknown stage %q (stages: %s)", until, strings.Join(StageNames, ", ")))
	}
	if !contains(Implemented, until) {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("stage %q is not implemented yet (implemented: %s)", until, strings.Join(Implemented, ", ")))
	}
	if opt.Jobs <= 0 {
		opt.Jobs = 1
	}
	b := &runner{plan: p, opt: opt}
	var outs []Outcome
	for _, name := range Implemented {
		s := p.Stage(name)
		if s.Key == "" {
			return outs, exitcode.Tag(exitcode.Stale, fmt.Errorf("stage %s: unresolved inputs: %s", name, strings.Join(s.Unresolved, "; ")))
		}
		start := time.Now()
		o := Outcome{Stage: name, Key: s.Key, Dir: opt.Store.OutputDir(s.Key)}
		if opt.Store.HasOutput(s.Key) {
			o.Cached = true
			fmt.Fprintf(opt.Log, "%s: cached (%s)\n", name, s.Key)
		} else {
			fmt.Fprintf(opt.Log, "%s: building (%s)\n", name, s.Key)
			if err := b.stage(ctx, name, s); err != nil {
				return outs, err
			}
		}
		o.Duration = time.Since(start)
		outs = append(outs, o)
		if name == until {
			break
		}
	}
	if until == "image" && opt.OutDir != "" {
		start := time.Now()
		epoch, err := b.epoch(ctx)
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

type runner struct {
	plan     *Plan
	opt      Options
	epochVal int64 // computed once
}

func (b *runner) stage(ctx context.Context, name string, s *Stage) error {
	scratch, err := b.opt.Store.NewScratch(name)
	if err != nil {
		return err
	}
	if !b.opt.Keep {
		defer os.RemoveAll(scratch)
	}
	out := filepath.Join(scratch, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	switch name {
	case "kernel":
		err = b.kernel(ctx, scratch, out)
	case "driver":
		err = b.driver(ctx, scratch, out)
	case "rootfs":
		err = b.rootfs(ctx, scratch, out)
	case "initramfs":
		err = b.initramfs(ctx, scratch, out)
	case "image":
		err = b.image(ctx, scratch, out)
	default:
		err = fmt.Errorf("stage %s is not implemented", name)
	}
	if err != nil {
		if b.opt.Keep {
			err = fmt.Errorf("%w\n(scratch kept at %s)", err, scratch)
		}
		return exitcode.Tag(exitcode.Build, fmt.Errorf("stage %s: %w", name, err))
	}
	return b.opt.Store.CommitOutput(s.Key, out)
}

// 1. Kernel: unpack the pinned source, merge fragments, compile, collect.
func (b *runner) kernel(ctx context.Context, scratch, out string) error {
	r := b.plan.Recipe
	src, err := b.unpack(ctx, lock.RoleKernelSource, filepath.Join(scratch, "src"))
	if err != nil {
		return err
	}
	var frags, patches []kernel.Fragment
	for _, f := range r.Kernel.Fragments {
		data, _, err := r.ReadData(f, kernel.Configs, kernel.ConfigsDir)
		if err != nil {
			return err
		}
		frags = append(frags, kernel.Fragment{Name: f, Data: data})
	}
	for _, f := range r.Kernel.Patches {
		data, _, err := r.ReadData(f, kernel.Configs, "patches")
		if err != nil {
			return err
		}
		patches = append(patches, kernel.Fragment{Name: f, Data: data})
	}
	epoch, err := b.epoch(ctx)
	if err != nil {
		return err
	}
	hintFile := filepath.Join(b.opt.Store.Root, "hints", "kernel-steps-"+r.Kernel.Base)
	hint, _ := readInt(hintFile)
	var cert []byte
	if ms := b.plan.ModSign; ms != nil {
		cert = ms.CertPEM
	}
	res, err := kernel.Build(ctx, kernel.Options{
		Source: src, Base: r.Kernel.Base, Fragments: frags, Patches: patches, ModuleSigCert: cert, Epoch: epoch,
		Jobs: b.opt.Jobs, Log: b.opt.Log, LogFile: filepath.Join(scratch, "kernel.log"), ObjectsHint: hint,
	}, out)
	if err != nil {
		return err
	}
	os.MkdirAll(filepath.Dir(hintFile), 0o755)
	os.WriteFile(hintFile, []byte(strconv.FormatInt(res.Steps, 10)), 0o644)
	fmt.Fprintf(b.opt.Log, "kernel: release %s\n", res.Release)
	return nil
}

// unpack extracts the (single) input of role into dir and returns the tree root.
func (b *runner) unpack(ctx context.Context, role, dir string) (string, error) {
	var in *lock.Input
	for i := range b.opt.Inputs {
		if b.opt.Inputs[i].Role == role {
			in = &b.opt.Inputs[i]
			break
		}
	}
	if in == nil {
		return "", fmt.Errorf("no pinned %s input", role)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(b.opt.Log, "unpacking %s\n", in.Name)
	return source.Unpack(ctx, b.opt.Store, *in, func(u string) string { return fetch.GitDir(b.opt.Store, u) }, dir)
}

// epoch is the build clock: the recipe's source_date_epoch, else the newest
// input's own date (a .deb's data.tar time, a git commit's committer time).
func (b *runner) epoch(ctx context.Context) (int64, error) {
	if b.epochVal > 0 {
		return b.epochVal, nil
	}
	e, err := b.deriveEpoch(ctx)
	b.epochVal = e
	return e, err
}

func (b *runner) deriveEpoch(ctx context.Context) (int64, error) {
	if e := b.plan.Recipe.SourceDateEpoch; e > 0 {
		return e, nil
	}
	var newest int64
	for _, in := range b.opt.Inputs {
		var t int64
		switch in.Kind {
		case "deb":
			f, err := os.Open(b.opt.Store.BlobPath(in.SHA256))
			if err != nil {
				return 0, err
			}
			t, err = debfile.DataTime(f)
			f.Close()
			if err != nil {
				return 0, fmt.Errorf("%s: %w", in.Name, err)
			}
		case "git":
			out, err := exec.CommandContext(ctx, "git", "--git-dir", fetch.GitDir(b.opt.Store, in.URL), "show", "-s", "--format=%ct", in.Commit).Output()
			if err != nil {
				return 0, fmt.Errorf("%s: reading commit time: %w", in.Name, err)
			}
			t, _ = strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		}
		newest = max(newest, t)
	}
	if newest == 0 {
		return 0, fmt.Errorf("cannot derive the build clock from the inputs: set source_date_epoch in the recipe")
	}
	return newest, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
