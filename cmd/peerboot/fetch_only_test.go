package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fetch --only driver-source fetches the driver's git commit alone (what `make
// test-trees` does for the driver tests), from the mirror PEERBOOT_GIT_MIRRORS
// names; without --only the placeholder URL inputs are fetched too and fail.
func TestFetchOnly(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "nvidia")
	gitRun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(repo, 0o755)
	gitRun("init", "-q")
	os.WriteFile(filepath.Join(repo, "README"), []byte("tree\n"), 0o644)
	gitRun("add", "README")
	gitRun("commit", "-q", "-m", "one")
	commit := gitRun("rev-parse", "HEAD")
	const cloneURL = "https://git.invalid/open-gpu-kernel-modules.git"
	zero := strings.Repeat("0", 64)
	rp := filepath.Join(dir, "tree.toml")
	os.WriteFile(rp, []byte(`name = "tree"
[kernel]
source = { url = "https://example.invalid/k.tar.xz", sha256 = "`+zero+`" }
[driver]
version = "580.95.05"
source = { git = "`+cloneURL+`", commit = "`+commit+`" }
[outputs]
efi_stub = { url = "https://example.invalid/s.deb", sha256 = "`+zero+`" }
`), 0o644)
	env := []string{"PEERBOOT_GIT_MIRRORS=" + cloneURL + "=" + repo}
	cache := filepath.Join(dir, "cache")
	out, errs, code := runEnv(t, env, "--cache", cache, "fetch", "--only", "driver-source", rp)
	if code != 0 || !strings.HasPrefix(out, "1 inputs: 0 already in the store, 1 downloaded") {
		t.Fatalf("fetch --only driver-source: exit %d\n%s%s", code, out, errs)
	}
	if out, errs, code := runEnv(t, env, "--cache", cache, "fetch", "--only", "driver-source", rp); code != 0 || !strings.HasPrefix(out, "1 inputs: 1 already in the store") {
		t.Errorf("again: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = runEnv(t, env, "--cache", cache, "fetch", "--only", "driver-source", "--json", rp)
	var j fetchJSON
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil || j != (fetchJSON{Recipe: rp, Inputs: 1, Present: 1}) {
		t.Errorf("fetch --json: exit %d, %v, %+v\n%s%s", code, err, j, out, errs)
	}
	// A failure under --json is a JSON document too.
	out, errs, code = runEnv(t, env, "--cache", cache, "fetch", "--json", rp)
	var e errorJSON
	if err := json.Unmarshal([]byte(out), &e); code != 5 || err != nil || e.Error.Code != 5 || e.Error.Class != "network" || !strings.Contains(e.Error.Message, "example.invalid") {
		t.Errorf("fetch --json of unreachable inputs: exit %d, %v\n%s%s", code, err, out, errs)
	}
	if _, errs, code := runEnv(t, env, "--cache", cache, "fetch", rp); code != 5 || !strings.Contains(errs, "example.invalid") {
		t.Errorf("fetch of every input: exit %d, want 5 (the placeholders cannot be fetched)\n%s", code, errs)
	}
}
