package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

// In a fresh clone with nothing built, serve --demo serves the fleet pages with
// its three example nodes (one failing, one burning in), and headless Chromium renders them: the
// first minute of a newcomer. The screenshot goes to $PEERBOOT_ARTIFACTS
// (default $TMPDIR/peerboot-artifacts) as demo-fresh.png.
func TestServeDemoWithNothingBuilt(t *testing.T) {
	fresh := t.TempDir() // no out/ at all
	addr := startServe(t, "--demo", "--out", filepath.Join(fresh, "out"), "--listen", "127.0.0.1:0")
	base := "http://" + addr
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, page := get("/")
	if code != 200 || !strings.Contains(page, "demo-xeon-8gpu") || !strings.Contains(page, "demo-epyc-4gpu") {
		t.Fatalf("fleet page: %d\n%s", code, page)
	}
	code, body := get("/api/nodes")
	var nodes []struct {
		Hostname string `json:"hostname"`
		Latest   struct {
			Verdict string `json:"verdict"`
		} `json:"latest"`
	}
	if err := json.Unmarshal([]byte(body), &nodes); code != 200 || err != nil || len(nodes) != 3 {
		t.Fatalf("/api/nodes: %d %v\n%s", code, err, body)
	}
	verdicts := map[string]string{}
	for _, n := range nodes {
		verdicts[n.Hostname] = n.Latest.Verdict
	}
	if verdicts["demo-xeon-8gpu"] != "fail" || verdicts["demo-epyc-4gpu"] != "pass" || verdicts["demo-4090-48g-burnin"] != "" {
		t.Errorf("demo verdicts %v: want the 8-GPU node failing, the 4-GPU one passing, the burn-in without a report", verdicts)
	}
	if !strings.Contains(page, "burning in · 3 h 00 of 12 h 00 · 360 rounds · clean") {
		t.Errorf("the fleet page does not show the demo's burn-in:\n%s", page)
	}
	// Nothing is built, so no node may be handed a boot script.
	if code, _ := get("/boot.ipxe?mac=52:54:00:12:34:56"); code == 200 {
		t.Error("a demo with nothing built served a boot script")
	}

	if testing.Short() {
		return
	}
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		testguard.Skip(t, "chromium is not installed (make test-deps installs it)")
	}
	dir := os.Getenv("PEERBOOT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "peerboot-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(dir, "demo-fresh.png")
	os.Remove(png)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir="+t.TempDir(), "--window-size=1400,1000", "--screenshot="+png, base+"/")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(png)
	if err != nil || len(b) < 10000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, %v", png, len(b), err)
	}
	t.Logf("screenshot: %s (%d KiB)", png, len(b)>>10)
}
