package netboot

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/netboot/api"
	"github.com/peerboot/peerboot/selftest"
)

// progressBody is DemoSoakProgress, failing the test on an error.
func progressBody(t testing.TB, state string, n, bad int) []byte {
	t.Helper()
	b, err := DemoSoakProgress(state, n, bad)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// soakReport is a finished burn-in's report: the demo's 4-GPU boot with a soak.
func soakReport(t testing.TB, rounds int) []byte {
	t.Helper()
	r := DemoReport(Epyc4GPU, 7, false)
	r.Recipe.Name = "default"
	r.Soak = &selftest.Soak{RequestedMS: int64(rounds) * 30000, ElapsedMS: int64(rounds) * 30000, Rounds: rounds, Stopped: "duration", Stride: 1, Pairs: []selftest.SoakPair{}}
	for _, rd := range DemoSoakSeries(rounds, rounds/2, 0) {
		r.Soak.AddRound(rd)
	}
	b, err := selftest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPostProgress(t *testing.T) {
	e := newEnv(t, Options{RateEvery: 1, RateBurst: 1000})
	const node = "52:54:00:00:00:31"
	id := e.build(t, "default").ID
	tok := e.srv.Token(id, node)
	path := "/progress?node=" + node
	for _, tc := range []struct {
		name, path, token, body string
		status                  int
		want                    string
	}{
		{"no token", path, "", string(progressBody(t, "running", 120, 0)), 401, "no token"},
		{"another node's token", path, e.srv.Token(id, "52:54:00:00:00:32"), string(progressBody(t, "running", 120, 0)), 403, "not one this server issued to node 52:54:00:00:00:31"},
		{"not JSON", path, tok, "{", 400, "not JSON"},
		{"not a progress", path, tok, `{"schema":2,"state":"running"}`, 422, "schema: 2, want 1"},
		{"too big", path, tok, `{"message":"` + strings.Repeat("x", selftest.MaxSoakProgressBytes) + `"}`, 413, "the limit is 262144"},
		{"a report is no progress", path, tok, `{"schema":2,"verdict":"pass"}`, 422, "invalid soak progress"},
		{"running", path, tok, string(progressBody(t, "running", 120, 0)), 200, `"state": "running"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.post(t, tc.path, tc.token, []byte(tc.body))
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("POST %s: %d %q, want %d and %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}
	// The fleet page says how far the burn-in is, and that it is clean.
	_, page := e.get(t, "/")
	want := `<div class="burnin clean" data-state="running" data-rounds="120"`
	if !strings.Contains(page, want) || !strings.Contains(page, "burning in · 1 h 00 of 12 h 00 · 120 rounds · clean") {
		t.Errorf("fleet page lacks %q and its text:\n%s", want, page)
	}
	// Later, a faulty round: the line names it.
	if resp, body := e.post(t, path, tok, progressBody(t, "running", 240, 201)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	_, page = e.get(t, "/")
	if !strings.Contains(page, `<div class="burnin faulty" data-state="running" data-rounds="240"`) || !strings.Contains(page, "burning in · 2 h 00 of 12 h 00 · 240 rounds · round 201 at T&#43;1:40:00: GPU2-&gt;GPU3 ce write") {
		t.Errorf("fleet page does not name the fault:\n%s", page)
	}
	var nodes []NodeView
	_, js := e.get(t, "/api/nodes")
	if err := json.Unmarshal([]byte(js), &nodes); err != nil || len(nodes) != 1 || nodes[0].BurnIn == nil || nodes[0].BurnIn.Faulty != 1 || nodes[0].BurnIn.Clean {
		t.Fatalf("/api/nodes: %v %s", err, js)
	}
	// The node page draws the progress' plot.
	_, page = e.get(t, "/nodes/"+node)
	for _, want := range []string{`<h2 id="burn-in-now">`, `<div id="soak-plot" data-from="progress" data-points="`, `<svg class="soak-plot" data-kind="bandwidth"`,
		`<svg class="soak-plot" data-kind="temperature"`, `<polyline class="pair" data-pair="0-&gt;1"`, `<line class="fault" data-round="201"`, `<tr class="soak-pair" data-pair="0->1">`,
		`<tr class="soak-gpu" data-gpu="3"><td>GPU3</td><td>Gen4 x16</td><td class="num">83 °C</td><td class="num">2520 MHz</td><td class="num">10501 MHz</td><td class="num">293 W</td><td>none</td></tr>`} {
		if !strings.Contains(page, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	// The final report arrives after it: the fleet shows the report, the node page
	// the report's soak.
	resp, body := e.post(t, "/reports?node="+node, tok, soakReport(t, 60))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the final report: %d %s", resp.StatusCode, body)
	}
	_, page = e.get(t, "/")
	if strings.Contains(page, `class="burnin`) {
		t.Error("the fleet page still shows the burn-in after its report")
	}
	_, page = e.get(t, "/nodes/"+node)
	if strings.Contains(page, `id="burn-in-now"`) || !strings.Contains(page, `<div id="soak-plot" data-from="report" data-points="60">`) || strings.Count(page, `<polyline class="pair"`) != 12 {
		t.Errorf("node page after the report: want the report's plot (60 points, 12 pairs), not the progress")
	}
}

// TestPostProgressRate: progress has its own per-node budget, so a node posting
// progress still gets its report in.
func TestPostProgressRate(t *testing.T) {
	e := newEnv(t, Options{RateBurst: 2})
	const node = "52:54:00:00:00:41"
	tok := e.srv.Token(e.build(t, "default").ID, node)
	body := progressBody(t, "running", 10, 0)
	var codes []int
	for i := 0; i < 3; i++ {
		resp, _ := e.post(t, "/progress?node="+node, tok, body)
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Errorf("three progress POSTs in a burst of 2: %v, want [200 200 429]", codes)
	}
	if resp, b := e.post(t, "/reports?node="+node, tok, soakReport(t, 8)); resp.StatusCode != http.StatusCreated {
		t.Errorf("the report after them: %d %s", resp.StatusCode, b)
	}
}

func TestGPUNow(t *testing.T) {
	i := func(v int) *int { return &v }
	u := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		g    selftest.SoakGPU
		want GPUNow
	}{
		{selftest.SoakGPU{GPU: 2}, GPUNow{GPU: 2}},
		{selftest.SoakGPU{GPU: 1, LinkGen: 4, LinkWidth: 8, TemperatureC: i(91), SMClockMHz: i(1410), MemClockMHz: i(10501), PowerMW: i(299500), ThrottleReasons: u(0x20 | 0x40)},
			GPUNow{GPU: 1, Link: "Gen4 x8", Temperature: "91 °C", SMClock: "1410 MHz", MemClock: "10501 MHz", Power: "300 W", Throttle: "SW thermal slowdown, HW thermal slowdown"}},
		{selftest.SoakGPU{GPU: 0, ThrottleReasons: u(0)}, GPUNow{GPU: 0, Throttle: "none"}},
	} {
		if got := gpuNow(tc.g); got != tc.want {
			t.Errorf("gpuNow(%+v) = %+v, want %+v", tc.g, got, tc.want)
		}
	}
}

// TestSoakStop: issue 32 item 4. An operator asks a node's running burn-in to stop;
// the node reads the request in the answer to its next progress POST. Only the
// operator token authorises it, a node with no burn-in or one that ended is refused
// by name, a second request keeps the first, and the pages say so.
func TestSoakStop(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 3, 20, 0, 0, 0, time.UTC)}
	e := newEnv(t, Options{RateEvery: 1, RateBurst: 1000, OperatorToken: testOperator, Now: clk.now})
	const node, done = "52:54:00:00:00:51", "52:54:00:00:00:52"
	id := e.build(t, "default").ID
	tok := e.srv.Token(id, node)
	progress := func(n int, state string) bootproto.ProgressAnswer {
		t.Helper()
		resp, body := e.post(t, "/progress?node="+node, tok, progressBody(t, state, n, 0))
		var a bootproto.ProgressAnswer
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &a) != nil {
			t.Fatalf("progress: %d %s", resp.StatusCode, body)
		}
		return a
	}
	if a := progress(10, "running"); a.Stop || a.Node != node || a.Rounds != 10 {
		t.Fatalf("a stop before anyone asked: %+v", a)
	}
	if resp, body := e.post(t, "/progress?node="+done, e.srv.Token(id, done), progressBody(t, "finished", 20, 0)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	stop := "/api/nodes/" + node + "/soak/stop"
	for _, tc := range []struct {
		name, path, token, body string
		status                  int
		want                    string
	}{
		{"no token", stop, "", `{"reason":"x"}`, 401, "operator token"},
		{"the node's own token", stop, tok, `{}`, 401, "operator token"},
		{"unknown node", "/api/nodes/52:54:00:00:00:99/soak/stop", testOperator, ``, 404, "node 52:54:00:00:00:99 is not burning in: serve has no burn-in progress from it"},
		{"bad node", "/api/nodes/a%20b/soak/stop", testOperator, ``, 400, "want a MAC or a node id"},
		{"ended", "/api/nodes/" + done + "/soak/stop", testOperator, ``, 409, "node " + done + " is not burning in: its last burn-in is finished"},
		{"a build", stop, testOperator, `{"build":"0123456789abcdef"}`, 400, "no build"},
		{"stop", stop, testOperator, `{"reason":"rack 4 power work"}`, 200, `"already": false`},
		{"again", stop, testOperator, `{"reason":"later"}`, 200, `"already": true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.add(time.Minute)
			resp, body := e.post(t, tc.path, tc.token, []byte(tc.body))
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("POST %s: %d %q, want %d and %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
			}
			if tc.status == 200 {
				var s api.SoakStop
				asked := time.Date(2026, 12, 3, 20, 7, 0, 0, time.UTC) // the "stop" case's minute
				if err := json.Unmarshal([]byte(body), &s); err != nil || s.Node != node || s.State != "running" || s.Reason != "rack 4 power work" || !s.StopAt.Equal(asked) || s.StopBy != "127.0.0.1" {
					t.Errorf("answer %+v (%v), want the first request's reason, time %s and author", s, err, asked)
				}
			}
		})
	}
	// The pages say it before the node has heard.
	_, page := e.get(t, "/")
	if want := "stop requested by 127.0.0.1 at 2026-12-03 20:07:00 UTC: rack 4 power work (the node reads it with its next progress)"; !strings.Contains(page, want) {
		t.Errorf("fleet page lacks %q:\n%s", want, page)
	}
	var v NodeView
	if _, js := e.get(t, "/api/nodes/"+node); json.Unmarshal([]byte(js), &v) != nil || v.BurnIn == nil || v.BurnIn.StopRequested == nil || v.BurnIn.StopRequested.By != "127.0.0.1" {
		t.Errorf("/api/nodes/%s lacks the stop request: %s", node, js)
	}
	// The node's next progress is answered with the stop, who and when.
	a := progress(11, "running")
	if !a.Stop || a.StopBy != "127.0.0.1" || a.StopReason != "rack 4 power work" || !a.StopAt.Equal(time.Date(2026, 12, 3, 20, 7, 0, 0, time.UTC)) {
		t.Errorf("progress answer after the stop: %+v", a)
	}
	// Its final state is not asked to stop again, and the line says it stopped as asked.
	if a := progress(12, "stopped"); a.Stop {
		t.Errorf("the final progress was asked to stop: %+v", a)
	}
	_, page = e.get(t, "/")
	if want := "burn-in stopped · 6 min of 12 h 00 · 12 rounds · clean · stop requested by 127.0.0.1 at 2026-12-03 20:07:00 UTC: rack 4 power work<"; !strings.Contains(page, strings.TrimSuffix(want, "<")) || strings.Contains(page, "reads it with its next progress") {
		t.Errorf("fleet page after the stop lacks %q:\n%s", want, page)
	}
	// A new burn-in on the node is not stopped by the old request.
	if a := progress(1, "running"); a.Stop {
		t.Errorf("a new burn-in got the old stop: %+v", a)
	}
}

// TestBurnInSilent: a running burn-in serve stops hearing from (the box died, hung
// or lost its network) turns silent on the pages after Options.BurnInSilent, rather
// than showing "burning in" forever; a finished one never does; a heard one is
// itself again.
func TestBurnInSilent(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e := newEnv(t, Options{RateEvery: 1, RateBurst: 1000, Now: clock})
	const node = "52:54:00:00:00:33"
	tok := e.srv.Token(e.build(t, "default").ID, node)
	post := func(state string, rounds int) {
		t.Helper()
		if resp, body := e.post(t, "/progress?node="+node, tok, progressBody(t, state, rounds, 0)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	silent := func() (string, *BurnIn) {
		t.Helper()
		_, page := e.get(t, "/")
		var nodes []NodeView
		_, js := e.get(t, "/api/nodes")
		if err := json.Unmarshal([]byte(js), &nodes); err != nil || len(nodes) != 1 || nodes[0].BurnIn == nil {
			t.Fatalf("/api/nodes: %v %s", err, js)
		}
		return page, nodes[0].BurnIn
	}
	post(selftest.SoakRunning, 120)
	for _, step := range []struct {
		after      time.Duration
		wantSilent bool
		wantText   string
	}{
		{0, false, "burning in · 1 h 00 of 12 h 00"},
		{DefaultBurnInSilent - time.Second, false, "burning in · 1 h 00 of 12 h 00"},
		{2 * time.Second, true, "silent for 15 min (the node stopped sending progress: down, hung or cut off?) · last heard: burning in · 1 h 00 of 12 h 00"},
		{3 * time.Hour, true, "silent for 3 h 15 "},
	} {
		advance(step.after)
		page, b := silent()
		if got := b.SilentMS > 0; got != step.wantSilent || !strings.Contains(page, step.wantText) || strings.Contains(page, `burnin clean silent`) != step.wantSilent {
			t.Errorf("%s after the progress: silent %v (%d ms), want %v; page has %q: %v", now.Sub(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)), got, b.SilentMS, step.wantSilent, step.wantText, strings.Contains(page, step.wantText))
		}
	}
	// Heard again: itself again.
	post(selftest.SoakRunning, 121)
	if page, b := silent(); b.SilentMS != 0 || strings.Contains(page, "silent for") {
		t.Errorf("a burn-in heard again is still silent: %d ms", b.SilentMS)
	}
	// Finished: the report follows whenever it does; never silent.
	post(selftest.SoakFinished, 1440)
	advance(24 * time.Hour)
	if page, b := silent(); b.SilentMS != 0 || strings.Contains(page, "silent for") {
		t.Errorf("a finished burn-in turned silent: %d ms", b.SilentMS)
	}

	// The threshold is serve's --burn-in-silent: a longer one waits longer.
	e2 := newEnv(t, Options{RateEvery: 1, RateBurst: 1000, Now: clock, BurnInSilent: time.Hour})
	tok2 := e2.srv.Token(e2.build(t, "default").ID, node)
	if resp, body := e2.post(t, "/progress?node="+node, tok2, progressBody(t, selftest.SoakRunning, 120, 0)); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	advance(30 * time.Minute)
	if _, page := e2.get(t, "/nodes/"+node); strings.Contains(page, "silent for") {
		t.Error("silent after 30 min with --burn-in-silent 1h")
	}
	advance(31 * time.Minute)
	if _, page := e2.get(t, "/nodes/"+node); !strings.Contains(page, "silent for 1 h 01") {
		t.Error("the node page does not say a burn-in silent for 61 min with --burn-in-silent 1h is silent")
	}
}
