package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/stagecache"
)

// Remote is how a build shares stage outputs through registries
// (stagecache): From is asked for a stage the store lacks before it is
// built, To receives every stage the store holds once the build is done.
type Remote struct {
	From *stagecache.Cache
	To   *stagecache.Cache
	// Strict makes a refused stage (unsigned, signed by another key, altered)
	// fail the build (exit 6) instead of being built locally.
	Strict bool
}

// RecordJSON is the stage's plan record (its name, key and key lines), as the
// remote cache annotates a pushed stage with it.
func (s *Stage) RecordJSON() []byte {
	b, _ := json.Marshal(stageRecord{string(s.Name), s.Key, s.Items}) // plain strings: cannot fail
	return b
}

// AskRemote marks the stages the store lacks and from holds (Stage.Remote):
// what `plan` shows as remote hits. Only the tag is asked; a pull still
// checks the signature and every byte.
func (p *Plan) AskRemote(ctx context.Context, from *stagecache.Cache) error {
	for _, s := range p.Stages {
		if s.Key == "" || s.Cached {
			continue
		}
		ok, err := from.Has(ctx, s.Key)
		if err != nil {
			return exitcode.Tag(exitcode.Network, err)
		}
		s.Remote = ok
	}
	return nil
}

// pull fetches s from the remote cache into the store. It says whether the
// store now holds s; a refused stage is logged and built locally, or with
// Strict fails the build. A cache that cannot be reached is logged once and
// not asked again.
func (r *remoteRun) pull(ctx context.Context, opt Options, s *Stage, clock *buildClock) (bool, error) {
	if opt.Remote.From == nil || r.fromDown {
		return false, nil
	}
	start := time.Now()
	got, err := opt.Remote.From.Pull(ctx, opt.Store, s.Key)
	defer func() { r.pullTime[s.Name] = time.Since(start) }()
	var ref *stagecache.RefusedError
	switch {
	case errors.As(err, &ref):
		r.refused[s.Name] = ref.Err.Error()
		if opt.Remote.Strict {
			return false, exitcode.Tag(exitcode.Integrity, fmt.Errorf("stage %s: %w (--cache-strict)", s.Name, err))
		}
		fmt.Fprintf(opt.Log, "%s: %v: building it locally\n", s.Name, err)
		return false, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case err != nil:
		r.fromDown = true
		fmt.Fprintf(opt.Log, "warning: %v: building without the remote cache\n", err)
		return false, nil
	case got == nil:
		return false, nil
	}
	for d, t := range got.Dates {
		if _, ok := clock.dates[d]; !ok {
			clock.dates[d] = t // signed with the stage: its puller needs no input to know the clock
		}
	}
	r.pulled[s.Name] = got.Bytes
	fmt.Fprintf(opt.Log, "%s: fetched from %s (%s, signed by key %s) (%s)\n", s.Name, opt.Remote.From.Ref, progress.Bytes(got.Bytes), got.SignedBy, s.Key)
	return true, nil
}

// push sends s (in the store) to the remote cache with the dates of the
// inputs its clock reads. A failed push is a warning: the build itself is good.
func (r *remoteRun) push(ctx context.Context, opt Options, s *Stage, clock *buildClock) {
	if opt.Remote.To == nil || !opt.Store.HasOutput(s.Key) {
		return
	}
	e := stagecache.Entry{Key: s.Key, Plan: s.RecordJSON()}
	if s.def.Clock != clockNone && clock.recipe.SourceDateEpoch == 0 {
		e.Dates = map[string]int64{}
		for _, in := range s.clockInputs {
			t, err := clock.dateOf(ctx, in)
			if err != nil {
				e.Dates = nil // a puller reads the inputs for its clock instead
				break
			}
			e.Dates[in.Digest()] = t
		}
	}
	res, err := opt.Remote.To.Push(ctx, opt.Store, e)
	if err != nil {
		if ctx.Err() == nil {
			r.pushErrors[s.Name] = err.Error()
			fmt.Fprintf(opt.Log, "warning: %s: not pushed to the remote cache: %v\n", s.Name, err)
		}
		return
	}
	if res.Present {
		return
	}
	r.pushed[s.Name] = res.Uploaded
	fmt.Fprintf(opt.Log, "%s: pushed to %s (%s sent, %d blobs already there) (%s)\n", s.Name, opt.Remote.To.Ref, progress.Bytes(res.Uploaded), res.Reused, s.Key)
}

// remoteRun is one build's dealings with the remote caches.
type remoteRun struct {
	pulled     map[StageName]int64 // stage -> tree bytes fetched
	pullTime   map[StageName]time.Duration
	pushed     map[StageName]int64  // stage -> bytes sent
	refused    map[StageName]string // stage -> why
	pushErrors map[StageName]string
	fromDown   bool
}

func newRemoteRun() *remoteRun {
	return &remoteRun{pulled: map[StageName]int64{}, pullTime: map[StageName]time.Duration{}, pushed: map[StageName]int64{}, refused: map[StageName]string{}, pushErrors: map[StageName]string{}}
}

// Push sends every stage of p the store holds to opt.Remote.To, as a build
// does after its last stage, and builds nothing: it only reads the store, so
// a warm store seeds a cache (`peerboot store push`).
func Push(ctx context.Context, p *Plan, opt Options) ([]Outcome, error) {
	clock := &buildClock{recipe: p.Recipe, store: opt.Store, dates: map[string]int64{}}
	rr := newRemoteRun()
	var outs []Outcome
	for _, s := range p.Stages {
		if s.Key == "" || !opt.Store.HasOutput(s.Key) {
			continue
		}
		start := time.Now()
		rr.push(ctx, opt, s, clock)
		if err := ctx.Err(); err != nil {
			return outs, err
		}
		o := Outcome{Stage: string(s.Name), Key: s.Key, Cached: true, Dir: opt.Store.OutputDir(s.Key), PushError: rr.pushErrors[s.Name]}
		o.PushedBytes, o.Pushed = rr.pushed[s.Name]
		o.Duration = time.Since(start)
		outs = append(outs, o)
	}
	return outs, nil
}
