package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/internal/testguard"
)

// A warm rebuild after a recipe edit gives the bytes of a build whose stages
// start empty: after editing description and kernel.cmdline in a copy of the
// default recipe, the build reuses what the edit does not touch; then
// `build --check` builds every stage but the two compiles again from empty
// scratch and compares each file with what the store holds (a stage whose key
// missed a field it writes would be reused stale and differ here), and the
// published SHA256SUMS must be those of the first build. `plan --why` names the
// two fields.
func TestWarmRebuildEqualsFresh(t *testing.T) {
	testguard.Short(t, "builds the default image (a store hit after TestBuildAndBootDefault)")
	dir := t.TempDir()
	recipe := filepath.Join(dir, "default.toml")
	for _, f := range []string{"default.toml", "default.lock"} {
		b, err := os.ReadFile(filepath.Join("..", "recipes", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "default.toml" {
			s := strings.Replace(string(b), `cmdline = "console=ttyS0,115200 panic=-1"`, `cmdline = "console=ttyS0,115200 panic=-1 quiet"`, 1)
			// A new edit every run, so the store cannot already hold its stages.
			s = strings.Replace(s, `description = "`, fmt.Sprintf(`description = "edited: %d `, time.Now().UnixNano()), 1)
			if s == string(b) || !strings.Contains(s, "quiet") || !strings.Contains(s, "edited: ") {
				t.Fatal("the default recipe no longer has the lines this test edits")
			}
			b = []byte(s)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", filepath.Join(dir, "base")); code != 0 {
		t.Fatalf("build of the default recipe: exit %d\n%s", code, out)
	}
	why, code := peerboot(t, "plan", "--why", recipe)
	t.Logf("plan --why after the edit:\n%s", why)
	for _, want := range []string{"recipe field description:", "recipe field kernel.cmdline:", "kernel    unchanged", "userspace unchanged"} {
		if code != 0 || !strings.Contains(why, want) {
			t.Errorf("plan --why (exit %d) lacks %q", code, want)
		}
	}
	warm := filepath.Join(dir, "warm")
	out, code := peerboot(t, "build", recipe, "--out", warm)
	t.Logf("warm build after the edit:\n%s", out)
	if code != 0 {
		t.Fatalf("warm build: exit %d", code)
	}
	// The driver is not even asked about: the modules layer that reads it is in the store.
	for st, want := range map[string]string{"kernel": "cached", "driver": "unused", "userspace": "cached", "modules": "cached"} {
		if !strings.Contains(lineOf(out, st), want) {
			t.Errorf("stage %s after an edit it does not read: want %s:\n%s", st, want, lineOf(out, st))
		}
	}
	fresh := filepath.Join(dir, "fresh")
	out, code = peerboot(t, "build", recipe, "--out", fresh, "--check", "userspace,modules,config,initramfs,image")
	t.Logf("build --check:\n%s", out)
	if code != 0 {
		t.Fatalf("build --check: exit %d: a stage built from empty differs from the one the store reused", code)
	}
	a, _ := os.ReadFile(filepath.Join(warm, "default", "SHA256SUMS"))
	b, _ := os.ReadFile(filepath.Join(fresh, "default", "SHA256SUMS"))
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("SHA256SUMS differ:\nwarm:\n%s\nfresh:\n%s", a, b)
	}
	f, err := os.Open(filepath.Join(warm, "default", "pxe", "initrd.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inImage string
	err = initramfs.ReadFiles(f, func(p string) bool { return p == "etc/peerboot/recipe.toml" }, func(_ string, b []byte) error {
		inImage = string(b)
		return nil
	})
	if err != nil || !strings.Contains(inImage, "edited: ") || !strings.Contains(inImage, "panic=-1 quiet") {
		t.Errorf("the warm image's /etc/peerboot/recipe.toml does not carry the edit (%v):\n%s", err, inImage)
	}
}

func lineOf(out, stage string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, stage+" ") {
			return l
		}
	}
	return ""
}
