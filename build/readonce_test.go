package build

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/peerboot/peerboot/internal/opencount"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// TestDataReadOnce: planning a recipe opens each of its data files, and each
// image binary, exactly once, counted by the kernel (inotify): ReadData reads,
// MakePlan keys what it read, and the module certificate two stages key is one
// read. (A stage's run gets the plan's bytes, never a path.)
func TestDataReadOnce(t *testing.T) {
	dir, write := planFixture(t)
	write("module.crt", testCert(t, 1))
	write("module.key", "key v1")
	write("pcr.key", testRSAKey(t))
	b, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
	write("t.toml", string(b)+"[sign]\nmodule_key = \"file:module.key\"\nmodule_cert = \"file:module.crt\"\npcr_key = \"file:pcr.key\"\n")
	files := []string{"local.config", "0001-local.patch", "module.crt", "module.key", "pcr.key", "init", "p2pcheck"}

	opens := opencount.Watch(t, dir)
	r, err := recipe.Load(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	ins, un, err := lock.Inputs(r, nil, func(string) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	d, err := ReadData(r, Tools{Init: filepath.Join(dir, "init"), P2PCheck: filepath.Join(dir, "p2pcheck")})
	if err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(d, ins, un, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := opens.Opens(t)
	for _, f := range files {
		if got[f] != 1 {
			t.Errorf("%s opened %d times, want once", f, got[f])
		}
	}
	for f, n := range got {
		if f != "t.toml" && !slices.Contains(files, f) {
			t.Errorf("%s opened %d times, want never (not a data file of the recipe)", f, n)
		}
	}
	// And the plan keyed every one of them.
	var keyed []string
	for _, s := range p.Stages {
		for _, it := range s.Items {
			if it.Kind == "data" {
				keyed = append(keyed, it.Name)
			}
		}
	}
	for _, want := range []string{"fragment ./local.config", "patch ./0001-local.patch", moduleCertDatum, moduleKeyDatum, pcrKeyDatum} {
		if !slices.Contains(keyed, want) {
			t.Errorf("no stage keys %q (keyed: %v)", want, keyed)
		}
	}
}
