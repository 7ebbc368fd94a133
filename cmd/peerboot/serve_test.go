package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fakeOutput writes the smallest build output serve accepts: a manifest and a PXE bundle.
func fakeOutput(t *testing.T, root, recipe string) {
	t.Helper()
	dir := filepath.Join(root, recipe)
	os.MkdirAll(filepath.Join(dir, "pxe"), 0o755)
	for name, body := range map[string]string{
		"pxe/vmlinuz": "kernel", "pxe/initrd.img": "initrd",
		"pxe/boot.ipxe": "#!ipxe\nkernel vmlinuz console=ttyS0\ninitrd initrd.img\nboot\n",
	} {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	m, _ := json.Marshal(map[string]any{"recipe": recipe, "outputs": []map[string]string{
		{"path": "pxe/vmlinuz", "sha256": strings.Repeat("a", 64)}, {"path": "pxe/initrd.img", "sha256": strings.Repeat("b", 64)},
	}})
	os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o644)
}

func TestServeUsageErrors(t *testing.T) {
	empty := t.TempDir()
	_, errs, code := run(t, "serve", "--demo", "--out", empty, "extra")
	if code != 2 || !strings.Contains(errs, "--demo serves out/default: give no OUTDIR") {
		t.Errorf("--demo with an OUTDIR: exit %d, %s", code, errs)
	}
	_, errs, code = run(t, "serve", "--out", empty)
	if code != 2 || !strings.Contains(errs, "no build output under") {
		t.Errorf("no builds: exit %d, %s", code, errs)
	}
	out := t.TempDir()
	fakeOutput(t, out, "default")
	inv := filepath.Join(t.TempDir(), "rack.toml")
	os.WriteFile(inv, []byte("default = \"default\"\n[[node]]\nmac = \"nope\"\nrecipe = \"xeon\"\n"), 0o644)
	_, errs, code = run(t, "serve", "--out", out, "--inventory", inv)
	if code != 3 || !strings.Contains(errs, "rack.toml:3: node[0].mac: want a MAC address") {
		t.Errorf("bad inventory: exit %d, %s", code, errs)
	}
	for _, bad := range [][]string{{"--keep-reports", "0"}, {"--keep-report-bytes", "lots"}, {"--max-conns", "0"}, {"--body-timeout", "0s"}} {
		_, errs, code = run(t, append([]string{"serve", "--out", out, "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "r.db")}, bad...)...)
		if code != 2 || !strings.Contains(errs, bad[0]) {
			t.Errorf("%v: exit %d, %s", bad, code, errs)
		}
	}
	_, errs, code = run(t, "serve", "--out", out, "--tftp", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "r.db"))
	if code != 2 || !strings.Contains(errs, "--public-url") {
		t.Errorf("--tftp without --public-url: exit %d, %s", code, errs)
	}
}

// startServe runs the real `peerboot serve` with args (which listen on
// 127.0.0.1:0), interrupted at cleanup, and returns the address it says it
// listens on.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(peerboot, append([]string{"serve"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	addr := ""
	deadline := time.Now().Add(20 * time.Second)
	for addr == "" && time.Now().Before(deadline) && sc.Scan() {
		if m := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+)`).FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatal("serve did not say where it listens")
	}
	go io.Copy(io.Discard, stdout)
	return addr
}

// TestServeCommand starts the real command and fetches a boot script from it.
func TestServeCommand(t *testing.T) {
	out := t.TempDir()
	fakeOutput(t, out, "default")
	db := filepath.Join(t.TempDir(), "r.db")
	addr := startServe(t, "--out", out, "--listen", "127.0.0.1:0", "--db", db, "--body-timeout", "2s")
	resp, err := http.Get("http://" + addr + "/boot.ipxe?mac=52:54:00:12:34:56")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "peerboot.token=") || !strings.Contains(string(b), "console=ttyS0") {
		t.Errorf("%s\n%s", resp.Status, b)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Error("no nosniff on the boot script")
	}
	// The database holds the token secret (issue 15 item 9).
	if fi, err := os.Stat(db); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("database mode: %v, %v", fi.Mode(), err)
	}
	// A client that sends headers and no body is cut off by --body-timeout (issue 15
	// item 5; before, it held its connection for ever); one with a wrong token is
	// answered at once.
	tok := regexp.MustCompile(`peerboot\.token=(\S+)`).FindStringSubmatch(string(b))
	for _, c := range []struct{ token, want string }{{tok[1], "HTTP/1.1 408"}, {"x", "HTTP/1.1 403"}} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		fmt.Fprintf(conn, "POST /reports?node=52:54:00:12:34:56 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n", c.token)
		conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		reply, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.HasPrefix(string(reply), c.want) || time.Since(t0) > 10*time.Second {
			t.Errorf("a POST without its body, token %.8s: after %v, %q", c.token, time.Since(t0).Round(time.Millisecond), reply)
		}
	}
}
