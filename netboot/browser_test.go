package netboot

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

// chromium runs Debian's chromium headless against url with the extra flags and
// returns its stdout.
func chromium(t *testing.T, url string, flags ...string) []byte {
	t.Helper()
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		if os.Getenv("PEERBOOT_REQUIRE_CHROMIUM") != "" {
			t.Fatal("chromium is not installed: apt-get install chromium")
		}
		testguard.Skip(t, "chromium is not installed (make deps installs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--hide-scrollbars", "--user-data-dir=" + t.TempDir()}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", url, err, lastLines(stderr.String(), 20))
	}
	return stdout.Bytes()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestFleetPageInChromium loads the fleet page and both fixture nodes' pages (8-GPU
// xeon, 4-GPU epyc) in headless Chromium, checks the verdicts and the heatmap cells in
// the DOM the browser built, and saves a screenshot of the 8-GPU node as an artifact
// ($PEERBOOT_ARTIFACTS, default $TMPDIR/peerboot-artifacts).
func TestFleetPageInChromium(t *testing.T) {
	testguard.Short(t, "starts a browser")
	e := seededEnv(t, Options{})

	dom := string(chromium(t, e.http.URL+"/", "--dump-dom"))
	rows := regexp.MustCompile(`<tr class="node" data-node="([^"]+)" data-verdict="([a-z]*)">`).FindAllStringSubmatch(dom, -1)
	verdicts := map[string]string{}
	for _, r := range rows {
		verdicts[r[1]] = r[2]
	}
	if len(rows) != 3 || verdicts["02:00:00:00:08:01"] != "fail" || verdicts["02:00:00:00:04:01"] != "pass" || verdicts[DemoBurnIn] != "" {
		t.Errorf("fleet rows in the DOM: %v", rows)
	}
	if !strings.Contains(dom, `<span class="verdict fail">fail</span>`) || !strings.Contains(dom, `<span class="verdict pass">pass</span>`) {
		t.Error("verdict badges missing from the DOM")
	}

	cell := regexp.MustCompile(`<td class="cell( failed)?( local)?" data-src="(\d+)" data-dst="(\d+)" data-gbps="([0-9.]*)" data-topo="([A-Z]*)"`)
	for _, tc := range []struct {
		node   string
		gpus   int
		failed []string // "src-dst"
		topo   map[string]string
	}{
		{"02:00:00:00:08:01", 8, []string{"5-6"}, map[string]string{"0-1": "PIX", "0-2": "NODE", "0-4": "SYS", "7-6": "PIX"}},
		{"02:00:00:00:04:01", 4, nil, map[string]string{"0-1": "PHB", "1-2": "NODE"}},
	} {
		dom := string(chromium(t, e.http.URL+"/nodes/"+tc.node, "--dump-dom"))
		cells := cell.FindAllStringSubmatch(dom, -1)
		if len(cells) != tc.gpus*tc.gpus {
			t.Errorf("%s: %d heatmap cells in the DOM, want %d", tc.node, len(cells), tc.gpus*tc.gpus)
			continue
		}
		var failed []string
		for _, c := range cells {
			key := c[3] + "-" + c[4]
			if c[1] != "" {
				failed = append(failed, key)
			}
			if c[2] != "" != (c[3] == c[4]) {
				t.Errorf("%s: cell %s local mark %q", tc.node, key, c[2])
			}
			if want, ok := tc.topo[key]; ok && c[6] != want {
				t.Errorf("%s: cell %s topology %s, want %s", tc.node, key, c[6], want)
			}
			if c[1] == "" && c[5] == "" {
				t.Errorf("%s: cell %s has no figure", tc.node, key)
			}
		}
		if strings.Join(failed, ",") != strings.Join(tc.failed, ",") {
			t.Errorf("%s: failed cells %v, want %v", tc.node, failed, tc.failed)
		}
		if n := strings.Count(dom, `<circle class="pt"`); n != 11 {
			t.Errorf("%s: %d NCCL points, want 11", tc.node, n)
		}
	}

	dir := os.Getenv("PEERBOOT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "peerboot-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"fleet-node-8gpu.png": "/nodes/02:00:00:00:08:01", "fleet.png": "/"} {
		png := filepath.Join(dir, name)
		os.Remove(png)
		chromium(t, e.http.URL+path, "--screenshot="+png, "--window-size=1400,1900")
		b, err := os.ReadFile(png)
		if err != nil || len(b) < 10000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("screenshot %s: %d bytes, %v", png, len(b), err)
		}
		t.Logf("screenshot: %s (%d KiB)", png, len(b)>>10)
	}
}
