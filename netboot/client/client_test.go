package client

import (
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/netboot/optoken"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/rollout"
)

const mac = "52:54:00:12:34:56"

// server is a real netboot.Server over a real SQLite store, serving a build
// of recipe default with a two-channel rollout; it returns its URL and the
// operator token's file.
func server(t *testing.T) (string, string) {
	t.Helper()
	url, opFile, _ := serverStore(t)
	return url, opFile
}

// serverStore is server with its store.
func serverStore(t *testing.T) (string, string, *sqldb.DB) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "default")
	os.MkdirAll(filepath.Join(dir, "pxe"), 0o755)
	for name, body := range map[string]string{"pxe/vmlinuz": "kernel", "pxe/initrd.img": "initrd",
		"pxe/boot.ipxe": "#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n"} {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	m, _ := json.Marshal(output.Manifest{Recipe: "default"})
	os.WriteFile(filepath.Join(dir, output.ManifestFile), m, 0o644)
	builds, err := netboot.LoadBuilds([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := netboot.ParseInventory("rack.toml", []byte(`default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 2
window = "6h"
[[node]]
mac = "`+mac+`"
channel = "canary"
`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqldb.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	opFile := filepath.Join(t.TempDir(), optoken.FileName)
	tok, _, err := optoken.Ensure(opFile)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := netboot.New(context.Background(), netboot.Options{Builds: builds, Inventory: inv, Store: st,
		PageToken: "sekrit", OperatorToken: tok})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL, opFile, st
}

// TestClientSoakStop: SoakStop against the real server: the answer decodes into
// api.SoakStop with its fields filled, a second request says already, and a node
// not burning in is a usage refusal naming it.
func TestClientSoakStop(t *testing.T) {
	url, opFile, st := serverStore(t)
	ctx := context.Background()
	c, err := New(Options{Server: url, OperatorTokenFile: opFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SoakStop(ctx, mac, ""); err == nil || exitcode.Of(err) != int(exitcode.Usage) || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "node "+mac+" is not burning in") {
		t.Errorf("stopping a node not burning in: %v (class %v)", err, exitcode.Of(err))
	}
	if err := st.SetProgress(ctx, fleetdb.Progress{NodeID: mac, State: "running", ElapsedMS: 60000, RequestedMS: 3600000, Rounds: 2, Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	out, err := c.SoakStop(ctx, mac, "rack 4 power work")
	if err != nil || out.Node != mac || out.State != "running" || out.Rounds != 2 || out.StopBy != "127.0.0.1" || out.Reason != "rack 4 power work" || out.StopAt.IsZero() || out.Already {
		t.Fatalf("SoakStop: %+v %v", out, err)
	}
	again, err := c.SoakStop(ctx, mac, "")
	if err != nil || !again.Already || !again.StopAt.Equal(out.StopAt) || again.Reason != "rack 4 power work" {
		t.Errorf("SoakStop again: %+v %v; want already, the first request kept", again, err)
	}
}

// TestClient drives every call against the real server: each answer decodes
// into the server's own type with its fields filled (a renamed field would
// leave one empty), and each refusal carries the exit class the command exits with.
func TestClient(t *testing.T) {
	url, opFile := server(t)
	ctx := context.Background()
	c, err := New(Options{Server: url + "/", PageToken: "sekrit", OperatorTokenFile: opFile})
	if err != nil {
		t.Fatal(err)
	}
	if c.Base() != url {
		t.Errorf("Base() = %q, want %q (no trailing slash)", c.Base(), url)
	}
	all, err := c.Rollouts(ctx)
	if err != nil || len(all) != 1 || all[0].Recipe != "default" || all[0].PromoteAfter != 2 || len(all[0].Channels) != 2 || all[0].Channels[0].Build == "" {
		t.Fatalf("Rollouts: %+v %v", all, err)
	}
	ev, err := c.Halt(ctx, "default", "disk swap")
	if err != nil || ev.Kind != rollout.Halt || ev.Recipe != "default" || ev.Reason != "disk swap" || ev.At.IsZero() {
		t.Fatalf("Halt: %+v %v", ev, err)
	}
	one, err := c.Rollout(ctx, "default")
	if err != nil || !one.Halted || one.HaltReason != "disk swap" || len(one.Events) == 0 {
		t.Errorf("Rollout after a halt: %+v %v", one, err)
	}
	if ev, err := c.Resume(ctx, "default"); err != nil || ev.Kind != rollout.Resume {
		t.Errorf("Resume: %+v %v", ev, err)
	}
	en, err := c.Enroll(ctx, []string{mac}, 10*time.Minute)
	if err != nil || len(en.Nodes) != 1 || en.Nodes[0] != mac || time.Until(en.Until) < 9*time.Minute {
		t.Errorf("Enroll: %+v %v", en, err)
	}

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	forged := filepath.Join(t.TempDir(), "forged")
	os.WriteFile(forged, []byte(strings.Repeat("f", 64)+"\n"), 0o600)
	tests := []struct {
		name  string
		opt   Options
		call  func(c *Client) error
		class exitcode.Class
		want  string
	}{
		{"promote, nothing to promote", Options{}, func(c *Client) error { _, err := c.Promote(ctx, "default", ""); return err },
			exitcode.Usage, "every channel of default serves the same build"},
		{"halt twice", Options{}, func(c *Client) error {
			c.Halt(ctx, "default", "")
			_, err := c.Halt(ctx, "default", "")
			return err
		}, exitcode.Usage, "409 Conflict"},
		{"clear a node not held", Options{}, func(c *Client) error { _, err := c.Clear(ctx, mac); return err }, exitcode.Usage, "404"},
		{"ak-reset without an AK", Options{}, func(c *Client) error { _, err := c.AKReset(ctx, mac); return err }, exitcode.Usage, "no AK on record"},
		{"enroll too long", Options{}, func(c *Client) error { _, err := c.Enroll(ctx, nil, 10000*time.Hour); return err }, exitcode.Usage, "for: want a duration up to"},
		{"unknown recipe", Options{}, func(c *Client) error { _, err := c.Rollout(ctx, "nosuch"); return err }, exitcode.Usage, `recipe "nosuch" has no [[rollout]]`},
		{"wrong page token", Options{PageToken: "wrong"}, func(c *Client) error { _, err := c.Rollouts(ctx); return err }, exitcode.Usage, "401"},
		{"bad --auth", Options{PageToken: "-", Auth: "nocolon"}, func(c *Client) error { _, err := c.Rollouts(ctx); return err }, exitcode.Usage, "--auth: want USER:PASSWORD"},
		{"another operator token", Options{OperatorTokenFile: forged}, func(c *Client) error { _, err := c.Resume(ctx, "default"); return err }, exitcode.Usage, "401"},
		{"no operator token file", Options{OperatorTokenFile: filepath.Join(t.TempDir(), "none")}, func(c *Client) error { _, err := c.Resume(ctx, "default"); return err },
			exitcode.Usage, "writes need the file peerboot serve created"},
		{"no server", Options{Server: dead}, func(c *Client) error { _, err := c.Rollouts(ctx); return err }, exitcode.Network, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt := Options{Server: url, PageToken: "sekrit", OperatorTokenFile: opFile}
			if tt.opt.Server != "" {
				opt.Server = tt.opt.Server
			}
			if tt.opt.PageToken == "-" {
				opt.PageToken, opt.Auth = "", tt.opt.Auth
			} else if tt.opt.PageToken != "" {
				opt.PageToken = tt.opt.PageToken
			}
			if tt.opt.OperatorTokenFile != "" {
				opt.OperatorTokenFile = tt.opt.OperatorTokenFile
			}
			c, err := New(opt)
			if err != nil {
				t.Fatal(err)
			}
			err = tt.call(c)
			if err == nil || exitcode.Of(err) != int(tt.class) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("exit %d, %v; want exit %d and %q", exitcode.Of(err), err, tt.class, tt.want)
			}
		})
	}
	if _, err := New(Options{Server: "ftp://x"}); exitcode.Of(err) != int(exitcode.Usage) || !strings.Contains(err.Error(), "--server: want http://HOST[:PORT]") {
		t.Errorf("a server URL that is not http: %v", err)
	}
}

// TestDefaultServer: the client's default is where a serve started without
// --listen answers on this machine, so a change of one moves the other.
func TestDefaultServer(t *testing.T) {
	u, err := neturl.Parse(DefaultServer)
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(netboot.DefaultListen)
	if err != nil || u.Port() != port || u.Hostname() != "127.0.0.1" {
		t.Errorf("DefaultServer %s, serve's default listen address %s (%v)", DefaultServer, netboot.DefaultListen, err)
	}
}
