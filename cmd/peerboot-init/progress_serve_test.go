package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

// fakeSoakScenario is a healthy FAKE 4-GPU box (as cmd/p2pcheck's tests make it) whose
// GPUs warm from 55 °C to 71 °C from round 3.
func fakeSoakScenario(t *testing.T, pre *pcie.Result) *gpufake.Scenario {
	t.Helper()
	u32 := func(v uint32) *uint32 { return &v }
	n := len(pre.GPUs)
	s := &gpufake.Scenario{Fake: "FAKE soak posting progress to serve"}
	s.NVML = &gpufake.FakeNVML{DriverVersion: "550.163.01", CUDAVersion: 12040}
	for _, g := range pre.GPUs {
		s.NVML.GPUs = append(s.NVML.GPUs, gpufake.FakeNVMLGPU{BDF: g.BDF, Name: "NVIDIA GeForce RTX 4090", BAR1Total: uint64(g.BAR1Bytes), FBTotal: 48 << 30,
			LinkGen: 4, LinkWidth: uint32(g.Link.CurrentWidth), MaxGen: 4, MaxWidth: uint32(g.Link.MaxWidth), TempC: u32(55), SMClockMHz: u32(2520), PowerMW: u32(280000)})
	}
	for _, p := range pre.Pairs {
		level := -1
		for _, l := range []int{10, 20, 30, 40, 50} {
			if nvml.TopologyClass(l) == p.Topology {
				level = l
			}
		}
		s.NVML.Pairs = append(s.NVML.Pairs, gpufake.FakeNVMLPair{A: pre.GPUs[p.A].BDF, B: pre.GPUs[p.B].BDF, Level: level, NVLink: -1})
	}
	box := &gpufake.FakeConfig{DriverVersion: 12040, LocalGBps: 900, SMFactor: 0.95, PairGBps: make([][]float64, n)}
	for i, g := range pre.GPUs {
		box.GPUs = append(box.GPUs, gpufake.FakeGPU{Name: "NVIDIA GeForce RTX 4090", BDF: g.BDF, CC: "8.9", SMs: 128, MemBytes: 48 << 30})
		box.PairGBps[i] = make([]float64, n)
		for j := range n {
			if i != j {
				box.PairGBps[i][j] = 0.75 * pcie.PathLinkGBps(pre, i, j)
			}
		}
	}
	s.Box = box
	var warm []gpufake.FakeNVMLGPU
	for _, g := range s.NVML.GPUs {
		g.TempC = u32(71)
		warm = append(warm, g)
	}
	s.Soak = []gpufake.SoakStep{{Round: 3, NVMLGPUs: warm}}
	return s
}

// TestSoakProgressToServeFAKE is the burn-in's path end to end on loopback, with FAKE
// GPUs (selftest/gpufake: a 4-GPU box replayed in host memory; no GPU is involved):
// the init's boot runs p2pcheck (built -tags gpufake) with a 12-second soak, its
// poster POSTs the progress file to a real serve (netboot over SQLite) every second
// through the init's HTTP client, the fleet page shows the burn-in while it runs, and
// the final report replaces it, its soak series drawn on the node page.
func TestSoakProgressToServeFAKE(t *testing.T) {
	testguard.Short(t, "a FAKE soak runs dozens of phase processes")
	fs := startFakeServe(t, "")
	rc, hs := fs.recipe, fs.http
	const node = "52:54:00:00:00:51"
	tok := fs.token(node)

	// The node: the init's fake box with the recipe, and p2pcheck with FAKE GPUs.
	b := fakeSoakBox(t, rc, fmt.Sprintf("console=ttyS0 peerboot.soak=12s peerboot.soak_progress=1s peerboot.report_url=%s/reports?node=%s peerboot.token=%s", hs.URL, node, tok))

	done := make(chan struct{})
	go func() {
		defer close(done)
		b.m.run(&bootState{})
	}()
	// While it soaks, the fleet page says so.
	sawRunning := ""
	for sawRunning == "" {
		select {
		case <-done:
			t.Fatalf("the boot ended before the fleet page showed a running burn-in; serve's log:\n%s\nconsole:\n%s", fs.log(), b.console.String())
		case <-time.After(100 * time.Millisecond):
		}
		page := get(t, hs.URL+"/")
		if i := strings.Index(page, `<div class="burnin clean" data-state="running"`); i >= 0 {
			sawRunning = page[i:min(len(page), i+200)]
		}
	}
	t.Logf("FAKE: the fleet page while soaking: %s", sawRunning)
	if !strings.Contains(sawRunning, "burning in · ") || !strings.Contains(sawRunning, " of 12 s · ") {
		t.Errorf("burn-in line %q, want how far of the 12 s", sawRunning)
	}
	<-done
	r := b.onlyReport(t)
	if r.Soak == nil || r.Soak.Stopped != "duration" || r.Soak.Rounds < 3 {
		t.Fatalf("FAKE: the report's soak %+v, want 12 s of rounds; findings %v", r.Soak, r.Findings)
	}
	serveLog := fs.log()
	if n := strings.Count(serveLog, `msg="burn-in progress"`); n < 2 || !strings.Contains(serveLog, "state=finished") || !strings.Contains(serveLog, `msg="report stored"`) {
		t.Errorf("serve's log has %d progress POSTs (want the running and the finished), and the report:\n%s", n, serveLog)
	}
	page := get(t, hs.URL+"/")
	if strings.Contains(page, `class="burnin`) || !strings.Contains(page, `data-node="`+node+`"`) {
		t.Errorf("fleet page after the report: the burn-in line should be gone, the node listed")
	}
	page = get(t, hs.URL+"/nodes/"+node)
	for _, want := range []string{`<div id="soak-plot" data-from="report"`, `<svg class="soak-plot" data-kind="bandwidth"`, `<svg class="soak-plot" data-kind="temperature"`, `<polyline class="temp" data-gpu="3"`} {
		if !strings.Contains(page, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	if n := strings.Count(page, `<polyline class="pair"`); n != 12 {
		t.Errorf("node page: %d pair lines, want 12 (4 FAKE GPUs)", n)
	}
	var failing []string
	for _, f := range r.Findings {
		if f.Status == selftest.SevFail || f.Status == selftest.SevWarn {
			failing = append(failing, f.Status+" "+f.ID)
		}
		if strings.HasPrefix(f.ID, "soak.") && f.Status != selftest.SevInfo {
			t.Errorf("FAKE: a healthy soak found %s %s: %s", f.Status, f.ID, f.Message)
		}
	}
	// The verdict is not this test's: the FAKE box boots without the patched
	// driver's mode lines in its kernel log, which the recipe's P2P rules judge.
	t.Logf("FAKE: %d rounds in %s, %d progress POSTs, verdict %s (%v)", r.Soak.Rounds, time.Duration(r.Soak.ElapsedMS)*time.Millisecond, strings.Count(serveLog, `msg="burn-in progress"`), r.Verdict, failing)
}

// fakeSoakBox is the init's fake box booting cmdline with recipe rc, its p2pcheck the
// real one built -tags gpufake over a FAKE 4-GPU EPYC box (fakeSoakScenario), and
// its POSTs made by the init's own HTTP client, as main wires it.
func fakeSoakBox(t *testing.T, rc *recipe.Resolved, cmdline string) *fakeBox {
	t.Helper()
	b := newFakeBox(t, cmdline, &kmodtest.Loader{})
	testfs.Write(t, b.p(recipePath), string(rc.Canonical()))
	gpuRoot := filepath.Join(t.TempDir(), "gpuroot")
	if err := pcietest.Build(gpuRoot, pcietest.EPYC4GPU()); err != nil {
		t.Fatal(err)
	}
	pre, err := pcie.Scan(gpuRoot)
	if err != nil {
		t.Fatal(err)
	}
	scen, _ := json.Marshal(fakeSoakScenario(t, pre))
	testfs.Write(t, filepath.Join(gpuRoot, "scenario.json"), string(scen))
	testfs.Write(t, filepath.Join(gpuRoot, "kmsg"), "")
	bin := filepath.Join(t.TempDir(), "p2pcheck.fake")
	if o, err := exec.Command("go", "build", "-tags", "gpufake", "-o", bin, "../p2pcheck").CombinedOutput(); err != nil {
		t.Fatalf("building the FAKE p2pcheck: %v\n%s", err, o)
	}
	testfs.Write(t, b.p(p2pcheckPath), fmt.Sprintf("#!/bin/sh\necho \"$@\" > %s\nexec %s \"$@\" --root %s --fake %s --kmsg %s --copy-size 16KiB --no-nccl\n",
		b.p("/args"), bin, gpuRoot, filepath.Join(gpuRoot, "scenario.json"), filepath.Join(gpuRoot, "kmsg")))
	os.Chmod(b.p(p2pcheckPath), 0o755)
	b.m.post = retryPost(httpPost, time.Sleep)
	b.m.postProgress = func(url, token string, body []byte) ([]byte, error) {
		return retryPostAnswer(httpProgress, time.Sleep)(url, token, body, "")
	}
	return b
}

// TestSoakHaltFromServeFAKE: issue 32 item 4 end to end on loopback, with FAKE GPUs
// (as TestSoakProgressToServeFAKE). A 10-minute soak posts progress every second to a
// real serve; once the fleet page shows it running, the operator's write (POST
// /api/nodes/{node}/soak/stop with the operator token) asks it to stop. The node reads
// the stop in the answer to its next progress, the init sends p2pcheck SIGTERM, the
// soak ends after its round, the report (saved on the stick and POSTed) says serve
// asked, and the node's last progress says stopped.
func TestSoakHaltFromServeFAKE(t *testing.T) {
	testguard.Short(t, "a FAKE soak runs dozens of phase processes")
	ctx := context.Background()
	const operator = "operator-token-of-the-halt-test"
	fs := startFakeServe(t, operator)
	rc, st, hs := fs.recipe, fs.store, fs.http
	const node = "52:54:00:00:00:61"
	tok := fs.token(node)
	b := fakeSoakBox(t, rc, fmt.Sprintf("console=ttyS0 peerboot.soak=10m peerboot.soak_progress=1s peerboot.report_url=%s/reports?node=%s peerboot.token=%s", hs.URL, node, tok))

	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.m.run(&bootState{})
	}()
	for !strings.Contains(get(t, hs.URL+"/"), `<div class="burnin clean" data-state="running"`) {
		select {
		case <-done:
			t.Fatalf("the boot ended before the burn-in ran; serve's log:\n%s\nconsole:\n%s", fs.log(), b.console.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/api/nodes/"+node+"/soak/stop", strings.NewReader(`{"reason":"halt test"}`))
	req.Header.Set("Authorization", "Bearer "+operator)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	ans, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(ans), `"already": false`) {
		t.Fatalf("the stop: %d %s", resp.StatusCode, ans)
	}
	asked := time.Since(start)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the boot did not end within 3 minutes of the stop; console:\n%s", b.console.String())
	}
	took := time.Since(start)
	r := b.onlyReport(t)
	if r.Soak == nil || r.Soak.Stopped != "interrupted" || r.Soak.Rounds < 1 || r.Soak.ElapsedMS >= 10*60*1000 {
		t.Fatalf("FAKE: the report's soak %+v, want it interrupted well before its 10 minutes", r.Soak)
	}
	var halt *selftest.Finding
	for i, f := range r.Findings {
		if f.ID == "init.soak_halt" {
			halt = &r.Findings[i]
		}
	}
	if halt == nil || halt.Status != selftest.SevInfo || !strings.Contains(halt.Message, "serve asked this burn-in to stop (requested by 127.0.0.1 at ") ||
		!strings.Contains(halt.Message, ": halt test); the init ended p2pcheck's soak with SIGTERM, which stopped it after ") {
		t.Errorf("init.soak_halt finding %+v", halt)
	}
	con := b.console.String()
	for _, want := range []string{"burn-in: serve asks this burn-in to stop (requested by 127.0.0.1 at ", "p2pcheck: interrupted: soak ends after round ", "report saved as ", "report POSTed to " + hs.URL} {
		if !strings.Contains(con, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if n := strings.Count(con, "serve asks this burn-in to stop"); n != 1 {
		t.Errorf("the stop was acted on %d times, want once", n)
	}
	p, err := st.Progress(ctx, node)
	if err != nil || p == nil || p.State != selftest.SoakStopped || p.StopBy != "127.0.0.1" || p.StopReason != "halt test" {
		t.Errorf("the node's last progress %+v, %v; want stopped, the request kept", p, err)
	}
	serveLog := fs.log()
	if !strings.Contains(serveLog, `msg="burn-in stop sent to the node"`) || !strings.Contains(serveLog, `msg="report stored"`) {
		t.Errorf("serve's log lacks the stop sent and the report stored:\n%s", serveLog)
	}
	t.Logf("FAKE: stop asked at %s, the boot ended at %s: %d rounds in %s, soak stopped %q",
		asked.Round(time.Millisecond), took.Round(time.Millisecond), r.Soak.Rounds, time.Duration(r.Soak.ElapsedMS)*time.Millisecond, r.Soak.Stopped)
}

// TestSoakProgressNoServeFAKE: serve is not there. The FAKE soak runs its whole
// duration anyway, the console says each progress POST failed, and the final report
// is saved on the stick.
func TestSoakProgressNoServeFAKE(t *testing.T) {
	testguard.Short(t, "a FAKE soak runs dozens of phase processes")
	rc, err := recipe.Load(filepath.Join("..", "p2pcheck", "testdata", "epyc-dynamic.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close() // nothing listens there now: every POST is refused
	b := fakeSoakBox(t, rc, "console=ttyS0 peerboot.soak=6s peerboot.soak_progress=1s peerboot.report_url="+url+"/reports?node=n1 peerboot.token=0123456789abcdef.t0k")
	b.m.run(&bootState{})
	r := b.onlyReport(t)
	if r.Soak == nil || r.Soak.Stopped != "duration" || r.Soak.Rounds < 3 || r.Soak.ElapsedMS < 6000 {
		t.Fatalf("FAKE: the soak %+v, want its whole 6 s of rounds", r.Soak)
	}
	con := b.console.String()
	for _, want := range []string{"burn-in progress POST to " + url + "/progress?node=n1 failed: ", "; the soak goes on",
		"burn-in: no progress was POSTed", "report saved as ", "report POST to " + url + "/reports?node=n1 failed"} {
		if !strings.Contains(con, want) {
			t.Errorf("console lacks %q", want)
		}
	}
	t.Logf("FAKE: %d rounds in %s with serve down; %d progress POSTs failed", r.Soak.Rounds, time.Duration(r.Soak.ElapsedMS)*time.Millisecond, strings.Count(con, "burn-in progress POST to"))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// fakeServe is a real serve on loopback for the FAKE soak tests: a build of the
// FAKE box's recipe, a fresh SQLite store, its log kept for failure messages.
type fakeServe struct {
	recipe *recipe.Resolved
	builds *netboot.Builds
	srv    *netboot.Server
	store  *sqldb.DB
	http   *httptest.Server
	mu     sync.Mutex
	logs   strings.Builder
}

func startFakeServe(t *testing.T, operatorToken string) *fakeServe {
	t.Helper()
	ctx := context.Background()
	rc, err := recipe.Load(filepath.Join("..", "p2pcheck", "testdata", "epyc-dynamic.toml"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	testfs.Write(t, filepath.Join(out, "manifest.json"), fmt.Sprintf(`{"recipe":%q,"recipe_digest":%q,"outputs":[]}`, rc.Name, rc.Digest))
	builds, err := netboot.LoadBuilds([]string{out})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fs := &fakeServe{recipe: rc, builds: builds, store: st}
	logTo := writerFunc(func(p []byte) (int, error) { fs.mu.Lock(); defer fs.mu.Unlock(); return fs.logs.Write(p) })
	fs.srv, err = netboot.New(ctx, netboot.Options{Builds: builds, Store: st, RateEvery: time.Second, RateBurst: 3, OperatorToken: operatorToken,
		Log: slog.New(slog.NewTextHandler(logTo, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fs.http = httptest.NewServer(fs.srv)
	t.Cleanup(fs.http.Close)
	return fs
}

// token is the report token serve gives node for the build.
func (fs *fakeServe) token(node string) string { return fs.srv.Token(fs.builds.All()[0].ID, node) }

func (fs *fakeServe) log() string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.logs.String()
}
