package netboot

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// seededEnv is serve with the demo's nodes, seeded at demoAt; its clock (unless
// opt has one) stands a minute later, when the demo's burn-in was last heard.
func seededEnv(t *testing.T, opt Options) *testEnv {
	demoAt := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	if opt.Now == nil {
		opt.Now = func() time.Time { return demoAt.Add(time.Minute) }
	}
	e := newEnv(t, opt)
	if err := SeedDemo(context.Background(), e.store, demoAt); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestFleetPage(t *testing.T) {
	e := seededEnv(t, Options{})
	resp, body := e.get(t, "/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`<div class="card" id="count-nodes"><b>3</b>nodes</div>`,
		`<div class="card" id="count-pass"><b>1</b>pass</div>`,
		`<div class="card" id="count-fail"><b>1</b>fail</div>`,
		`data-node="02:00:00:00:08:01" data-verdict="fail"`,
		`data-node="02:00:00:00:04:01" data-verdict="pass"`,
		`<a href="/nodes/02:00:00:00:08:01">`,
		`demo-xeon-8gpu`,
		`<div class="sev-fail" title="GPU5-&gt;GPU6 ce write corrupted data: 1024 word(s) differ, first at byte 0xffff000 (want 0x5a5a0000, got 0x00000000)">copy.corrupt</div>`,
		// The third demo node is burning in, its report yet to come.
		`data-node="02:00:00:00:04:02"`, `demo-4090-48g-burnin`,
		`<div class="burnin clean" data-state="running" data-rounds="360"`, `burning in · 3 h 00 of 12 h 00 · 360 rounds · clean`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page lacks %q", want)
		}
	}
	var nodes []NodeView
	_, js := e.get(t, "/api/nodes")
	if err := json.Unmarshal([]byte(js), &nodes); err != nil || len(nodes) != 3 {
		t.Fatalf("api/nodes: %v %s", err, js)
	}
}

func TestNodePage(t *testing.T) {
	e := seededEnv(t, Options{})
	resp, body := e.get(t, "/nodes/demo-xeon-8gpu") // by hostname
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	cells := regexp.MustCompile(`<td class="cell[^"]*" data-src="(\d)" data-dst="(\d)" data-gbps="([0-9.]*)" data-topo="([A-Z]*)"`).FindAllStringSubmatch(body, -1)
	if len(cells) != 64 {
		t.Fatalf("%d heatmap cells, want 64", len(cells))
	}
	if !strings.Contains(body, `<td class="cell failed" data-src="5" data-dst="6" data-gbps="" data-topo="NODE"`) {
		t.Errorf("GPU5→6 not marked failed")
	}
	if n := strings.Count(body, `class="cell failed"`); n != 1 {
		t.Errorf("%d failed cells, want 1", n)
	}
	for _, want := range []string{
		`data-src="0" data-dst="1" data-gbps="2`, // PIX, ~25.8 GB/s
		`data-src="0" data-dst="4" data-gbps="1`, // SYS, ~15.7 GB/s
		`data-topo="PIX"`, `data-topo="NODE"`, `data-topo="SYS"`,
		`<svg class="curve"`, `data-bytes="1073741824"`,
		`<tr class="change worse"><td>verdict</td><td>pass</td><td>fail</td></tr>`,
		`<td>finding copy.corrupt</td>`,
		`id="history"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	var v NodeView
	_, js := e.get(t, "/api/nodes/02:00:00:00:08:01")
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	if v.Latest == nil || v.Latest.Heatmap == nil || len(v.Latest.Heatmap.Cells) != 8 || !v.Latest.Heatmap.Cells[5][6].Failed ||
		v.Latest.NCCL == nil || len(v.Latest.NCCL.Points) != 11 || len(v.History) != 2 || len(v.Changes) == 0 {
		t.Errorf("api/nodes/ID: %+v", v)
	}
	// An older report by ?report=.
	_, body = e.get(t, "/nodes/02:00:00:00:08:01?report="+itoa(v.History[1].ID))
	if !strings.Contains(body, `<span class="verdict pass">pass</span></h2>`) || strings.Contains(body, `class="cell failed"`) {
		t.Errorf("older report not shown")
	}
	if resp, _ := e.get(t, "/api/reports/"+itoa(v.History[0].ID)); resp.StatusCode != 200 || resp.Header.Get("X-Peerboot-Node") != "02:00:00:00:08:01" {
		t.Errorf("api/reports: %d", resp.StatusCode)
	}
	if resp, _ := e.get(t, "/nodes/nope"); resp.StatusCode != 404 {
		t.Errorf("unknown node: %d", resp.StatusCode)
	}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestPageAuth(t *testing.T) {
	e := seededEnv(t, Options{PageUser: "ops", PagePassword: "s3cret", PageToken: "view-token"})
	for _, p := range []string{"/", "/api/nodes", "/nodes/demo-xeon-8gpu"} {
		if resp, _ := e.get(t, p); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without credentials: %d", p, resp.StatusCode)
		}
		req := "Basic " + "b3BzOnMzY3JldA==" // ops:s3cret
		if resp, _ := e.get(t, p, "Authorization", req); resp.StatusCode != 200 {
			t.Errorf("%s with basic auth: %d", p, resp.StatusCode)
		}
		if resp, _ := e.get(t, p, "Authorization", "Bearer view-token"); resp.StatusCode != 200 {
			t.Errorf("%s with the token: %d", p, resp.StatusCode)
		}
		if resp, _ := e.get(t, p, "Authorization", "Basic b3BzOndyb25n"); resp.StatusCode != 401 {
			t.Errorf("%s with a wrong password: %d", p, resp.StatusCode)
		}
	}
	// Boot files and the script never need page credentials.
	if resp, _ := e.get(t, "/boot.ipxe?mac=52:54:00:00:00:01"); resp.StatusCode != 200 {
		t.Errorf("boot script behind page auth: %d", resp.StatusCode)
	}
}

func TestDiffReports(t *testing.T) {
	prev := DemoReport(Epyc4GPU, 0, false)
	cur := DemoReport(Epyc4GPU, 0, false)
	if d := DiffReports(prev, cur); len(d) != 0 {
		t.Errorf("same report: %+v", d)
	}
	cur.Copies[2].GBps /= 2
	cur.NCCL.Sizes[len(cur.NCCL.Sizes)-1].BusBW = 10
	cur.Add(selftest.SevFail, "p2p.status", "pair 0-1 CNS", "")
	cur.Settle()
	got := map[string]Change{}
	for _, c := range DiffReports(prev, cur) {
		got[c.What] = c
	}
	for _, w := range []string{"verdict", "NCCL busbw at 1G", "finding p2p.status", "GPU0→GPU2 ce write GB/s"} {
		if c, ok := got[w]; !ok || !c.Worse {
			t.Errorf("change %q: %+v", w, c)
		}
	}
	if c := got["GPU0→GPU2 ce write GB/s"]; !strings.Contains(c.Now, "(-50%)") {
		t.Errorf("halved copy: %+v", c)
	}
}

func TestHeatmapMarksFailures(t *testing.T) {
	r := DemoReport(Epyc4GPU, 0, false)
	no := false
	r.Pairs[1].CanAccessPeer = &no // 0-2
	r.Pairs[2].P2PRead = "CNS"     // 0-3
	for i := range r.Copies {
		c := &r.Copies[i]
		if c.Src == 1 && c.Dst == 2 {
			c.Error = "CUDA_ERROR_LAUNCH_FAILED"
		}
		if c.Src == 2 && c.Dst == 1 {
			c.GBps = 40 // above the 31.5 GB/s link
		}
	}
	h := NewHeatmap(r)
	for _, p := range [][2]int{{0, 2}, {2, 0}, {0, 3}, {3, 0}, {1, 2}, {2, 1}} {
		if c := h.Cells[p[0]][p[1]]; !c.Failed || c.Why == "" {
			t.Errorf("cell %v not failed: %+v", p, c)
		}
	}
	if c := h.Cells[0][1]; c.Failed || c.Topology != "PHB" || !c.Measured {
		t.Errorf("cell 0,1: %+v", c)
	}
	if c := h.Cells[1][1]; !c.Local || c.GBps < 800 {
		t.Errorf("local cell: %+v", c)
	}
}
