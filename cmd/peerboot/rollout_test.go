package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRolloutCommand runs the real serve with a rollout and steers it with the real
// rollout command: status, halt, resume, promote, clear, their --json, exit codes.
func TestRolloutCommand(t *testing.T) {
	out := t.TempDir()
	fakeOutput(t, out, "default")
	inv := filepath.Join(t.TempDir(), "rack.toml")
	os.WriteFile(inv, []byte(`default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 2
window = "6h"
[[node]]
mac = "52:54:00:12:34:56"
channel = "canary"
`), 0o644)
	addr := startServe(t, "--out", out, "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "r.db"),
		"--inventory", inv, "--page-token", "sekrit")
	opFile := filepath.Join(out, "operator.token")
	if fi, err := os.Stat(opFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("serve did not create the operator token 0600: %v %v", fi, err)
	}
	// Without the operator token a write is refused by the command (no file) and
	// by the server (the page token is no operator's).
	if _, e, code := run(t, "rollout", "halt", "default", "--server", "http://"+addr, "--token", "sekrit", "--operator-token", filepath.Join(t.TempDir(), "none")); code != 2 || !strings.Contains(e, "writes need the file peerboot serve created") {
		t.Errorf("halt without the operator token file: exit %d %s", code, e)
	}
	forged := filepath.Join(t.TempDir(), "forged.token")
	os.WriteFile(forged, []byte(strings.Repeat("f", 64)+"\n"), 0o600)
	if _, e, code := run(t, "rollout", "halt", "default", "--server", "http://"+addr, "--operator-token", forged); code != 2 || !strings.Contains(e, "401") {
		t.Errorf("halt with another token: exit %d %s", code, e)
	}
	os.Chmod(forged, 0o644)
	if _, e, code := run(t, "rollout", "halt", "default", "--server", "http://"+addr, "--operator-token", forged); code != 2 || !strings.Contains(e, "chmod 600") {
		t.Errorf("halt with a token file others can read: exit %d %s", code, e)
	}
	srv := []string{"--server", "http://" + addr, "--token", "sekrit", "--operator-token", opFile}
	rollout := func(args ...string) (string, string, int) {
		t.Helper()
		return run(t, append(append([]string{"rollout"}, args...), srv...)...)
	}

	o, e, code := rollout("status")
	if code != 0 || !regexp.MustCompile(`recipe default: running \(promote after 2 passes within 6h0m0s\)\n  channel canary +[0-9a-f]{16}\n  channel stable +[0-9a-f]{16}`).MatchString(o) {
		t.Fatalf("status: exit %d\n%s%s", code, o, e)
	}
	if _, e, code := rollout("halt", "default", "--reason", "disk swap"); code != 0 {
		t.Fatalf("halt: exit %d %s", code, e)
	}
	o, e, code = rollout("status", "default", "--json")
	var st rolloutStatusJSON
	if code != 9 || json.Unmarshal([]byte(o), &st) != nil || len(st.Rollouts) != 1 || !st.Rollouts[0].Halted || st.Rollouts[0].HaltReason != "disk swap" ||
		!strings.Contains(e, "the rollout of default is halted: disk swap") {
		t.Fatalf("status of a halted rollout: exit %d, want 9\n%s%s", code, o, e)
	}
	// The shape README documents, pinned whole (times vary; the fixture's build id does not).
	checkJSONGolden(t, "rollout-status", regexp.MustCompile(`"20\d\d-\d\d-\d\dT[^"]*"`).ReplaceAllString(o, `"TIME"`), addr, "ADDR")
	if _, e, code := rollout("halt", "default"); code != 2 || !strings.Contains(e, "409 Conflict") || !strings.Contains(e, "already halted") {
		t.Errorf("halting twice: exit %d %s", code, e)
	}
	o, e, code = rollout("resume", "default", "--json")
	if code != 0 || !strings.Contains(o, `"kind": "resume"`) {
		t.Errorf("resume --json: exit %d %s%s", code, o, e)
	}
	if _, e, code := rollout("promote", "default"); code != 2 || !strings.Contains(e, "every channel of default serves the same build") {
		t.Errorf("promote with nothing to promote: exit %d %s", code, e)
	}
	if _, e, code := rollout("clear", "52:54:00:12:34:56"); code != 2 || !strings.Contains(e, "404") {
		t.Errorf("clearing a node not held: exit %d %s", code, e)
	}
	if o, e, code := rollout("enroll", "52:54:00:12:34:56", "--for", "10m"); code != 0 || !strings.Contains(o, "enrollment open until") || !strings.Contains(o, "52:54:00:12:34:56") {
		t.Errorf("enroll: exit %d %s%s", code, o, e)
	}
	if _, e, code := rollout("enroll", "--for", "10000h"); code != 2 || !strings.Contains(e, "for: want a duration up to") {
		t.Errorf("enroll for too long: exit %d %s", code, e)
	}
	if _, e, code := rollout("ak-reset", "52:54:00:12:34:56"); code != 2 || !strings.Contains(e, "no AK on record") {
		t.Errorf("ak-reset of a node without an AK: exit %d %s", code, e)
	}
	if _, e, code := rollout("burn-in-stop", "52:54:00:12:34:56", "--reason", "x"); code != 2 || !strings.Contains(e, "404") || !strings.Contains(e, "node 52:54:00:12:34:56 is not burning in") {
		t.Errorf("burn-in-stop of a node not burning in: exit %d %s", code, e)
	}
	if _, e, code := run(t, "rollout", "enroll", "--server", "http://"+addr, "--operator-token", forged); code != 2 || !strings.Contains(e, "chmod 600") {
		t.Errorf("enroll without the operator token: exit %d %s", code, e)
	}
	if _, e, code := rollout("status", "nosuch"); code != 2 || !strings.Contains(e, `recipe "nosuch" has no [[rollout]]`) {
		t.Errorf("unknown recipe: exit %d %s", code, e)
	}
	if _, e, code := run(t, "rollout", "status", "--server", "http://"+addr, "--token", "wrong"); code != 2 || !strings.Contains(e, "401") {
		t.Errorf("wrong token: exit %d %s", code, e)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if _, e, code := run(t, "rollout", "status", "--server", "http://"+dead); code != 5 || !strings.Contains(e, "connection refused") {
		t.Errorf("no server: exit %d %s", code, e)
	}
	if _, e, code := run(t, "rollout", "promote"); code != 2 || !strings.Contains(e, "want 1 argument") {
		t.Errorf("promote without a recipe: exit %d %s", code, e)
	}
}
