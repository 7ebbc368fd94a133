package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/qemu"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/store"
)

// served is one `peerboot serve` process on 127.0.0.1, as an operator runs it.
type served struct {
	base string // 127.0.0.1:PORT
	port string
	logs *syncBuf // its stderr: the structured log
	stop func()   // ends it and waits; also run at cleanup
}

var listening = regexp.MustCompile(`listening on 127\.0\.0\.1:(\d+)`)

// startServe runs `peerboot serve --listen 127.0.0.1:0 ARGS...` and waits for the
// port it says it listens on.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{logs: &syncBuf{}}
	srv.Stderr = s.logs
	if err := srv.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := false
	s.stop = func() {
		if !done {
			done = true
			cancel()
			srv.Wait()
		}
	}
	t.Cleanup(s.stop)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			s.port = m[1]
			break
		}
	}
	if s.port == "" {
		s.stop()
		t.Fatalf("serve did not start:\n%s", s.logs.String())
	}
	go io.Copy(io.Discard, stdout)
	s.base = "127.0.0.1:" + s.port
	return s
}

// getJSON decodes GET http://BASE/PATH into v, failing the test on a status other than 200.
func (s *served) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + s.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// pxeBoot is one node's PXE boot from s: QEMU's TFTP hands iPXE a one-line chain
// to the server (user-mode networking: the host is 10.0.2.2), iPXE fetches
// /boot.ipxe?mac=${net0/mac}, the kernel and the initrd over HTTP, and the init
// POSTs its report. It returns the report the console carries, the console and
// the boot; a boot that times out or prints no report fails the test.
func (s *served) pxeBoot(t *testing.T) (*selftest.Report, string, *qemu.Result) {
	t.Helper()
	pxe := t.TempDir()
	chain := fmt.Sprintf("#!ipxe\nchain http://10.0.2.2:%s/boot.ipxe?mac=${net0/mac} || shell\n", s.port)
	if err := os.WriteFile(filepath.Join(pxe, "boot.ipxe"), []byte(chain), 0o644); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	res, err := qemu.Boot(context.Background(), qemu.Options{Mode: qemu.PXE, PXEDir: pxe, WorkDir: t.TempDir(), Timeout: 8 * time.Minute,
		Console: &console, KVMHint: (&store.Store{Root: cacheDir()}).HintPath(store.KVMFailsHint), // shared with `peerboot run`
		Stop:      func(line string) bool { return strings.Contains(line, "report POST") },
		Succeeded: func() bool { return strings.Contains(console.String(), selftest.Marker) }})
	if err != nil {
		t.Fatalf("boot: %v\n%s", err, tailOf(console.String(), 40))
	}
	if res.TimedOut {
		t.Fatalf("the boot timed out:\n%s\nserver:\n%s", tailOf(console.String(), 40), s.logs.String())
	}
	r, err := selftest.FindLine(console.Bytes())
	if err != nil {
		t.Fatalf("no report on the console: %v\n%s", err, tailOf(console.String(), 40))
	}
	return r, console.String(), res
}

// posted fails the test unless the node's console says it POSTed its report to s
// itself and the server stored it.
func (s *served) posted(t *testing.T, console string) {
	t.Helper()
	if !strings.Contains(console, "report POSTed to http://10.0.2.2:"+s.port+"/reports?node=52:54:00:12:34:56") {
		t.Fatalf("the node did not POST its report itself (%s; network: %s)\nserver:\n%s", lineWith(console, "report POST"), lineWith(console, "peerboot: network:"), s.logs.String())
	}
	if !strings.Contains(s.logs.String(), "report stored") {
		t.Errorf("the node says it POSTed, but the server log has no stored report:\n%s", s.logs.String())
	}
}

// variantRecipe writes DIR/FILE.toml: recipes/default.toml included, then body
// over it, with the default lock beside it (for edits that change no pinned
// input: the lock's digest covers only repositories, sources and userspace).
func variantRecipe(t *testing.T, dir, file, body string) string {
	t.Helper()
	def, err := filepath.Abs("../recipes/default.toml")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, def)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, file+".toml")
	lock, err := os.ReadFile("../recipes/default.lock")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("include = ["+quote(rel)+"]\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file+".lock"), lock, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// failFindings lists a report's fail findings, one "id: message" a line.
func failFindings(r *selftest.Report) string {
	var failing []string
	for _, f := range r.Findings {
		if f.Status == selftest.SevFail {
			failing = append(failing, f.ID+": "+f.Message)
		}
	}
	return strings.Join(failing, "\n")
}
