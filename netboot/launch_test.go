package netboot

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
)

// runConfig is serve's configuration for a test: loopback, a fresh database.
func runConfig(t *testing.T, out string, stdout, stderr io.Writer) ServeConfig {
	cfg := DefaultServeConfig()
	cfg.Out, cfg.Listen, cfg.DB = out, "127.0.0.1:0", filepath.Join(t.TempDir(), "reports.db")
	cfg.OpenStore = func(ctx context.Context, spec string) (fleetdb.Store, error) { return sqldb.Open(ctx, spec) }
	cfg.Stdout, cfg.Stderr = stdout, stderr
	return cfg
}

// TestRunRefuses: each config Run cannot serve is refused before it listens,
// with the exit class the command exits with and the part to blame.
func TestRunRefuses(t *testing.T) {
	out := t.TempDir()
	fakeBuild(t, filepath.Join(out, "default"), "default", 4096)
	badInv := filepath.Join(t.TempDir(), "rack.toml")
	os.WriteFile(badInv, []byte("default = \"default\"\n[[node]]\nmac = \"nope\"\nrecipe = \"xeon\"\n"), 0o644)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name  string
		edit  func(c *ServeConfig)
		class exitcode.Class
		want  string
	}{
		{"no builds", func(c *ServeConfig) { c.Out = t.TempDir() }, exitcode.Usage, "no build output under"},
		{"demo with a dir", func(c *ServeConfig) { c.Demo, c.Dirs = true, []string{out} }, exitcode.Usage, "--demo serves out/default: give no OUTDIR"},
		{"bad inventory", func(c *ServeConfig) { c.InventoryFile = badInv }, exitcode.Recipe, "rack.toml:3: node[0].mac: want a MAC address"},
		{"address in use", func(c *ServeConfig) { c.Listen = busy.Addr().String() }, exitcode.Network, "listening on " + busy.Addr().String()},
		{"tftp without a public URL", func(c *ServeConfig) { c.TFTP = "127.0.0.1:0" }, exitcode.Usage, "--tftp needs --public-url"},
		{"no opener", func(c *ServeConfig) { c.OpenStore = nil }, exitcode.Internal, "OpenStore"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			cfg := runConfig(t, out, &stdout, &stderr)
			tt.edit(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := Run(ctx, cfg)
			if err == nil || exitcode.Of(err) != int(tt.class) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run: exit %d, %v; want exit %d and %q", exitcode.Of(err), err, tt.class, tt.want)
			}
		})
	}
}

// TestRunDemo: the demo with nothing built serves its three example nodes on
// loopback, says so, makes its operator token beside its throwaway database,
// and on ctx's end stops and removes that database.
func TestRunDemo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out") // nothing built, not even out/
	var stdout, stderr syncBuffer
	cfg := runConfig(t, out, &stdout, &stderr)
	cfg.Demo, cfg.DB = true, ""
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	addr := ""
	for deadline := time.Now().Add(20 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := regexp.MustCompile(`listening on (127\.0\.0\.1:\d+) \(database (\S+)\)`).FindStringSubmatch(stdout.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		cancel()
		t.Fatalf("Run did not say where it listens: %s%s", stdout.String(), stderr.String())
	}
	resp, err := http.Get("http://" + addr + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "demo-xeon-8gpu") || !strings.Contains(string(body), "demo-epyc-4gpu") || !strings.Contains(string(body), `"state": "running"`) {
		t.Errorf("/api/nodes: %s %s", resp.Status, body)
	}
	banner := stdout.String()
	db := regexp.MustCompile(`\(database (\S+)\)`).FindStringSubmatch(banner)[1]
	tok := filepath.Join(filepath.Dir(db), "operator.token")
	if !strings.Contains(banner, "operator:   "+tok+" (0600, created;") || !strings.Contains(banner, "nothing is built in "+filepath.Join(out, "default")) ||
		!strings.Contains(banner, " (no boot files) from ") || strings.Contains(banner, "()") {
		t.Errorf("banner:\n%s", banner)
	}
	if fi, err := os.Stat(tok); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the demo's operator token: %v %v", fi, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
	if !strings.HasSuffix(stdout.String(), "peerboot serve: stopped\n") {
		t.Errorf("no stop line: %q", stdout.String())
	}
	if _, err := os.Stat(filepath.Dir(db)); !os.IsNotExist(err) {
		t.Errorf("the demo's directory %s is left: %v", filepath.Dir(db), err)
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"out/reports.db": "out/reports.db",
		"host=db dbname=pb password=hunter2 user=pb": "host=db dbname=pb password=xxx user=pb",
		"postgres://pb:hunter2@db:5432/pb":           "postgres://pb:xxx@db:5432/pb",
		"postgres://db/pb?password=hunter2&x=1":      "postgres://db/pb?password=xxx&x=1",
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}
