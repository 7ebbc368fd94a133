package netboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/selftest"
)

// The test binary doubles as a server process for the crash test: with helperEnv set,
// TestMain runs helperMain instead of the tests.
const helperEnv = "PEERBOOT_NETBOOT_HELPER"

var crashSecret = []byte("crash-test-secret-0123456789abcd")

// helperMain serves NETBOOT_OUT with the SQLite database NETBOOT_DB on a loopback port
// it writes to NETBOOT_ADDR, until it is killed.
func helperMain() int {
	switch os.Getenv(helperEnv) {
	case "tftp":
		return tftpHelper()
	case "proxydhcp":
		return proxyDHCPHelper()
	}
	bs, err := LoadBuilds([]string{os.Getenv("NETBOOT_OUT")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, err := sqldb.OpenSQLite(context.Background(), os.Getenv("NETBOOT_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := New(context.Background(), Options{Builds: bs, Store: st, Secret: crashSecret, RateBurst: 1 << 20, SourceBurst: 1 << 20, // 16 workers share 127.0.0.1
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmp := os.Getenv("NETBOOT_ADDR") + ".tmp"
	os.WriteFile(tmp, []byte(ln.Addr().String()), 0o644)
	os.Rename(tmp, os.Getenv("NETBOOT_ADDR"))
	fmt.Fprintln(os.Stderr, http.Serve(ln, s))
	return 1
}

func startHelper(t *testing.T, out, db string) (*exec.Cmd, string) {
	t.Helper()
	addrFile := filepath.Join(t.TempDir(), "addr")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "NETBOOT_OUT="+out, "NETBOOT_DB="+db, "NETBOOT_ADDR="+addrFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if b, err := os.ReadFile(addrFile); err == nil {
			return cmd, "http://" + string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	t.Fatalf("the server did not start: %s", stderr.String())
	return nil, ""
}

// TestKillDuringPosts kills the server with SIGKILL in the middle of a burst of report
// POSTs: every report it acknowledged with 201 is in the database afterwards, and a
// restarted server refuses those reports as replays.
func TestKillDuringPosts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server process")
	}
	out := filepath.Join(t.TempDir(), "default")
	fakeBuild(t, out, "default", 4096)
	b, err := LoadBuild(out)
	if err != nil {
		t.Fatal(err)
	}
	// Tokens are per node: each worker's own, as its boot script would give it.
	tokenOf := func(node string) string { return (&Server{secret: crashSecret}).Token(b.ID, node) }
	db := filepath.Join(t.TempDir(), "reports.db")
	cmd, base := startHelper(t, out, db)

	const workers = 16
	var (
		mu      sync.Mutex
		acked   = map[string][]string{} // node -> sha256 of each acknowledged report
		ackN    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			node := fmt.Sprintf("52:54:00:00:01:%02x", w)
			for i := 0; !stopped.Load(); i++ {
				r := DemoReport(Epyc4GPU, i, false)
				r.Recipe.Name = "default"
				r.StartedAt = fmt.Sprintf("2026-01-01T00:00:00Z-%d-%d", w, i)
				body, _ := selftest.Encode(r)
				req, _ := http.NewRequest("POST", base+"/reports?node="+node, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tokenOf(node))
				resp, err := client.Do(req)
				if err != nil {
					return // the server is gone
				}
				var ok struct {
					SHA256 string `json:"sha256"`
				}
				json.NewDecoder(resp.Body).Decode(&ok)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					mu.Lock()
					acked[node] = append(acked[node], ok.SHA256)
					mu.Unlock()
					ackN.Add(1)
				}
			}
		}(w)
	}
	deadline := time.Now().Add(30 * time.Second)
	for ackN.Load() < 150 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred close, no flush
		t.Fatal(err)
	}
	cmd.Wait()
	stopped.Store(true)
	wg.Wait()
	if ackN.Load() < 150 {
		t.Fatalf("only %d reports acknowledged before the deadline", ackN.Load())
	}

	st, err := sqldb.OpenSQLite(context.Background(), db)
	if err != nil {
		t.Fatalf("reopening after the kill: %v", err)
	}
	total, _ := st.Count(context.Background())
	lost := 0
	for node, sums := range acked {
		stored := map[string]bool{}
		hist, err := st.Reports(context.Background(), node, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hist {
			stored[h.SHA256] = true
		}
		for _, s := range sums {
			if !stored[s] {
				lost++
			}
		}
	}
	st.Close()
	t.Logf("%d acknowledged, %d stored, %d lost", ackN.Load(), total, lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged reports lost", lost)
	}
	if total < ackN.Load() {
		t.Fatalf("%d stored < %d acknowledged", total, ackN.Load())
	}

	// The restarted server has them: the same node sending an acknowledged report again
	// (a retry) is told it is stored, by a 200 naming it a duplicate.
	cmd, base = startHelper(t, out, db)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	node := "52:54:00:00:01:00"
	if len(acked[node]) == 0 {
		t.Fatal("worker 0 had no report acknowledged")
	}
	r := DemoReport(Epyc4GPU, 0, false)
	r.Recipe.Name = "default"
	r.StartedAt = "2026-01-01T00:00:00Z-0-0"
	body, _ := selftest.Encode(r)
	req, _ := http.NewRequest("POST", base+"/reports?node="+node, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokenOf(node))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var dup struct {
		ID        int64 `json:"id"`
		Duplicate bool  `json:"duplicate"`
	}
	json.NewDecoder(resp.Body).Decode(&dup)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !dup.Duplicate || dup.ID == 0 {
		t.Errorf("retry to the restarted server: %d %+v, want 200 naming the stored report a duplicate", resp.StatusCode, dup)
	}
}

// tftpHelper serves NETBOOT_TFTP_DIR over TFTP on NETBOOT_LISTEN (run inside a
// network namespace by the test) and touches NETBOOT_ADDR once listening.
func tftpHelper() int {
	pc, err := net.ListenPacket("udp4", os.Getenv("NETBOOT_LISTEN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.WriteFile(os.Getenv("NETBOOT_ADDR"), []byte(pc.LocalAddr().String()), 0o644)
	srv := &TFTP{Dir: os.Getenv("NETBOOT_TFTP_DIR"), Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	fmt.Fprintln(os.Stderr, srv.Serve(context.Background(), pc))
	return 1
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// proxyDHCPHelper answers PXE clients on NETBOOT_IFACE (port 67) for the netns test.
func proxyDHCPHelper() int {
	pc, err := ListenProxyDHCP(context.Background(), os.Getenv("NETBOOT_IFACE"), "0.0.0.0:67")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.WriteFile(os.Getenv("NETBOOT_ADDR"), []byte(pc.LocalAddr().String()), 0o644)
	p := &ProxyDHCP{Interface: os.Getenv("NETBOOT_IFACE"), ServerIP: net.ParseIP(os.Getenv("NETBOOT_SERVER_IP")),
		Chain: os.Getenv("NETBOOT_CHAIN"), Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	fmt.Fprintln(os.Stderr, p.Serve(context.Background(), pc))
	return 1
}
