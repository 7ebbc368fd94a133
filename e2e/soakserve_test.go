package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// soakInventory gives the VM a burn-in through serve: the inventory's args reach its
// kernel line (peerboot.soak=, and progress every 5 s instead of 3 min).
const soakInventory = `default = "default"

[[node]]
mac = "52:54:00:12:34:56"
name = "burn-in-vm"
args = "peerboot.soak=45s peerboot.soak_progress=5s"
`

// TestBurnInProgressToServe PXE-boots the default image from `peerboot serve` in
// QEMU (no GPU) with peerboot.soak= from the inventory: the init asks p2pcheck for the
// soak and its progress file, and POSTs the progress to serve's /progress with the
// node's token before the final report. The VM has no GPU and the default recipe
// expects none, so the soak is skipped, and the progress it posts says so: the fleet
// knew the burn-in's outcome before the report came.
func TestBurnInProgressToServe(t *testing.T) {
	testguard.Short(t, "builds the default image and boots QEMU; runs in `make test`")
	outRoot := t.TempDir()
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	inv := filepath.Join(t.TempDir(), "inventory.toml")
	if err := os.WriteFile(inv, []byte(soakInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, "--out", outRoot, "--db", filepath.Join(t.TempDir(), "reports.db"), "--inventory", inv)
	r, console, res := srv.pxeBoot(t)
	if !strings.Contains(r.Kernel.Cmdline, "peerboot.soak=45s peerboot.soak_progress=5s") {
		t.Fatalf("the inventory's args are not on the node's command line: %q", r.Kernel.Cmdline)
	}
	progressURL := "http://10.0.2.2:" + srv.port + "/progress?node=52:54:00:12:34:56"
	for _, want := range []string{
		"burn-in: soaking for 45s after the self-test (peerboot.soak)",
		"burn-in: progress goes to " + progressURL + " every 5s",
		"burn-in progress POSTed to " + progressURL + ": skipped, 0 rounds, 0 faulty",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("console lacks %q:\n%s", want, tailOf(console, 60))
		}
	}
	srv.posted(t, console)
	logs := srv.logs.String()
	p, rep := strings.Index(logs, `msg="burn-in progress"`), strings.Index(logs, `msg="report stored"`)
	if p < 0 || rep < p || !strings.Contains(logs[p:rep], "state=skipped") || !strings.Contains(logs[p:rep], "node=52:54:00:12:34:56") {
		t.Errorf("serve's log: want the node's skipped progress stored, then its report:\n%s", logs)
	}
	var skipped *selftest.Finding
	for i := range r.Findings {
		if r.Findings[i].ID == "soak.skipped" {
			skipped = &r.Findings[i]
		}
	}
	if r.Verdict != selftest.Pass || skipped == nil {
		t.Errorf("verdict %s, soak.skipped %+v; fail findings:\n%s", r.Verdict, skipped, failFindings(r))
	}
	// The report came after the progress: the fleet page shows the report.
	resp, err := http.Get("http://" + srv.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(page), `class="burnin`) || !strings.Contains(string(page), `data-node="52:54:00:12:34:56" data-verdict="pass"`) {
		t.Errorf("fleet page after the report:\n%s", page)
	}
	t.Logf("burn-in boot from serve in %s (%s): %s; %s", res.Duration.Round(time.Second), res.Accel, lineWith(console, "burn-in progress POSTed"), lineWith(console, "report POST"))
}
