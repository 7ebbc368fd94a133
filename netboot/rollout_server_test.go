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
