package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/internal/testguard"
)

var peerboot string

func TestMain(m *testing.M) {
	dir := testbin.MustBuildTemp(map[string]string{"peerboot": ".", "peerboot-init": "../peerboot-init", "p2pcheck": "../p2pcheck"})
	peerboot = filepath.Join(dir, "peerboot")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run executes the real binary and returns stdout, stderr and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	out, errs, code, err := testbin.Run(peerboot, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out, errs, code
}

// The acceptance path on a fresh store: lock, fetch, fetch again (nothing
// downloaded), verify; then a tampered entry is named and replaced.
func TestFreshStoreLockFetchTamper(t *testing.T) {
	testguard.Short(t, "downloads ~214 MiB from the Debian mirror")
	dir := t.TempDir()
	recipeFile := filepath.Join(dir, "default.toml")
	src, _ := os.ReadFile("../../recipes/default.toml")
	os.WriteFile(recipeFile, src, 0o644)
	cache := filepath.Join(dir, "cache")

	if _, errs, code := run(t, "--cache", cache, "fetch", recipeFile); code != 4 {
		t.Fatalf("fetch without a lock: exit %d, want 4 (stale)\n%s", code, errs)
	}
	if out, errs, code := run(t, "--cache", cache, "lock", recipeFile); code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", code, out, errs)
	}
	committed, _ := os.ReadFile("../../recipes/default.lock")
	fresh, _ := os.ReadFile(filepath.Join(dir, "default.lock"))
	if len(fresh) == 0 {
		t.Fatal("lock wrote nothing")
	}
	if !bytes.Equal(committed, fresh) {
		t.Logf("note: recipes/default.lock differs from a fresh resolve (the archive moved on); `peerboot lock` refreshes it")
	}
	out, errs, code := run(t, "--cache", cache, "fetch", recipeFile)
	if code != 0 || !regexp.MustCompile(`^\d+ inputs: 0 already in the store, \d+ downloaded`).MatchString(out) {
		t.Fatalf("first fetch: exit %d\n%s%s", code, out, errs)
	}
	out, _, code = run(t, "--cache", cache, "fetch", recipeFile)
	if code != 0 || !strings.Contains(out, "0 downloaded (0 B)") {
		t.Fatalf("second fetch should download nothing: exit %d\n%s", code, out)
	}
	if out, _, code := run(t, "--cache", cache, "store", "verify"); code != 0 {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	blobs, _ := filepath.Glob(filepath.Join(cache, "blobs", "sha256", "*", "*"))
	victim := blobs[len(blobs)/2]
	raw, _ := os.ReadFile(victim)
	raw[len(raw)/2] ^= 0x40
	os.WriteFile(victim, raw, 0o644)
	out, _, code = run(t, "--cache", cache, "store", "verify")
	if code != 6 || !strings.Contains(out, victim) || !strings.Contains(out, "corrupt") {
		t.Fatalf("verify after tamper: exit %d, want 6 naming %s\n%s", code, victim, out)
	}
	out, _, code = run(t, "--cache", cache, "fetch", recipeFile)
	if code != 0 || !strings.Contains(out, "1 corrupt entries replaced") {
		t.Fatalf("fetch after tamper: exit %d\n%s", code, out)
	}
	if out, _, code := run(t, "--cache", cache, "store", "verify"); code != 0 {
		t.Fatalf("verify after refetch: exit %d\n%s", code, out)
	}
	out, _, code = run(t, "--cache", cache, "plan", recipeFile)
	if code != 0 || strings.Contains(out, "unresolved") || !strings.Contains(out, "8. image") {
		t.Fatalf("plan of a locked recipe: exit %d\n%s", code, out)
	}
}

func TestPlanPlatformRecipes(t *testing.T) {
	for _, name := range []string{"xeon-8gpu", "epyc-4gpu", "default"} {
		out, errs, code := run(t, "--cache", t.TempDir(), "plan", "../../recipes/"+name+".toml")
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", name, code, errs)
		}
		for _, stage := range []string{"1. kernel", "2. driver", "3. userspace", "4. modules", "5. tools", "6. config", "7. initramfs", "8. image"} {
			if !strings.Contains(out, stage) {
				t.Errorf("%s: plan lacks %q\n%s", name, stage, out)
			}
		}
	}
	// Without its lock file a platform recipe still plans, naming what is
	// unresolved, and exits 4 (stale) saying the lock is missing.
	dir := t.TempDir()
	for _, f := range []string{"xeon-8gpu.toml", "drivers/550.163.01-p2p.toml", "drivers/linux-6.12-base.config", "shared/pcie4-4090-thresholds.toml"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		b, _ := os.ReadFile("../../recipes/" + f)
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	out, errs, code := run(t, "--cache", t.TempDir(), "plan", filepath.Join(dir, "xeon-8gpu.toml"))
	if code != 4 || !strings.Contains(out, "unresolved: kernel-source linux-source-6.12") || !strings.Contains(out, "git:23e9e7621487fe632040a370249f690a456967dd") ||
		!strings.Contains(errs, "xeon-8gpu.lock: no lock file: run `peerboot lock "+filepath.Join(dir, "xeon-8gpu.toml")+"`") {
		t.Fatalf("unlocked plan: exit %d, want 4\n%s%s", code, out, errs)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[platform]\ngpus = -1\n"), 0o644)
	cases := []struct {
		args []string
		code int
		text string
	}{
		{[]string{"plan", bad}, 3, "bad.toml:2: platform.gpus: want 0..16, got -1"},
		{[]string{"plan", "--no-such-flag"}, 2, "unknown flag"},
		{[]string{"version", "extra"}, 2, "want 0 argument(s), got 1"},
		{[]string{"plan", filepath.Join(dir, "absent.toml")}, 3, "no such file"},
		{[]string{"run", "--iso", "--pxe", dir}, 2, "choose one of --uefi, --iso, --pxe and --uefi-pxe"},
		{[]string{"run", "--iso", "--efi", bad}, 2, "--efi boots a UKI from a disk, not --iso"},
	}
	for _, c := range cases {
		_, errs, code := run(t, append([]string{"--cache", dir}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.text) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", c.args, code, errs, c.code, c.text)
		}
	}
}
