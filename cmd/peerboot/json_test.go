package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

var update = flag.Bool("update", false, "rewrite the --json golden files in testdata/json")

// runEnv runs the real binary with extra environment variables.
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(peerboot, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// checkJSONGolden checks that out is one JSON document and equals the golden file
// once the given replacements are made (temporary paths, host facts).
func checkJSONGolden(t *testing.T, name, out string, repl ...string) {
	t.Helper()
	if !json.Valid([]byte(regexp.MustCompile(`: N\b`).ReplaceAllString(out, ": 0"))) || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("%s: not one JSON document ending in a newline:\n%s", name, out)
	}
	got := strings.NewReplacer(repl...).Replace(out)
	golden := filepath.Join("testdata", "json", name+".golden")
	if *update {
		os.MkdirAll(filepath.Dir(golden), 0o755)
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/peerboot/ -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test ./cmd/peerboot/ -run %s -update after checking):\n%s", name, golden, t.Name(), got)
	}
}

// Every --json output has the shape README documents; each is checked whole
// against a golden file.
func TestJSONOutputs(t *testing.T) {
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	// The image binaries plan keys: fixed bytes, so the keys are too.
	tools := filepath.Join(dir, "tools")
	os.MkdirAll(tools, 0o755)
	os.WriteFile(filepath.Join(tools, "peerboot-init"), []byte("init v1"), 0o755)
	os.WriteFile(filepath.Join(tools, "p2pcheck"), []byte("p2pcheck v1"), 0o755)
	env := []string{"PEERBOOT_TOOLS_DIR=" + tools}
	a := newArchive(t)
	locked := lockRecipe(dir, "locked", a.srv.URL+"/debian", "good", a.keyring, "hello")
	os.WriteFile(locked, append([]byte("source_date_epoch = 1700000000\n"), mustRead(t, locked)...), 0o644)
	repl := []string{dir, "DIR", a.srv.URL, "ARCHIVE"}

	t.Run("version", func(t *testing.T) {
		out, errs, code := run(t, "version", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		checkJSONGolden(t, "version", out, `"`+runtime.Version()+`"`, `"GO"`, `"`+runtime.GOOS+`"`, `"OS"`, `"`+runtime.GOARCH+`"`, `"ARCH"`)
		if flagOut, _, _ := run(t, "--version"); !strings.HasPrefix(flagOut, "peerboot dev (") {
			t.Errorf("--version printed %q", flagOut)
		}
	})
	t.Run("exit-codes", func(t *testing.T) {
		out, errs, code := run(t, "exit-codes", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		checkJSONGolden(t, "exit-codes", out)
	})
	t.Run("lock", func(t *testing.T) {
		out, errs, code := runEnv(t, env, "--cache", cache, "lock", "--json", locked)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		checkJSONGolden(t, "lock", out, repl...)
		out, _, code = runEnv(t, env, "--cache", cache, "lock", "--check", "--json", locked)
		if code != 0 || !strings.Contains(out, `"state": "up-to-date"`) {
			t.Errorf("lock --check --json: exit %d\n%s", code, out)
		}
	})
	t.Run("plan", func(t *testing.T) {
		// No [[repo]] (the archive's port would enter the digests): URL sources, no lock needed.
		noRepo := filepath.Join(dir, "norepo.toml")
		body := regexp.MustCompile(`(?s)\[\[repo\]\].*?\[kernel\]`).ReplaceAllString(string(mustRead(t, locked)), "[kernel]")
		body = strings.Replace(body, `efi_stub = { deb = "hello" }`, `efi_stub = { url = "https://example.invalid/stub.deb", sha256 = "`+strings.Repeat("b", 64)+`" }`, 1)
		os.WriteFile(noRepo, []byte(body), 0o644)
		out, errs, code := runEnv(t, env, "--cache", cache, "plan", "--json", noRepo)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		// Digests and stage versions change with every fragment, overlay file and
		// stage edit; the golden is about the shape, so they are masked.
		out = regexp.MustCompile(`[0-9a-f]{64}`).ReplaceAllString(out, "HEX")
		out = regexp.MustCompile(`"version": [0-9]+`).ReplaceAllString(out, `"version": N`)
		checkJSONGolden(t, "plan", out, repl...)
	})
	t.Run("doctor", func(t *testing.T) {
		out, _, code := run(t, "--cache", filepath.Join(t.TempDir(), "store"), "doctor", "--json")
		var j doctorJSON
		if err := json.Unmarshal([]byte(out), &j); err != nil || (code == 0) != j.OK || len(j.Needs) != len(hostNeeds) {
			t.Fatalf("doctor --json: exit %d, %v\n%s", code, err, out)
		}
		// What is installed is the host's business: the golden holds the list with
		// every need present (the shape; keys sorted by the re-encoding).
		var m map[string]any
		json.Unmarshal([]byte(out), &m)
		m["ok"], m["missing"], m["install"] = true, []any{}, ""
		for _, n := range m["needs"].([]any) {
			n.(map[string]any)["present"] = true
		}
		// So is the store's filesystem: TestDoctorStoreClones checks both answers.
		m["store"] = map[string]any{"path": "STORE", "filesystem": "FS", "clones": false, "why": "WHY"}
		norm, _ := json.MarshalIndent(m, "", "  ")
		checkJSONGolden(t, "doctor", string(norm)+"\n")
	})
	t.Run("doctor-packages", func(t *testing.T) {
		out, errs, code := run(t, "doctor", "--packages", "--for", "build,run", "--json")
		if code != 0 {
			t.Fatalf("doctor --packages --json: exit %d\n%s", code, errs)
		}
		checkJSONGolden(t, "doctor-packages", out)
	})
	t.Run("verify", func(t *testing.T) {
		keys := filepath.Join(dir, "keys")
		if _, errs, code := run(t, "keys", "init", keys); code != 0 {
			t.Fatalf("keys init: %s", errs)
		}
		outDir := filepath.Join(dir, "output")
		os.MkdirAll(outDir, 0o755)
		os.WriteFile(filepath.Join(outDir, "peerboot.efi"), []byte("uki"), 0o644)
		os.WriteFile(filepath.Join(outDir, "SHA256SUMS"), []byte("a8e3a7ab9b7ba2ac1ac1dc01d5b4e7e4b3df01a1e0b7b2a4bf4b2c3d1e2f3a4b  peerboot.efi\n"), 0o644)
		out, errs, code := run(t, "verify", "--json", outDir, "--key", filepath.Join(keys, "cosign.pub"))
		if code != 6 {
			t.Fatalf("verify of an unsigned output: exit %d, want 6: %s", code, errs)
		}
		checkJSONGolden(t, "verify", out, repl...)
	})
	t.Run("reports", func(t *testing.T) {
		disk := diskWithReport(t, selftest.Pass)
		out, errs, code := run(t, "report", "list", "--json", filepath.Dir(disk))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		// The report's size follows the report schema, not this command.
		checkJSONGolden(t, "reports", regexp.MustCompile(`"size": [0-9]+`).ReplaceAllString(out, `"size": N`), filepath.Dir(disk), "DIR")
		if again, _, _ := run(t, "reports", "--json", disk); again != strings.Replace(out, filepath.Dir(disk)+`/disk.img"`, disk+`"`, 1) {
			t.Errorf("`reports` (the alias) differs from `report list`:\n%s", again)
		}
	})
	t.Run("store", func(t *testing.T) {
		out, errs, code := run(t, "--cache", filepath.Join(dir, "empty"), "store", "verify", "--json")
		if code != 0 {
			t.Fatalf("store verify: exit %d: %s", code, errs)
		}
		gc, errs, code := run(t, "--cache", filepath.Join(dir, "empty"), "store", "gc", "--json")
		if code != 0 {
			t.Fatalf("store gc: exit %d: %s", code, errs)
		}
		// The lock pins hello_1.0-1 by a made-up digest; a file with it cannot exist,
		// so import the tools' init under a URL pin instead.
		pinned := filepath.Join(dir, "pinned.toml")
		initSum := fmt.Sprintf("%x", sha256.Sum256(mustRead(t, filepath.Join(tools, "peerboot-init"))))
		os.WriteFile(pinned, []byte(strings.Replace(string(mustRead(t, locked)), `source = { url = "https://example.invalid/linux.tar.xz", sha256 = "`+strings.Repeat("a", 64)+`" }`,
			`source = { url = "https://example.invalid/linux.tar.xz", sha256 = "`+initSum+`" }`, 1)), 0o644)
		os.WriteFile(filepath.Join(dir, "pinned.lock"), mustRead(t, filepath.Join(dir, "locked.lock")), 0o644)
		if _, errs, code := runEnv(t, env, "--cache", cache, "lock", pinned); code != 0 {
			t.Fatalf("lock pinned: %s", errs)
		}
		imp, errs, code := runEnv(t, env, "--cache", cache, "store", "import", "--json", pinned, filepath.Join(tools, "peerboot-init"))
		if code != 0 {
			t.Fatalf("store import RECIPE FILE: exit %d: %s", code, errs)
		}
		checkJSONGolden(t, "store", "{\"verify\": "+strings.TrimSpace(out)+",\n\"gc\": "+strings.TrimSpace(gc)+",\n\"import\": "+imp+"}\n", repl...)
		// -r still names the recipe.
		if _, errs, code := runEnv(t, env, "--cache", cache, "store", "import", "-r", pinned, filepath.Join(tools, "peerboot-init")); code != 0 {
			t.Errorf("store import -r RECIPE FILE: exit %d: %s", code, errs)
		}
	})
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
