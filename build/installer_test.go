package build

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// A stage that does not run does not need its inputs in the store: the kernel
// and driver stages build without NVIDIA's installer, which only the userspace
// stage reads; that stage, asked for, names the `store import` path.
func TestOnlyRunningStagesNeedTheirInputs(t *testing.T) {
	run := strings.Repeat("d", 64)
	p, r, ins := planOf(t, `
[userspace]
installer = { url = "https://example.invalid/NVIDIA-Linux-x86_64-535.261.03.run", sha256 = "`+run+`" }
`)
	if us := p.Stage("userspace"); !strings.Contains(itemsText(us.Items), "input installer NVIDIA-Linux-x86_64-535.261.03.run sha256:"+run) {
		t.Fatalf("the userspace key does not cover the installer:\n%s", itemsText(us.Items))
	}
	st, _ := store.Open(t.TempDir())
	// The kernel stage's output is in the store (as after a build elsewhere).
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "marker"), []byte("kernel"), 0o644)
	if err := st.CommitOutput(p.Stage("kernel").Key, out); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), p, Options{Store: st, Inputs: ins, Until: "kernel", Log: io.Discard}); err != nil {
		t.Fatalf("--stage kernel needed more than the kernel stage: %v", err)
	}
	_, err := Run(context.Background(), p, Options{Store: st, Inputs: ins, Until: "userspace", Log: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "stage userspace: input NVIDIA-Linux-x86_64-535.261.03.run is not in the store") ||
		!strings.Contains(err.Error(), "peerboot store import "+r.Path+" NVIDIA-Linux-x86_64-535.261.03.run") {
		t.Fatalf("got %v", err)
	}
}

// planOf plans planRecipe plus extra (TOML) in a temp dir with stand-in
// data files, resolving every input: the plan, its recipe, its inputs.
func planOf(t *testing.T, extra string) (*Plan, *recipe.Resolved, []lock.Input) {
	t.Helper()
	dir := t.TempDir()
	body := strings.NewReplacer("%s", strings.Repeat("a", 64)).Replace(planRecipe) + extra
	os.WriteFile(filepath.Join(dir, "t.toml"), []byte(body), 0o644)
	for _, f := range []string{"local.config", "0001-local.patch", "init", "p2pcheck"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	r, err := recipe.Load(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := lock.Pin(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	ins, un, err := lock.Inputs(r, f, func(string) (string, error) { return "", nil })
	if err != nil || len(un) != 0 {
		t.Fatalf("inputs %v unresolved %v: %v", ins, un, err)
	}
	p, err := MakePlan(readData(t, r, Tools{Init: filepath.Join(dir, "init"), P2PCheck: filepath.Join(dir, "p2pcheck")}), ins, un, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, r, ins
}

func itemsText(items []Item) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString(it.Kind + " " + it.Name + " " + it.Value + "\n")
	}
	return b.String()
}
