package netboot

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// TestSoakPlotInChromium loads the fleet page and two nodes' pages in headless
// Chromium: one node burning in (its progress, with a corrupted round), one whose
// burn-in finished (its report). It checks the burn-in lines and the plots' elements
// in the DOM the browser built, and keeps screenshots as artifacts
// ($PEERBOOT_ARTIFACTS, default $TMPDIR/peerboot-artifacts): burn-in-progress.png,
// burn-in-report.png.
func TestSoakPlotInChromium(t *testing.T) {
	testguard.Short(t, "starts a browser")
	e := newEnv(t, Options{RateEvery: 1, RateBurst: 1000})
	id := e.build(t, "default").ID
	const running, finished = "52:54:00:00:00:61", "52:54:00:00:00:62"
	if resp, body := e.post(t, "/progress?node="+running, e.srv.Token(id, running), progressBody(t, "running", 300, 230)); resp.StatusCode != 200 {
		t.Fatalf("progress: %d %s", resp.StatusCode, body)
	}
	tok := e.srv.Token(id, finished)
	if resp, body := e.post(t, "/progress?node="+finished, tok, progressBody(t, "finished", 96, 0)); resp.StatusCode != 200 {
		t.Fatalf("progress: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.post(t, "/reports?node="+finished, tok, soakReport(t, 96)); resp.StatusCode != 201 {
		t.Fatalf("report: %d %s", resp.StatusCode, body)
	}

	dom := string(chromium(t, e.http.URL+"/", "--dump-dom"))
	lines := regexp.MustCompile(`<div class="burnin (clean|faulty)" data-state="([a-z]+)" data-rounds="(\d+)"`).FindAllStringSubmatch(dom, -1)
	if len(lines) != 1 || lines[0][1] != "faulty" || lines[0][2] != "running" || lines[0][3] != "300" || !strings.Contains(dom, "burning in · 2 h 30 of 12 h 00 · 300 rounds · round 230 at T+1:54:30") {
		t.Errorf("fleet page's burn-in lines in the DOM: %v, want the running node's alone, faulty, naming round 230", lines)
	}

	poly := regexp.MustCompile(`<polyline class="(pair|temp)" data-(?:pair|gpu)="([^"]+)" data-points="(\d+)"`)
	for _, tc := range []struct {
		node, from string
		fault      bool
	}{{running, "progress", true}, {finished, "report", false}} {
		dom := string(chromium(t, e.http.URL+"/nodes/"+tc.node, "--dump-dom"))
		if !strings.Contains(dom, `<div id="soak-plot" data-from="`+tc.from+`"`) {
			t.Errorf("%s: no plot from the %s in the DOM", tc.node, tc.from)
		}
		for _, kind := range []string{"bandwidth", "temperature"} {
			if !strings.Contains(dom, `<svg class="soak-plot" data-kind="`+kind+`"`) {
				t.Errorf("%s: no %s chart in the DOM", tc.node, kind)
			}
		}
		pairs, temps := 0, 0
		for _, m := range poly.FindAllStringSubmatch(dom, -1) {
			if m[3] == "0" {
				t.Errorf("%s: line %s %s has no points", tc.node, m[1], m[2])
			}
			if m[1] == "pair" {
				pairs++
			} else {
				temps++
			}
		}
		if pairs != 12 || temps != 4 {
			t.Errorf("%s: %d pair lines and %d temperature lines in the DOM, want 12 and 4", tc.node, pairs, temps)
		}
		if got := strings.Contains(dom, `<line class="fault" data-round="230"`); got != tc.fault {
			t.Errorf("%s: fault marker of round 230 in the DOM: %v, want %v", tc.node, got, tc.fault)
		}
	}

	dir := os.Getenv("PEERBOOT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "peerboot-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, shot := range []struct{ name, node, size string }{{"burn-in-progress.png", running, "1000,1180"}, {"burn-in-report.png", finished, "1400,2600"}} {
		png := filepath.Join(dir, shot.name)
		os.Remove(png)
		chromium(t, e.http.URL+"/nodes/"+shot.node, "--screenshot="+png, "--window-size="+shot.size)
		b, err := os.ReadFile(png)
		if err != nil || len(b) < 10000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("screenshot %s: %d bytes, %v", png, len(b), err)
		}
		t.Logf("screenshot: %s (%d KiB)", png, len(b)>>10)
	}
}
