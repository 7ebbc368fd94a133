package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

const rolloutNode = "52:54:00:12:34:56" // QEMU's default MAC

// The inventory of TestRolloutHaltsAndRollsBack: the one VM is the canary; one
// PASS on canary would promote a build to stable.
const rolloutInventory = `default = "default"

[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 1
window = "6h"

[[node]]
mac = "` + rolloutNode + `"
name = "canary-vm"
recipe = "default"
channel = "canary"
`

// gpuVariant is build B: the default recipe under the same name, promising one
// RTX 4090 that QEMU's machine does not have. Only the platform changes, so the
// kernel, driver, modules and userspace come from the store and the lock is the
// default one; the image's self-test judges against the promise and FAILs
// (gpus.count: 0 in sysfs, recipe 1).
const gpuVariant = `name = "default"

[platform]
gpus = 1
gpu_model = "RTX 4090"
vram = "24GiB"
bar1 = "32GiB"
`

// TestRolloutHaltsAndRollsBack is issue 17's end to end: build A of the default
// recipe passes in QEMU; build B of the same recipe fails by design; the VM, on
// the canary channel, PXE boots from `peerboot serve --out ROOT` three times:
//
//  1. only A is under ROOT, on every channel: the node gets A and PASSes;
//  2. B is moved in under ROOT and the running server takes it in: B enters canary
//     while stable keeps A; the node gets B and FAILs, which halts the rollout and
//     holds the node back on A;
//  3. after a restart of the server over the same database (the rollout lives in
//     it), the held-back node gets A, the last build that passed on it, and PASSes;
//     the hold stays (A is not newer than B) until `peerboot rollout clear`.
//
// Every step is asserted from the JSON API, and the build each boot ran also from
// the recipe digest in the node's own report.
func TestRolloutHaltsAndRollsBack(t *testing.T) {
	testguard.Short(t, "builds two images and boots QEMU three times")
	work := t.TempDir()
	root, outB := filepath.Join(work, "out"), filepath.Join(work, "b")
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", root); code != 0 {
		t.Fatalf("build A: exit %d\n%s", code, out)
	}
	variant := variantRecipe(t, work, "default-gpu", gpuVariant)
	out, code := peerboot(t, "build", variant, "--out", outB)
	if code != 0 {
		t.Fatalf("build B: exit %d\n%s", code, out)
	}
	// B rebuilds only what the platform promise reaches: the compiles and the
	// userspace come from the store (cached, or unused when B's image is there too).
	for _, st := range []string{"kernel", "driver", "userspace", "modules"} {
		if l := lineOf(out, st); l == "" || strings.Contains(l, "built") {
			t.Errorf("build B, stage %s: want it from the store:\n%s", st, out)
		}
	}
	inventory := filepath.Join(work, "inventory.toml")
	if err := os.WriteFile(inventory, []byte(rolloutInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(work, "reports.db")
	serve := func() *served { return startServe(t, "--out", root, "--db", db, "--inventory", inventory) }

	// Boot 1: A alone, on every channel (the recipe's first build).
	srv := serve()
	a := srv.buildIn(t, filepath.Join(root, "default"))
	ro := srv.rollout(t, "default")
	if ro.channel("canary") != a.ID || ro.channel("stable") != a.ID {
		t.Fatalf("the first build must be on every channel: %+v (A is %s)", ro.Channels, a.ID)
	}
	srv.rolloutBoot(t, "boot 1", a, selftest.Pass)
	ro = srv.rollout(t, "default")
	if c := ro.counts(a.ID); c.Pass != 1 || c.Fail != 0 {
		t.Errorf("after boot 1, build A counts %+v, want pass 1 fail 0", c)
	}
	if ro.Halted || len(ro.Held) != 0 {
		t.Errorf("after a PASS: halted %v, held %+v", ro.Halted, ro.Held)
	}

	// Boot 2: B appears under --out; it enters canary, stable keeps A.
	dirB := filepath.Join(root, "default-gpu")
	if err := os.Rename(filepath.Join(outB, "default"), dirB); err != nil {
		t.Fatal(err)
	}
	b := srv.buildIn(t, dirB)
	if b.ID == a.ID || b.RecipeDigest == a.RecipeDigest {
		t.Fatalf("build B is A again: %+v", b)
	}
	ro = srv.rollout(t, "default")
	if ro.channel("canary") != b.ID || ro.channel("stable") != a.ID {
		t.Fatalf("after adding B: channels %+v, want canary %s (B), stable %s (A)", ro.Channels, b.ID, a.ID)
	}
	r := srv.rolloutBoot(t, "boot 2", b, selftest.Fail)
	if !hasFinding(r, "gpus.count", selftest.SevFail) {
		t.Errorf("B failed, but not on its GPU promise:\n%s", failFindings(r))
	}
	ro = srv.rollout(t, "default")
	if !ro.Halted {
		t.Errorf("a FAIL on canary must halt the rollout: %+v", ro)
	}
	if c := ro.counts(b.ID); c.Pass != 0 || c.Fail != 1 {
		t.Errorf("after boot 2, build B counts %+v, want pass 0 fail 1", c)
	}
	if ro.channel("canary") != b.ID || ro.channel("stable") != a.ID {
		t.Errorf("a FAIL must move no build: %+v", ro.Channels)
	}
	if h := ro.held(rolloutNode); h == nil || h.Failed != b.ID || h.Serve != a.ID {
		t.Fatalf("the node must be held back on A after failing B: %+v", ro.Held)
	}
	if n := srv.nodeRollout(t); !n.HeldBack || n.Hold == nil || n.Hold.Failed != b.ID {
		t.Errorf("the node API does not show the hold: %+v", n)
	}

	// Boot 3, from a new server process over the same database.
	srv.stop()
	srv = serve()
	if ro = srv.rollout(t, "default"); !ro.Halted || ro.held(rolloutNode) == nil || ro.channel("canary") != b.ID {
		t.Fatalf("the rollout did not survive a restart of the server: %+v", ro)
	}
	srv.rolloutBoot(t, "boot 3", a, selftest.Pass)
	ro = srv.rollout(t, "default")
	// Counts are of nodes, by their latest verdict on each build.
	if ca, cb := ro.counts(a.ID), ro.counts(b.ID); ca.Pass != 1 || ca.Fail != 0 || cb.Pass != 0 || cb.Fail != 1 {
		t.Errorf("after boot 3, counts A %+v, B %+v; want A pass 1, B fail 1", ca, cb)
	}
	if !ro.Halted || ro.channel("canary") != b.ID || ro.channel("stable") != a.ID {
		t.Errorf("boot 3 must move no build and not resume: %+v", ro)
	}
	if h := ro.held(rolloutNode); h == nil || h.Failed != b.ID {
		t.Errorf("a PASS on a build older than the failed one cleared the hold: %+v", ro.Held)
	}
	for _, ev := range ro.Events {
		if ev.Kind == "promote" {
			t.Errorf("a promotion was recorded: %+v", ev)
		}
	}
	if !hasEvent(ro, "halt", b.ID, rolloutNode) {
		t.Errorf("no halt event for B from the node: %+v", ro.Events)
	}

	// The CLI against the running service: status agrees with the API (and exits 9,
	// a rollout is halted); clear lifts the hold.
	url := "http://" + srv.base
	stdout, stderr, code, err := testbin.Run(bin, "..", "rollout", "status", "--server", url, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var cli struct {
		Rollouts json.RawMessage `json:"rollouts"`
	}
	if code != int(exitcode.Selftest) || json.Unmarshal([]byte(stdout), &cli) != nil {
		t.Fatalf("rollout status --json: exit %d, want %d (halted)\n%s%s", code, exitcode.Selftest, stdout, stderr)
	}
	var fromCLI, fromAPI any
	json.Unmarshal(cli.Rollouts, &fromCLI)
	srv.getJSON(t, "/api/rollouts", &fromAPI)
	if !reflect.DeepEqual(fromCLI, fromAPI) {
		t.Errorf("rollout status --json differs from /api/rollouts:\ncli: %v\napi: %v", fromCLI, fromAPI)
	}
	if out, code := peerboot(t, "rollout", "clear", rolloutNode, "--server", url, "--operator-token", filepath.Join(root, "operator.token")); code != 0 {
		t.Fatalf("rollout clear: exit %d\n%s", code, out)
	}
	if h := srv.rollout(t, "default").held(rolloutNode); h != nil {
		t.Errorf("after rollout clear the node is still held: %+v", h)
	}
	if n := srv.nodeRollout(t); n.HeldBack || n.Hold != nil {
		t.Errorf("the node API still shows a hold after clear: %+v", n)
	}
	// Cleared, the node's next boot script is its channel's build again (fetched
	// here as iPXE would, instead of a fourth boot).
	resp, err := http.Get(url + "/boot.ipxe?mac=" + rolloutNode)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(script), "/builds/default/"+b.ID+"/pxe/") {
		t.Errorf("after clear the boot script (%s) is not canary's build B %s:\n%s", resp.Status, b.ID, script)
	}
	if n := srv.nodeRollout(t); n.LastServedBuild != b.ID {
		t.Errorf("after clear the node was last served %q, want B %s", n.LastServedBuild, b.ID)
	}
}

// builtAs is one served build: its id and the recipe digest its image reports.
type builtAs struct {
	ID, RecipeDigest string
}

// buildIn is the served build of dir, waiting a few seconds for a running server
// to take a new directory in (it rescans --out at most once a second).
func (s *served) buildIn(t *testing.T, dir string) builtAs {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		var bs []struct {
			ID           string `json:"build"`
			Dir          string `json:"dir"`
			RecipeDigest string `json:"recipe_digest"`
		}
		s.rollout(t, "default") // the rollout API takes new builds in
		s.getJSON(t, "/api/builds", &bs)
		for _, b := range bs {
			if b.Dir == dir {
				return builtAs{ID: b.ID, RecipeDigest: b.RecipeDigest}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not serve %s: %+v\n%s", dir, bs, s.logs.String())
		}
	}
}

// rolloutBoot boots the node once and checks that it ran want (by the recipe
// digest in its own report, and the build the API says it was last served), that
// its verdict is verdict and that the server stored it against want.
func (s *served) rolloutBoot(t *testing.T, name string, want builtAs, verdict string) *selftest.Report {
	t.Helper()
	r, console, res := s.pxeBoot(t)
	t.Logf("%s: %s in %s (%s), verdict %s", name, r.Recipe.Digest, res.Duration.Round(time.Second), res.Accel, r.Verdict)
	s.posted(t, console)
	if r.Recipe.Digest != want.RecipeDigest {
		t.Fatalf("%s: the node ran recipe digest %s, want %s (build %s)", name, r.Recipe.Digest, want.RecipeDigest, want.ID)
	}
	if r.Verdict != verdict {
		t.Fatalf("%s: verdict %s, want %s; fail findings:\n%s", name, r.Verdict, verdict, failFindings(r))
	}
	var n nodeView
	s.getJSON(t, "/api/nodes/"+rolloutNode, &n)
	if n.Latest == nil || n.Latest.Build != want.ID || n.Latest.Verdict != verdict {
		t.Fatalf("%s: the node API's latest report is %+v, want build %s, verdict %s", name, n.Latest, want.ID, verdict)
	}
	if n.Rollout == nil || n.Rollout.LastServedBuild != want.ID {
		t.Errorf("%s: the node API says it was last served %+v, want build %s", name, n.Rollout, want.ID)
	}
	return r
}

// nodeRollout is the rollout part of the node API (/api/nodes/NODE).
func (s *served) nodeRollout(t *testing.T) nodeRolloutView {
	t.Helper()
	var n nodeView
	s.getJSON(t, "/api/nodes/"+rolloutNode, &n)
	if n.Rollout == nil {
		t.Fatalf("the node API has no rollout part")
	}
	return *n.Rollout
}

func hasEvent(ro *rolloutView, kind, build, node string) bool {
	for _, ev := range ro.Events {
		if ev.Kind == kind && ev.Build == build && ev.Node == node {
			return true
		}
	}
	return false
}

func hasFinding(r *selftest.Report, id, status string) bool {
	for _, f := range r.Findings {
		if f.ID == id && f.Status == status {
			return true
		}
	}
	return false
}

// nodeView is what the test reads of /api/nodes/NODE.
type nodeView struct {
	Latest *struct {
		Build   string `json:"build"`
		Verdict string `json:"verdict"`
	} `json:"latest"`
	Rollout *nodeRolloutView `json:"rollout"`
}

type nodeRolloutView struct {
	LastServedBuild string    `json:"last_served_build"`
	HeldBack        bool      `json:"held_back"`
	Hold            *holdView `json:"hold"`
}

type holdView struct {
	Node   string `json:"node"`
	Failed string `json:"failed_build"`
	Serve  string `json:"serve_build"`
}

type buildCounts struct {
	Build string `json:"build"`
	Pass  int    `json:"pass"`
	Fail  int    `json:"fail"`
}

// rolloutView is what the test reads of one recipe in /api/rollouts.
type rolloutView struct {
	Recipe   string `json:"recipe"`
	Channels []struct {
		Name  string `json:"name"`
		Build string `json:"build"`
	} `json:"channels"`
	Halted bool          `json:"halted"`
	Builds []buildCounts `json:"builds"`
	Held   []holdView    `json:"held_back"`
	Events []struct {
		Kind  string `json:"kind"`
		Build string `json:"build"`
		Node  string `json:"node"`
	} `json:"events"`
}

func (s *served) rollout(t *testing.T, recipe string) *rolloutView {
	t.Helper()
	var all []rolloutView
	s.getJSON(t, "/api/rollouts", &all)
	for i := range all {
		if all[i].Recipe == recipe {
			return &all[i]
		}
	}
	t.Fatalf("/api/rollouts has no recipe %s: %+v", recipe, all)
	return nil
}

func (v *rolloutView) channel(name string) string {
	for _, c := range v.Channels {
		if c.Name == name {
			return c.Build
		}
	}
	return ""
}

func (v *rolloutView) counts(build string) buildCounts {
	for _, c := range v.Builds {
		if c.Build == build {
			return c
		}
	}
	return buildCounts{Build: build}
}

func (v *rolloutView) held(node string) *holdView {
	for i := range v.Held {
		if v.Held[i].Node == node {
			return &v.Held[i]
		}
	}
	return nil
}
