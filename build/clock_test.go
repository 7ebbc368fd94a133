package build

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// Without source_date_epoch the build clock is the newest date among inputs,
// and a stage's key must cover every input its clock reads, or a newer input
// would change what the stage writes under the same key: a stale output
// reused. A clockOwn stage's clock reads only the inputs its key already
// covers (its own and those of the stages it reads), so a userspace bump
// leaves the kernel's key alone; a clockAll stage's clock reads every input,
// and its key carries a digest over all of them, so the same bump moves it
// even where the recipe is unchanged (a lock field re-pinned a package).
func TestClockFollowsItsInputs(t *testing.T) {
	dir, write := planFixture(t)
	b, err := os.ReadFile(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	write("t.toml", strings.Replace(string(b), "source_date_epoch = 1700000000\n", "", 1))
	r, err := recipe.Load(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if r.SourceDateEpoch != 0 {
		t.Fatalf("source_date_epoch %d, want none", r.SourceDateEpoch)
	}
	ins, un, err := lock.Inputs(r, nil, func(string) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	data := readData(t, r, Tools{Init: filepath.Join(dir, "init"), P2PCheck: filepath.Join(dir, "p2pcheck")})
	// One userspace package, as the lock pins it: the recipe names it, the
	// lock says which build of it.
	pkg := func(sum string) []lock.Input {
		return append(slices.Clone(ins), lock.Input{Role: lock.RoleUserspace, Name: "libc6_2.36-9", Kind: lock.KindDeb, SHA256: strings.Repeat(sum, 64)})
	}
	plan := func(ins []lock.Input) *Plan {
		t.Helper()
		p, err := MakePlan(data, ins, un, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	all := pkg("d")
	before, after := plan(all), plan(pkg("e"))

	// Which keys the re-pinned package moves: the userspace stage reads it,
	// the clockAll stages' clocks do, and the stages downstream of either.
	var moved []string
	for _, s := range before.Stages {
		if after.Stage(s.Name).Key != s.Key {
			moved = append(moved, string(s.Name))
		}
	}
	if want := "userspace config initramfs image"; strings.Join(moved, " ") != want {
		t.Errorf("a re-pinned userspace package moves %v, want %s", moved, want)
	}

	// Each clocked stage's clock reads only inputs its key covers; the
	// all-inputs clock line is in the keys of the clockAll stages alone.
	covered := map[StageName][]string{} // input digests a stage's key covers
	for _, s := range before.Stages {
		if s.Key == "" {
			t.Fatalf("stage %s unresolved: %v", s.Name, s.Unresolved)
		}
		for _, d := range s.def.Deps {
			covered[s.Name] = append(covered[s.Name], covered[d]...)
		}
		allClock := false
		for _, it := range s.Items {
			switch {
			case it.Kind == "input":
				covered[s.Name] = append(covered[s.Name], it.Value)
			case it.Kind == "clock" && it.Name == "newest of all inputs":
				allClock = true
			case it.Kind == "clock":
				t.Errorf("stage %s: clock line %s %s without source_date_epoch", s.Name, it.Name, it.Value)
			}
		}
		if allClock != (s.def.Clock == clockAll) {
			t.Errorf("stage %s (clock %d): its key has the all-inputs clock line: %v", s.Name, s.def.Clock, allClock)
		}
		if allClock {
			// Its key covers every input, through the clock line.
			for _, in := range all {
				covered[s.Name] = append(covered[s.Name], in.Digest())
			}
			if !slices.Equal(s.clockInputs, all) {
				t.Errorf("stage %s: its clock reads %d inputs, want all %d", s.Name, len(s.clockInputs), len(all))
			}
			continue
		}
		if s.def.Clock == clockNone {
			continue // no clock: its run reads none
		}
		for _, in := range s.clockInputs {
			if !slices.Contains(covered[s.Name], in.Digest()) {
				t.Errorf("stage %s: its clock reads %s %s, which its key does not cover", s.Name, in.Role, in.Name)
			}
		}
	}
}
