package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/selftest"
)

func TestProgressEvery(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    time.Duration
		warn    string
	}{
		{"", bootproto.DefaultSoakProgressEvery, ""},
		{"peerboot.soak_progress=30s", 30 * time.Second, ""},
		{"peerboot.soak_progress=often", bootproto.DefaultSoakProgressEvery, "peerboot.soak_progress=often ignored: want a duration such as 30s or 5m; progress goes every 3m0s"},
		{"peerboot.soak_progress=-1s", bootproto.DefaultSoakProgressEvery, "ignored"},
	} {
		got, warn := progressEvery(parseCmdline(tc.cmdline))
		if got != tc.want || !strings.Contains(warn, tc.warn) || (tc.warn == "") != (warn == "") {
			t.Errorf("%q: %s %q, want %s %q", tc.cmdline, got, warn, tc.want, tc.warn)
		}
	}
}

func progressDoc(t *testing.T, state string, rounds int) []byte {
	t.Helper()
	b, err := selftest.EncodeSoakProgress(&selftest.SoakProgress{Schema: selftest.SoakProgressSchema, State: state, RequestedMS: 3600000, Rounds: rounds,
		Pairs: []selftest.SoakPairNow{}, GPUs: []selftest.SoakGPU{}, Plot: selftest.NewSoakPlot(nil, 1, selftest.SoakMaxPoints)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProgressPoster: the file goes out when it changed, not again when it did not,
// a failed POST is said and tried at the next tick, a file that is no progress is not
// sent, and stop sends the last state.
func TestProgressPoster(t *testing.T) {
	file := filepath.Join(t.TempDir(), "soak-progress.json")
	var mu sync.Mutex
	var bodies []string
	fail := true
	p := &progressPoster{url: "http://serve/progress?node=n", token: "tok", file: file, console: &lockedWriter{w: &strings.Builder{}},
		post: func(url, token string, body []byte) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if url != "http://serve/progress?node=n" || token != "tok" {
				t.Errorf("POST %s token %s", url, token)
			}
			if fail {
				fail = false
				return nil, errors.New("connection refused")
			}
			bodies = append(bodies, string(body))
			return nil, nil
		}}
	posted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies)
	}
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); posted() < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d POSTs, want %d", posted(), n)
			}
		}
	}
	stop := p.watch(10 * time.Millisecond)
	os.WriteFile(file, progressDoc(t, "running", 3), 0o644)
	waitFor(1) // the first try failed, the next tick sent it
	time.Sleep(50 * time.Millisecond)
	if posted() != 1 {
		t.Errorf("an unchanged file went out %d times", posted())
	}
	os.WriteFile(file, []byte(`{"schema":1,"state":"torn`), 0o644)
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(file, progressDoc(t, "finished", 9), 0o644)
	n := stop()
	if n != 2 || posted() != 2 || !strings.Contains(bodies[1], `"state":"finished"`) {
		t.Errorf("stop: %d posted, bodies %q; want the running and the finished one", n, bodies)
	}
	if out := p.console.(*lockedWriter).w.(*strings.Builder).String(); !strings.Contains(out, "burn-in progress POST to http://serve/progress?node=n failed: connection refused; the soak goes on") ||
		!strings.Contains(out, "soak-progress.json: soak progress: 1:26: not JSON") {
		t.Errorf("console:\n%s", out)
	}
}

// TestProgressPosterNetworkDown: when the last POST failed, stop does not try again
// (each try, with its retries, would hold up the report, which carries everything).
func TestProgressPosterNetworkDown(t *testing.T) {
	file := filepath.Join(t.TempDir(), "soak-progress.json")
	os.WriteFile(file, progressDoc(t, "running", 3), 0o644)
	var mu sync.Mutex
	tries := 0
	var console strings.Builder
	p := &progressPoster{url: "http://serve/progress", file: file, console: &lockedWriter{w: &console},
		post: func(string, string, []byte) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			tries++
			return nil, errors.New("no route to host")
		}}
	stop := p.watch(10 * time.Millisecond)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := tries
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no POST was tried")
		}
	}
	os.WriteFile(file, progressDoc(t, "finished", 9), 0o644)
	mu.Lock()
	before := tries
	mu.Unlock()
	if n := stop(); n != 0 {
		t.Errorf("stop says %d POSTed", n)
	}
	// At most the tick in flight when stop came, never a final try after it.
	if tries > before+1 || !strings.Contains(console.String(), "burn-in: the last progress is not sent (the POST before it failed); the report follows") {
		t.Errorf("%d tries before stop, %d after; console:\n%s", before, tries, console.String())
	}
}

// TestBootSoakProgress: a burn-in boot with a report URL has p2pcheck write its
// progress and POSTs it beside the report URL with the report's token, then the
// report. On this GPU-less box the soak is skipped, and the progress says so.
func TestBootSoakProgress(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0 peerboot.soak=2s peerboot.soak_progress=1s peerboot.report_url=http://10.0.2.2:9/reports?node=n1 peerboot.token=0123456789abcdef.t0k",
		&kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	var progress []byte
	b.m.post = func(url, token string, body []byte, attestation string) error {
		b.posts = append(b.posts, url+" token="+token)
		if strings.Contains(url, "/progress") {
			progress = body
		}
		return nil
	}
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	args, _ := os.ReadFile(b.p("/args"))
	if !strings.Contains(string(args), "--soak 2s") || !strings.Contains(string(args), "--soak-progress "+b.p(bootproto.SoakProgressFile)) {
		t.Errorf("p2pcheck args %q", args)
	}
	want := []string{"http://10.0.2.2:9/progress?node=n1 token=0123456789abcdef.t0k", "http://10.0.2.2:9/reports?node=n1 token=0123456789abcdef.t0k"}
	if strings.Join(b.posts, "\n") != strings.Join(want, "\n") {
		t.Errorf("POSTs:\n%s\nwant:\n%s", strings.Join(b.posts, "\n"), strings.Join(want, "\n"))
	}
	p, err := selftest.DecodeSoakProgress(progress)
	if err != nil || p.State != selftest.SoakSkipped || !strings.Contains(p.Message, "the 2s soak was skipped") || p.RequestedMS != 2000 {
		t.Errorf("progress %+v, %v; want skipped, saying why", p, err)
	}
	if findingWith(r, "soak.skipped") == nil || !strings.Contains(b.console.String(), "burn-in: progress goes to http://10.0.2.2:9/progress?node=n1 every 1s") ||
		!strings.Contains(b.console.String(), "burn-in progress POSTed to http://10.0.2.2:9/progress?node=n1: skipped, 0 rounds") {
		t.Errorf("findings %v; console:\n%s", r.Findings, b.console.String())
	}
}

// TestBootSoakProgressNoNetwork: every POST fails; the soak and the report are not
// held up by it, and the report is still saved on the stick.
func TestBootSoakProgressNoNetwork(t *testing.T) {
	b := newFakeBox(t, "console=ttyS0 peerboot.soak=2s peerboot.report_url=http://10.0.2.2:9/reports peerboot.token=0123456789abcdef.t0k",
		&kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
	b.m.run(&bootState{})
	b.onlyReport(t)
	con := b.console.String()
	for _, want := range []string{"burn-in progress POST to http://10.0.2.2:9/progress failed: network unreachable; the soak goes on",
		"burn-in: no progress was POSTed", "report saved as ", "report POST to http://10.0.2.2:9/reports failed: network unreachable"} {
		if !strings.Contains(con, want) {
			t.Errorf("console lacks %q:\n%s", want, con)
		}
	}
}

// TestProgressAnswer: serve's answer to a progress POST. Only an explicit stop closes
// halt, once, and is kept for the report; an answer that is not serve's JSON or is
// too long is said once and ignored, and the soak goes on.
func TestProgressAnswer(t *testing.T) {
	at := time.Date(2026, 12, 3, 20, 7, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		answers []string
		stop    bool
		console string
	}{
		{"no answer read", []string{""}, false, ""},
		{"running", []string{`{"node":"n","state":"running","rounds":3}`}, false, ""},
		{"stop", []string{`{"node":"n","state":"running","rounds":3}`, `{"node":"n","state":"running","rounds":4,"stop":true,"stop_requested_at":"2026-12-03T20:07:00Z","stop_by":"10.0.0.9","stop_reason":"rack 4"}`,
			`{"node":"n","state":"running","rounds":5,"stop":true,"stop_requested_at":"2026-12-03T21:00:00Z","stop_by":"10.0.0.10"}`},
			true, "serve asks this burn-in to stop (requested by 10.0.0.9 at 2026-12-03T20:07:00Z: rack 4); ending the soak after this round"},
		{"not JSON", []string{"<html>", "<html>"}, false, "serve's answer to the progress is not its JSON"},
		{"too long", []string{`{"stop":true,"stop_by":"` + strings.Repeat("x", 5000) + `"}`}, false, "over 4096 bytes; ignored"},
		{"stop is a bool", []string{`{"stop":"yes"}`}, false, "not its JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var console strings.Builder
			p := &progressPoster{console: &console, halt: make(chan struct{})}
			for _, a := range tc.answers {
				var ans []byte
				if a != "" {
					ans = []byte(a)
				}
				p.answer(ans) // a second stop must not close halt again (that panics)
			}
			closed := false
			select {
			case <-p.halt:
				closed = true
			default:
			}
			if closed != tc.stop || (p.stopped != nil) != tc.stop {
				t.Fatalf("halt closed %v, stopped %+v; want %v", closed, p.stopped, tc.stop)
			}
			if tc.stop && (!p.stopped.StopAt.Equal(at) || p.stopped.StopBy != "10.0.0.9" || p.stopped.StopReason != "rack 4") {
				t.Errorf("kept %+v, want the first stop", p.stopped)
			}
			out := console.String()
			if (tc.console == "") != (out == "") || !strings.Contains(out, tc.console) || strings.Count(out, "\n") > 1 {
				t.Errorf("console %q, want one line with %q", out, tc.console)
			}
		})
	}
}
