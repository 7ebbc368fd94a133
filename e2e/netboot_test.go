package e2e

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// TestPXEFromServe boots the default image the way a rack would: `peerboot serve` on
// 127.0.0.1, QEMU's iPXE (user-mode networking, the host is 10.0.2.2) chains
// /boot.ipxe?mac=${net0/mac}, fetches the kernel and the initrd over HTTP from the
// server; the node's init gets an address by DHCP and POSTs its self-test report with
// the token issued to it (bound to its MAC and the build), which must reach the
// server's database and its page with a PASS verdict.
func TestPXEFromServe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the default image and boots it in QEMU; runs in `make test`")
	}
	outRoot := t.TempDir()
	fetchBuildDefault(t, outRoot)

	// The server, as an operator runs it.
	srv := startServe(t, "--out", outRoot, "--db", filepath.Join(t.TempDir(), "reports.db"))
	base, port, logs := srv.base, srv.port, srv.logs
	r, console, res := srv.pxeBoot(t)
	wantURL := "peerboot.report_url=http://10.0.2.2:" + port + "/reports?node=52:54:00:12:34:56"
	if !strings.Contains(r.Kernel.Cmdline, wantURL) || !strings.Contains(r.Kernel.Cmdline, "peerboot.token=") {
		t.Errorf("the node's command line lacks the report URL and token: %q", r.Kernel.Cmdline)
	}
	for _, want := range []string{"boot script", "node=52:54:00:12:34:56"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("server log lacks %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), "file refused") {
		t.Errorf("the server refused a file iPXE asked for:\n%s", logs.String())
	}

	// The report must reach the server from the node itself: the init brings up the
	// NIC by DHCP (slirp's server gives 10.0.2.15/24, router 10.0.2.2) and POSTs it.
	var network *selftest.Finding
	for i := range r.Findings {
		if r.Findings[i].ID == "init.network" {
			network = &r.Findings[i]
		}
	}
	if network == nil || network.Status != selftest.SevInfo || !strings.Contains(network.Message, ": 10.0.2.15/24 from DHCP server 10.0.2.2, router 10.0.2.2") {
		t.Errorf("the node's network finding is not a DHCP lease on 10.0.2.0/24: %+v", network)
	}
	srv.posted(t, console)
	t.Logf("node: %s; %s", lineWith(console, "peerboot: network:"), lineWith(console, "report POST"))
	resp, err := http.Get("http://" + base + "/nodes/52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `<span class="verdict `+r.Verdict+`">`) {
		t.Errorf("node page: %s\n%s", resp.Status, page)
	}
	// Issue 21: the default image on QEMU's virtual hardware passes its self-test.
	if r.Verdict != selftest.Pass {
		t.Errorf("the node's verdict is %q, want pass; fail findings:\n%s", r.Verdict, failFindings(r))
	}
	if !strings.Contains(logs.String(), "verdict=pass") {
		t.Errorf("the server did not store a pass verdict:\n%s", logs.String())
	}
	t.Logf("booted from peerboot serve in %s (%s); verdict %s", res.Duration.Round(time.Second), res.Accel, r.Verdict)
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tailOf(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return "no line with " + strconv.Quote(sub)
}
