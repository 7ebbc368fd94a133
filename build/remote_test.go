package build

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/registrytest"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/stagecache"
	"github.com/peerboot/peerboot/store"
)

// remoteFixture plans planRecipe with a kernel source whose bytes are
// source, and returns the plan, its inputs, and a function that gives a new
// store holding that source (or, with false, an empty store).
func remoteFixture(t *testing.T, source []byte) (*Plan, []lock.Input, func(withInput bool) *store.Store) {
	t.Helper()
	dir, write := planFixture(t)
	sum := sha256.Sum256(source)
	body, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
	write("t.toml", strings.Replace(string(body), strings.Repeat("a", 64), hex.EncodeToString(sum[:]), 1))
	p, ins := fixturePlanInputs(t, dir, nil)
	newStore := func(withInput bool) *store.Store {
		st, err := store.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if withInput {
			if err := st.Put(context.Background(), bytes.NewReader(source), hex.EncodeToString(sum[:])); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	return p, ins, newStore
}

// fakeKernel replaces the kernel stage's run with a small one (the real one
// compiles Linux) that writes out and counts its runs.
func fakeKernel(p *Plan, out map[string]string, runs *int) {
	s := p.Stage(StageKernel)
	def := *s.def
	def.Run = func(ctx context.Context, sr *stageRun) error {
		*runs++
		for name, body := range out {
			path := filepath.Join(sr.Out, name)
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	s.def = &def
}

func ecKey(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The build loop with a remote cache, against a real registry and small
// stages: a built stage is pushed, a store that lacks it fetches it instead
// of building (without the stage's inputs), --check rebuilds a fetched stage
// and compares, and a refused stage is built locally (or, strict, exits 6).
func TestRemoteCacheBuild(t *testing.T) {
	reg := registrytest.Start(t)
	ctx := context.Background()
	trusted, stranger := ecKey(t), ecKey(t)
	p, ins, newStore := remoteFixture(t, []byte("linux source"))
	key := p.Stage(StageKernel).Key
	output := map[string]string{"bzImage": strings.Repeat("bz", 10000), "build/Makefile": "all:\n"}
	runs := 0
	fakeKernel(p, output, &runs)
	open := func(repo string, signer crypto.Signer, trust ...crypto.PublicKey) *stagecache.Cache {
		c, err := stagecache.Open("oci://"+reg.Host+"/"+repo, stagecache.Options{Signer: signer, Trust: trust})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cache := open("peerboot/cache", trusted, trusted.Public())
	var log bytes.Buffer
	run := func(st *store.Store, rem Remote, check bool) ([]Outcome, error) {
		log.Reset()
		opt := Options{Store: st, Inputs: ins, Until: StageKernel, Log: &log, Remote: rem}
		if check {
			opt.Check = map[StageName]bool{StageKernel: true}
		}
		return Run(ctx, p, opt)
	}

	// A builds and pushes.
	a := newStore(true)
	outs, err := run(a, Remote{To: cache}, false)
	if err != nil || runs != 1 || !outs[0].Pushed || outs[0].Cached {
		t.Fatalf("builder A: %+v, runs %d, %v\n%s", outs, runs, err, log.String())
	}
	// plan sees the remote hit from an empty store.
	b := newStore(false)
	pb, err := MakePlan(readData(t, p.Recipe, p.Tools), ins, nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := pb.AskRemote(ctx, cache); err != nil {
		t.Fatal(err)
	}
	if s := pb.Stage(StageKernel); s.Status() != "remote" || pb.Stage(StageDriver).Status() != "run" {
		t.Errorf("plan: kernel %s, driver %s; want remote, run", s.Status(), pb.Stage(StageDriver).Status())
	}
	// B has neither the stage nor its input: it fetches, builds nothing.
	outs, err = run(b, Remote{From: cache, To: cache}, false)
	if err != nil || runs != 1 || !outs[0].Pulled || outs[0].PulledBytes == 0 || outs[0].Pushed {
		t.Fatalf("builder B: %+v, runs %d, %v\n%s", outs, runs, err, log.String())
	}
	if !strings.Contains(log.String(), "kernel: fetched from "+reg.Host+"/peerboot/cache") {
		t.Errorf("B's log does not say where the stage came from:\n%s", log.String())
	}
	ma, _ := os.ReadFile(filepath.Join(a.OutputDir(key), "MANIFEST"))
	mb, _ := os.ReadFile(filepath.Join(b.OutputDir(key), "MANIFEST"))
	if len(ma) == 0 || !bytes.Equal(ma, mb) {
		t.Errorf("B's output differs from A's:\n%s\n%s", ma, mb)
	}

	// --check on a fetched stage builds it again and compares: the same bytes pass...
	c := newStore(true)
	outs, err = run(c, Remote{From: cache}, true)
	if err != nil || runs != 2 || !outs[0].Checked || !outs[0].Pulled {
		t.Fatalf("--check of a fetched stage: %+v, runs %d, %v\n%s", outs, runs, err, log.String())
	}
	// ...and a build that differs from what the cache holds fails, exit 6.
	output["bzImage"] = "a kernel the key does not explain"
	_, err = run(newStore(true), Remote{From: cache}, true)
	if exitcode.Of(err) != int(exitcode.Integrity) || !strings.Contains(err.Error(), "bzImage: stored sha256") {
		t.Errorf("--check of a fetched stage a rebuild contradicts: %v (exit %d)", err, exitcode.Of(err))
	}
	output["bzImage"] = strings.Repeat("bz", 10000)

	// A stage signed by a key not trusted: refused, built here, the build good.
	foreign := open("peerboot/foreign", stranger, stranger.Public())
	if _, err := run(newStore(true), Remote{To: foreign}, false); err != nil {
		t.Fatal(err)
	}
	d := newStore(true)
	before := runs
	outs, err = run(d, Remote{From: open("peerboot/foreign", nil, trusted.Public())}, false)
	if err != nil || runs != before+1 || outs[0].Pulled || outs[0].Refused == "" || !d.HasOutput(key) {
		t.Fatalf("refused stage: %+v, runs %d, %v\n%s", outs, runs-before, err, log.String())
	}
	if !strings.Contains(log.String(), "refused: no signature by a trusted key") || !strings.Contains(log.String(), "building it locally") {
		t.Errorf("the log does not say why the stage was refused:\n%s", log.String())
	}
	// --cache-strict: exit 6, nothing built, nothing stored.
	e := newStore(true)
	before = runs
	_, err = run(e, Remote{From: open("peerboot/foreign", nil, trusted.Public()), Strict: true}, false)
	if exitcode.Of(err) != int(exitcode.Integrity) || runs != before || e.HasOutput(key) {
		t.Errorf("strict: %v (exit %d), runs %d, stored %v", err, exitcode.Of(err), runs-before, e.HasOutput(key))
	}

	// A cache that cannot be reached is a warning: the stage is built.
	down, err := stagecache.Open("oci://127.0.0.1:1/peerboot/cache", stagecache.Options{Trust: []crypto.PublicKey{trusted.Public()}})
	if err != nil {
		t.Fatal(err)
	}
	before = runs
	if _, err := run(newStore(true), Remote{From: down}, false); err != nil || runs != before+1 || !strings.Contains(log.String(), "building without the remote cache") {
		t.Errorf("unreachable cache: %v, runs %d\n%s", err, runs-before, log.String())
	}
}
