package netboot

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
)

const rolloutTestInventory = rolloutPolicy + `
[[node]]
mac = "52:54:00:00:00:01"
channel = "canary"

[[node]]
mac = "52:54:00:00:00:02"
`

// rolloutEnv serves the builds under an output root it watches, with the rollout
// inventory, over SQLite.
type rolloutEnv struct {
	*testEnv
	bs *Builds
}

// testOperator is the operator token of the rollout tests' servers.
const testOperator = "operator-token-of-the-tests"

func newRolloutEnv(t *testing.T) *rolloutEnv {
	t.Helper()
	return newRolloutEnvWith(t, rolloutTestInventory, Options{OperatorToken: testOperator})
}

// newRolloutEnvWith is newRolloutEnv with another inventory and opt's fields.
func newRolloutEnvWith(t *testing.T, inventory string, opt Options) *rolloutEnv {
	t.Helper()
	root := t.TempDir()
	a := filepath.Join(root, "a")
	fakeBuild(t, a, "default", 4096)
	bs, err := LoadBuilds([]string{a})
	if err != nil {
		t.Fatal(err)
	}
	bs.WatchRoot(root)
	st, err := sqldb.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	inv, err := ParseInventory("inv.toml", []byte(inventory))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opt.Builds, opt.Store, opt.Inventory, opt.Log = bs, st, inv, slog.New(slog.NewTextHandler(logs, nil))
	if opt.RateBurst == 0 {
		opt.RateBurst = 100
	}
	s, err := New(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &rolloutEnv{testEnv: &testEnv{srv: s, http: hs, store: st, log: logs, out: root}, bs: bs}
}

// addBuild writes a new build of default under the root, one the server has not seen.
func (e *rolloutEnv) addBuild(t *testing.T, name string, size int64) *Build {
	t.Helper()
	dir := filepath.Join(e.out, name)
	fakeBuild(t, dir, "default", size)
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "manifest.json"), later, later)
	e.bs.mu.Lock()
	e.bs.scanned = time.Time{} // the next request rescans
	e.bs.mu.Unlock()
	b, err := LoadBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var scriptBuild = regexp.MustCompile(`(?m)^kernel \S+/builds/default/([0-9a-f]{16})/pxe/vmlinuz .*peerboot\.token=(\S+)`)

// boot fetches the node's script and returns the build it names and the token.
func (e *rolloutEnv) boot(t *testing.T, mac string) (string, string) {
	t.Helper()
	resp, body := e.get(t, "/boot.ipxe?mac="+mac)
	m := scriptBuild.FindStringSubmatch(body)
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("boot %s: %d %s", mac, resp.StatusCode, body)
	}
	return m[1], m[2]
}

func (e *rolloutEnv) rollout(t *testing.T, hdr ...string) fleetdb.RolloutStatus {
	t.Helper()
	resp, body := e.get(t, "/api/rollouts", hdr...)
	var out []fleetdb.RolloutStatus
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil || len(out) != 1 {
		t.Fatalf("/api/rollouts: %d %s", resp.StatusCode, body)
	}
	return out[0]
}

const n1, n2 = "52:54:00:00:00:01", "52:54:00:00:00:02"

// failOnCanary boots A on the canary node n1 (it passes), adds B, which n1 boots and
// fails: the rollout is halted and n1 held back on A.
func failOnCanary(t *testing.T) (e *rolloutEnv, a, b string) {
	e = newRolloutEnv(t)
	a, tokA := e.boot(t, n1)
	if st := e.rollout(t); st.Channels[0].Build != a || st.Channels[1].Build != a {
		t.Fatalf("bootstrap: %+v", st.Channels)
	}
	if resp, body := e.post(t, "/reports?node="+n1, tokA, reportBody(t, Epyc4GPU, 0, false)); resp.StatusCode != 201 {
		t.Fatalf("report: %d %s", resp.StatusCode, body)
	}

	// B appears under the root while serve runs: the canary node gets it, the stable one A.
	b = e.addBuild(t, "b", 8192).ID
	if got, _ := e.boot(t, n2); got != a {
		t.Fatalf("stable node got %s, want A %s", got, a)
	}
	got, tokB := e.boot(t, n1)
	if got != b {
		t.Fatalf("canary node got %s, want B %s", got, b)
	}
	// B fails on the canary: the rollout halts, the node is held back on A.
	if resp, body := e.post(t, "/reports?node="+n1, tokB, reportBody(t, Xeon8GPU, 1, true)); resp.StatusCode != 201 {
		t.Fatalf("report: %d %s", resp.StatusCode, body)
	}
	return e, a, b
}

// checkRolloutPage looks for the rollout section of the fleet page in html (as served,
// or the DOM a browser built from it) after failOnCanary.
func checkRolloutPage(t *testing.T, html, a, b string) {
	t.Helper()
	for _, want := range []string{
		`<section class="rollout" id="rollout-default" data-recipe="default" data-halted="true">`,
		`FAIL from node ` + n1 + ` on build ` + b,
		`<tr class="channel" data-channel="canary" data-build="` + b + `">`,
		`<tr class="channel" data-channel="stable" data-build="` + a + `">`,
		`<tr class="rollout-build" data-build="` + a + `" data-pass="1" data-fail="0">`,
		`<tr class="rollout-build" data-build="` + b + `" data-pass="0" data-fail="1">`,
		`<tr class="held-node" data-node="` + n1 + `" data-failed="` + b + `" data-serve="` + a + `">`,
		`<a href="/nodes/` + n1 + `">` + n1 + `</a> <span class="sev-warn held-back">held back</span>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("fleet page lacks %s", want)
		}
	}
}

func TestRolloutServer(t *testing.T) {
	e, a, b := failOnCanary(t)
	resp, page := e.get(t, "/")
	if resp.StatusCode != 200 {
		t.Fatalf("fleet page: %d", resp.StatusCode)
	}
	checkRolloutPage(t, page, a, b)
	st := e.rollout(t)
	if !st.Halted || len(st.HeldBack) != 1 || st.HeldBack[0].Node != n1 || st.HeldBack[0].Serve != a || st.HeldBack[0].Failed != b {
		t.Fatalf("after the FAIL: %+v", st)
	}
	if len(st.Builds) != 2 || st.Builds[0].Pass != 1 || st.Builds[1].Fail != 1 || st.Channels[0].Build != b {
		t.Fatalf("builds: %+v channels %+v", st.Builds, st.Channels)
	}
	if got, _ := e.boot(t, n1); got != a {
		t.Fatalf("held node got %s, want A %s", got, a)
	}
	// A stays servable beside B.
	if resp, _ := e.get(t, "/builds/default/"+a+"/pxe/vmlinuz"); resp.StatusCode != 200 {
		t.Errorf("A's kernel: %d", resp.StatusCode)
	}
	resp, body := e.get(t, "/api/nodes/"+n1)
	var nv NodeView
	if json.Unmarshal([]byte(body), &nv) != nil || nv.Rollout == nil || !nv.Rollout.HeldBack || nv.Rollout.LastServedBuild != a {
		t.Fatalf("node API: %d %s", resp.StatusCode, body)
	}

	// The operator's actions.
	plain := func(path string) int {
		req, _ := http.NewRequest("POST", e.http.URL+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "text/plain")
		req.Header.Set("Authorization", "Bearer "+testOperator)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := plain("/api/rollouts/default/resume"); code != 415 {
		t.Errorf("a form-like POST: %d, want 415", code)
	}
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/api/rollouts/default/resume", ``, 200},
		{"/api/rollouts/default/resume", ``, 409},
		{"/api/rollouts/nosuch/halt", ``, 404},
		{"/api/rollouts/default/frob", ``, 404},
		{"/api/rollouts/default/promote", `{"build": "zz"}`, 400},
		{"/api/rollouts/default/promote", `{"bild": "` + b + `"}`, 400},
		{"/api/nodes/" + n1 + "/clear", ``, 200},
		{"/api/nodes/" + n1 + "/clear", ``, 404},
		{"/api/rollouts/default/halt", `{"reason": "maintenance"}`, 200},
		{"/api/rollouts/default/promote", `{"build": "` + b + `"}`, 200},
	} {
		if resp, body := e.post(t, c.path, testOperator, []byte(c.body)); resp.StatusCode != c.want {
			t.Errorf("POST %s %s: %d, want %d: %s", c.path, c.body, resp.StatusCode, c.want, body)
		}
	}
	if got, _ := e.boot(t, n1); got != b {
		t.Errorf("cleared node got %s, want B", got)
	}
	if got, _ := e.boot(t, n2); got != b {
		t.Errorf("stable node after the manual promotion got %s, want B", got)
	}
	st = e.rollout(t)
	if !st.Halted || st.HaltReason != "maintenance" || st.Events[0].Kind != "promote" || st.Events[0].Reason != "manual" || st.Events[0].To != "stable" {
		t.Errorf("after the actions: %+v", st)
	}
}

// TestRolloutPageInChromium checks the rollout section in the DOM headless Chromium
// builds from the fleet page.
func TestRolloutPageInChromium(t *testing.T) {
	testguard.Short(t, "starts a browser")
	e, a, b := failOnCanary(t)
	checkRolloutPage(t, string(chromium(t, e.http.URL+"/", "--dump-dom")), a, b)
}

// TestRolloutActionBody: a write's body is read whole up to its 4 KiB limit
// and refused past it, over HTTP. A body cut to its first 4 KiB instead would
// let an over-long halt through as a body-less one; a body of exactly the
// limit must not lose its last byte (here the closing brace of its JSON).
func TestRolloutActionBody(t *testing.T) {
	for _, c := range []struct {
		name   string
		body   string
		want   int
		halted bool
		reason string
	}{
		{"5000 bytes of white space", strings.Repeat(" ", 5000), 400, false, ""},
		{"4097 bytes ending in a JSON object", strings.Repeat(" ", maxActionBody+1-len(`{"reason": "x"}`)) + `{"reason": "x"}`, 400, false, ""},
		{"exactly 4096 bytes ending in a JSON object", strings.Repeat(" ", maxActionBody-len(`{"reason": "x"}`)) + `{"reason": "x"}`, 200, true, "x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newRolloutEnv(t)
			e.boot(t, n1)
			resp, body := e.post(t, "/api/rollouts/default/halt", testOperator, []byte(c.body))
			if resp.StatusCode != c.want || c.want == 400 && !strings.Contains(body, "over 4096 bytes") {
				t.Errorf("halt: %d %s, want %d", resp.StatusCode, body, c.want)
			}
			if st := e.rollout(t); st.Halted != c.halted || st.HaltReason != c.reason {
				t.Errorf("halted %t (%q), want %t (%q)", st.Halted, st.HaltReason, c.halted, c.reason)
			}
		})
	}
}

// TestClearByNodeKey: the operator clears a hold by any name the node pages
// use for the node (its id, MAC, hostname or serial); the hold of the node the
// name resolves to goes. A name no node has is 404, and changes nothing.
func TestClearByNodeKey(t *testing.T) {
	e, a, b := failOnCanary(t)
	// The held node boots again, now saying its hostname.
	resp, script := e.get(t, "/boot.ipxe?mac="+n1+"&host=gpu-canary-1")
	if m := scriptBuild.FindStringSubmatch(script); resp.StatusCode != 200 || m == nil || m[1] != a {
		t.Fatalf("held node's boot: %d %s", resp.StatusCode, script)
	}
	if resp, body := e.post(t, "/api/nodes/gpu-canary-2/clear", testOperator, nil); resp.StatusCode != 404 {
		t.Errorf("clear of a node nobody has seen: %d %s", resp.StatusCode, body)
	}
	if st := e.rollout(t); len(st.HeldBack) != 1 {
		t.Fatalf("a refused clear changed the holds: %+v", st.HeldBack)
	}
	if resp, body := e.post(t, "/api/nodes/gpu-canary-1/clear", testOperator, nil); resp.StatusCode != 200 {
		t.Fatalf("clear by hostname: %d %s", resp.StatusCode, body)
	}
	if st := e.rollout(t); len(st.HeldBack) != 0 {
		t.Errorf("the hold outlived its clear: %+v", st.HeldBack)
	}
	if got, _ := e.boot(t, n1); got != b {
		t.Errorf("cleared node got %s, want its channel's B %s", got, b)
	}
}

// TestChooseBuildCatalogueGaps: what a node boots when the rollout (the
// store, shared by replicas and restarts) names a build this server's
// catalogue lacks: a replica restarted after a build directory was deleted.
// The node boots a build of its recipe from the catalogue, and the log says
// which one and why; a node whose build is the rollout's own gets no warning.
func TestChooseBuildCatalogueGaps(t *testing.T) {
	e, a, b := failOnCanary(t) // n1 held on A, canary on B
	const rollbackGone, channelGone = "the held node's rollback build is not in the catalogue", "the chosen build is not in the catalogue"
	if got, _ := e.boot(t, n1); got != a {
		t.Fatalf("held node got %s, want A %s", got, a)
	}
	if log := e.log.String(); strings.Contains(log, rollbackGone) || strings.Contains(log, channelGone) {
		t.Errorf("a held node served its rollback build logged a catalogue gap:\n%s", log)
	}
	// restart serves the same store and inventory from a catalogue of dirs.
	restart := func(t *testing.T, dirs ...string) *rolloutEnv {
		t.Helper()
		bs, err := LoadBuilds(dirs)
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		opt := e.srv.opt
		opt.Builds, opt.Log = bs, slog.New(slog.NewTextHandler(logs, nil))
		s, err := New(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		return &rolloutEnv{testEnv: &testEnv{srv: s, http: hs, store: e.store, log: logs, out: e.out}, bs: bs}
	}
	aDir, bDir := filepath.Join(e.out, "a"), filepath.Join(e.out, "b")

	// A deleted: the held node gets its channel's B, and the log says so.
	onlyB := restart(t, bDir)
	if got, _ := onlyB.boot(t, n1); got != b {
		t.Errorf("held node without its rollback build got %s, want its channel's B %s", got, b)
	}
	if log := onlyB.log.String(); !strings.Contains(log, rollbackGone) || !strings.Contains(log, "rollback="+a) {
		t.Errorf("the log does not say the rollback build %s is gone:\n%s", a, log)
	}

	// B deleted, n1's hold cleared: the canary's build is gone, the node gets
	// the newest of its recipe, A, and the log says so.
	if resp, body := e.post(t, "/api/nodes/"+n1+"/clear", testOperator, nil); resp.StatusCode != 200 {
		t.Fatalf("clear: %d %s", resp.StatusCode, body)
	}
	onlyA := restart(t, aDir)
	if got, _ := onlyA.boot(t, n1); got != a {
		t.Errorf("canary without its channel's build got %s, want the newest, A %s", got, a)
	}
	if log := onlyA.log.String(); !strings.Contains(log, channelGone) || !strings.Contains(log, "chosen="+b) || strings.Contains(log, rollbackGone) {
		t.Errorf("the log does not say the chosen build %s is gone:\n%s", b, log)
	}
}

// TestRolloutsAPI: the rollout reads. /api/rollouts lists every recipe's
// rollout in recipe name order (not the inventory's), including one whose
// recipe has no build yet; /api/rollouts/{recipe} is one of them, records the
// catalogue's builds first like the list does, and is 404 for a recipe
// without a [[rollout]].
func TestRolloutsAPI(t *testing.T) {
	e := newRolloutEnvWith(t, rolloutTestInventory+`
[[rollout]]
recipe = "base"
channels = ["stable"]
`, Options{OperatorToken: testOperator})
	a := e.build(t, "default").ID
	resp, body := e.get(t, "/api/rollouts/default")
	var one fleetdb.RolloutStatus
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &one) != nil || one.Recipe != "default" || len(one.Channels) != 2 || one.Channels[0].Build != a || one.Channels[1].Build != a {
		t.Fatalf("/api/rollouts/default: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.get(t, "/api/rollouts/nosuch"); resp.StatusCode != 404 || !strings.Contains(body, "no [[rollout]]") {
		t.Errorf("/api/rollouts/nosuch: %d %s", resp.StatusCode, body)
	}
	resp, body = e.get(t, "/api/rollouts")
	var all []fleetdb.RolloutStatus
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &all) != nil || len(all) != 2 {
		t.Fatalf("/api/rollouts: %d %s", resp.StatusCode, body)
	}
	if all[0].Recipe != "base" || all[1].Recipe != "default" || all[0].Channels[0].Build != "" || all[1].Channels[1].Build != a {
		t.Errorf("/api/rollouts, want base (no build) then default (A %s): %+v", a, all)
	}
}

// TestOperatorWriteByClaimedHostname: a hostname is whatever a boot script's
// fetcher claims (/boot.ipxe?host=), so a stranger who fetches a script under
// the held node's hostname, after it, must not take the operator's write that
// names the node by that hostname. Before the fix the node seen last won:
// `clear gpu-canary-1` went to the stranger's made-up node (404, not held)
// and the canary stayed held; an ak-reset or a burn-in stop by hostname went
// the same way. A name two nodes claim is now refused (409), saying which
// nodes; the MAC still clears.
func TestOperatorWriteByClaimedHostname(t *testing.T) {
	e, _, _ := failOnCanary(t)
	if resp, script := e.get(t, "/boot.ipxe?mac="+n1+"&host=gpu-canary-1"); resp.StatusCode != 200 {
		t.Fatalf("held node's boot: %d %s", resp.StatusCode, script)
	}
	const stranger = "02:00:00:00:0c:09"
	if resp, script := e.get(t, "/boot.ipxe?mac="+stranger+"&host=gpu-canary-1"); resp.StatusCode != 200 {
		t.Fatalf("the stranger's boot: %d %s", resp.StatusCode, script)
	}
	for _, path := range []string{"/api/nodes/gpu-canary-1/clear", "/api/nodes/gpu-canary-1/ak-reset", "/api/nodes/gpu-canary-1/soak/stop"} {
		resp, body := e.post(t, path, testOperator, nil)
		if resp.StatusCode != 409 || !strings.Contains(body, n1) || !strings.Contains(body, stranger) {
			t.Errorf("%s, a hostname two nodes claim: %d %s, want 409 naming both", path, resp.StatusCode, body)
		}
	}
	if st := e.rollout(t); len(st.HeldBack) != 1 || st.HeldBack[0].Node != n1 {
		t.Fatalf("holds after the refused clears: %+v", st.HeldBack)
	}
	if resp, body := e.post(t, "/api/nodes/"+strings.ToUpper(n1)+"/clear", testOperator, nil); resp.StatusCode != 200 {
		t.Errorf("clear by MAC: %d %s", resp.StatusCode, body)
	}
	if st := e.rollout(t); len(st.HeldBack) != 0 {
		t.Errorf("the hold outlived its clear: %+v", st.HeldBack)
	}
}
