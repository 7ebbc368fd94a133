package netboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/optoken"
	"github.com/peerboot/peerboot/output"
)

// `peerboot serve` whole: the command turns its flags into a ServeConfig and
// calls Run, which finds the builds, reads the inventory, opens the database
// through the command's opener, makes the operator token, listens, says where,
// starts the PXE helpers and serves until ctx ends. Errors carry their exit
// class (exitcode): a bad flag value is usage, a bad inventory recipe, an
// address that cannot be bound network.

// DefaultListen is serve's address without --listen; the demo's is
// demoListen, loopback only.
const (
	DefaultListen = ":8080"
	demoListen    = "127.0.0.1:8080"
)

// ServeConfig is a whole serve: the Server's Options and what surrounds it.
type ServeConfig struct {
	// Options configure the Server; Run fills Builds, Inventory, Store and
	// OperatorToken.
	Options
	// Out is the output root: its builds are served (and new ones join) when
	// Dirs is empty, and the database and the operator token default to it.
	Out  string
	Dirs []string
	// Listen is the HTTP address (HOST:PORT).
	Listen string
	// InventoryFile is the TOML inventory; "": every node boots DefaultRecipe.
	InventoryFile string
	// DB is an SQLite file or a PostgreSQL DSN ("": Out/reports.db) and
	// OpenStore opens it: the command's, the one package that may open the
	// database (TestLayers).
	DB        string
	OpenStore func(ctx context.Context, spec string) (fleetdb.Store, error)
	// OperatorTokenFile is the operator token's file, created if missing
	// ("": Out/operator.token; the demo's beside its throwaway database).
	OperatorTokenFile string
	// TFTP is a TFTP address ("": none) serving TFTPDir's first-stage iPXE,
	// TFTPMax transfers at once, TFTPPerSource per client address.
	TFTP, TFTPDir          string
	TFTPMax, TFTPPerSource int
	// ProxyDHCP is an interface to answer PXE clients on ("": none).
	ProxyDHCP string
	// Demo serves Out/default (or, with nothing built, a build with no files)
	// on loopback with three example nodes in a throwaway database.
	Demo bool
	// Stdout takes where serve listens and what it serves; Stderr a warning
	// that writes are off.
	Stdout, Stderr io.Writer
}

// DefaultServeConfig is serve's configuration without flags: its flags take
// their defaults from here.
func DefaultServeConfig() ServeConfig {
	return ServeConfig{Options: DefaultOptions(), Out: "out", Listen: DefaultListen,
		TFTPMax: DefaultTFTPTransfers, TFTPPerSource: DefaultTFTPPerSource}
}

func usage(err error) error { return exitcode.Tag(exitcode.Usage, err) }

// Run serves until ctx ends, then shuts the HTTP server down (10 s for the
// requests in flight).
func Run(ctx context.Context, cfg ServeConfig) error {
	if cfg.OpenStore == nil || cfg.Stdout == nil || cfg.Stderr == nil {
		return errors.New("netboot.Run: OpenStore, Stdout and Stderr are required")
	}
	demo, err := cfg.demo()
	if err != nil {
		return err
	}
	defer demo.remove()
	if err := cfg.loadBuilds(); err != nil {
		return err
	}
	if err := cfg.loadInventory(); err != nil {
		return err
	}
	st, db, err := cfg.openStore(ctx, demo)
	if err != nil {
		return err
	}
	defer st.Close()
	cfg.Store = st
	op, err := cfg.operatorToken(demo, db)
	if err != nil {
		return err
	}
	cfg.OperatorToken = op.token
	srv, err := New(ctx, cfg.Options)
	if err != nil {
		return usage(err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return exitcode.Tag(exitcode.Network, fmt.Errorf("listening on %s: %w", cfg.Listen, err))
	}
	hs := srv.HTTPServer()
	cfg.banner(ln.Addr().String(), db, op, srv, demo)

	errc := make(chan error, 3)
	go func() { errc <- srv.Serve(hs, ln) }()
	if cfg.TFTP != "" || cfg.ProxyDHCP != "" {
		if err := cfg.startPXEHelpers(ctx, ln.Addr().String(), errc); err != nil {
			hs.Close()
			return err
		}
	}
	return cfg.wait(ctx, hs, errc)
}

// wait serves until a server fails or ctx ends.
func (cfg *ServeConfig) wait(ctx context.Context, hs *http.Server, errc <-chan error) error {
	select {
	case err := <-errc:
		hs.Close()
		return exitcode.Tag(exitcode.Network, fmt.Errorf("serving: %w", err))
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(shut); err != nil {
		return fmt.Errorf("stopping the server: %w", err)
	}
	fmt.Fprintln(cfg.Stdout, "peerboot serve: stopped")
	return nil
}

// demoState is the demo's throwaway directory ("": not a demo) and whether
// anything was built to serve.
type demoState struct {
	tmp   string
	built bool
}

func (d demoState) remove() {
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
	}
}

// demo sets up --demo: the build it serves, the loopback address.
func (cfg *ServeConfig) demo() (demoState, error) {
	if !cfg.Demo {
		return demoState{}, nil
	}
	if len(cfg.Dirs) > 0 {
		return demoState{}, usage(errors.New("--demo serves out/default: give no OUTDIR"))
	}
	tmp, err := os.MkdirTemp("", "peerboot-demo-")
	if err != nil {
		return demoState{}, err
	}
	d := demoState{tmp: tmp, built: true}
	dir := filepath.Join(cfg.Out, "default")
	if _, err := os.Stat(filepath.Join(dir, output.ManifestFile)); err != nil {
		// Nothing built yet: the fleet pages and their example nodes need no
		// image, so the demo serves a build with no files (no boot script).
		d.built = false
		if dir, err = emptyDemoBuild(tmp); err != nil {
			d.remove()
			return demoState{}, err
		}
	}
	cfg.Dirs = []string{dir}
	if cfg.Listen == DefaultListen {
		cfg.Listen = demoListen
	}
	return d, nil
}

// emptyDemoBuild writes, under dir, a build output with a manifest and no
// files: what serve --demo shows before anything is built.
func emptyDemoBuild(dir string) (string, error) {
	b := filepath.Join(dir, "demo")
	if err := os.MkdirAll(b, 0o755); err != nil {
		return "", err
	}
	m, err := json.Marshal(output.Manifest{Recipe: "demo"})
	if err != nil {
		return "", err
	}
	return b, os.WriteFile(filepath.Join(b, output.ManifestFile), m, 0o644)
}

// loadBuilds reads the builds served: Dirs, else every build under Out,
// watched for new ones.
func (cfg *ServeConfig) loadBuilds() error {
	dirs := cfg.Dirs
	if len(dirs) == 0 {
		var err error
		if dirs, err = FindOutputs(cfg.Out); err != nil {
			return usage(err)
		}
	}
	builds, err := LoadBuilds(dirs)
	if err != nil {
		return usage(err)
	}
	if len(cfg.Dirs) == 0 {
		builds.WatchRoot(cfg.Out) // a build written under Out later joins the catalogue
	}
	cfg.Builds = builds
	return nil
}

// loadInventory reads InventoryFile and checks it names only recipes served.
func (cfg *ServeConfig) loadInventory() error {
	if cfg.InventoryFile == "" {
		return nil
	}
	inv, err := LoadInventory(cfg.InventoryFile)
	if err != nil {
		return exitcode.Tag(exitcode.Recipe, err)
	}
	if err := inv.CheckRecipes(cfg.InventoryFile, cfg.Builds.Recipes()); err != nil {
		return exitcode.Tag(exitcode.Recipe, err)
	}
	cfg.Inventory = inv
	return nil
}

// openStore opens the database (the demo's is in its throwaway directory,
// seeded with the example nodes) and says which it is.
func (cfg *ServeConfig) openStore(ctx context.Context, demo demoState) (fleetdb.Store, string, error) {
	db := cfg.DB
	if demo.tmp != "" && db == "" {
		db = filepath.Join(demo.tmp, "reports.db")
	}
	if db == "" {
		db = filepath.Join(cfg.Out, "reports.db")
		if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
			return nil, "", err
		}
	}
	st, err := cfg.OpenStore(ctx, db)
	if err != nil {
		return nil, "", usage(err)
	}
	if demo.tmp != "" {
		if err := SeedDemo(ctx, st, time.Now()); err != nil {
			st.Close()
			return nil, "", fmt.Errorf("seeding the demo database: %w", err)
		}
	}
	return st, db, nil
}

// opState is the operator token serve runs with: its file, whether it was
// made now, and off ("" when there is a token) saying why writes are off.
type opState struct {
	file, token string
	created     bool
	off         string
}

// operatorToken reads or creates the operator token; one that cannot be
// created turns writes off (netboot refuses them all) and serving goes on.
func (cfg *ServeConfig) operatorToken(demo demoState, db string) (opState, error) {
	op := opState{file: cfg.OperatorTokenFile}
	if op.file == "" {
		op.file = optoken.Default(cfg.Out)
		if demo.tmp != "" {
			op.file = filepath.Join(filepath.Dir(db), optoken.FileName)
		}
	}
	var err error
	op.token, op.created, err = optoken.Ensure(op.file)
	switch {
	case errors.Is(err, optoken.ErrCreate):
		op.off = fmt.Sprintf("NONE: rollout writes are off (%v; --operator-token FILE names another)", err)
		fmt.Fprintf(cfg.Stderr, "peerboot serve: %s\n", op.off)
	case err != nil:
		return op, usage(fmt.Errorf("%w (rollout writes need it; --operator-token FILE names another)", err))
	}
	return op, nil
}

// banner says where serve listens, what it serves and how nodes reach it.
func (cfg *ServeConfig) banner(addr, db string, op opState, srv *Server, demo demoState) {
	w := cfg.Stdout
	base := cfg.PublicURL
	if base == "" {
		base = "http://" + displayAddr(addr)
	}
	fmt.Fprintf(w, "peerboot serve: listening on %s (database %s)\n", addr, redactDSN(db))
	for _, b := range cfg.Builds.All() {
		formats := []string{}
		if b.HasPXE() {
			formats = append(formats, string(output.KindPXE))
		}
		if b.HasUKI() {
			formats = append(formats, string(output.KindUKI))
		}
		if b.HasISO() {
			formats = append(formats, string(output.KindISO))
		}
		if len(formats) == 0 {
			formats = append(formats, "no boot files") // the demo's stand-in when nothing is built
		}
		fmt.Fprintf(w, "  %-12s build %s (%s) from %s\n", b.Recipe, b.ID, strings.Join(formats, ", "), b.Dir)
	}
	fmt.Fprintf(w, "  fleet:      %s/\n", base)
	made := ""
	if op.created {
		made = ", created"
	}
	if op.off != "" {
		fmt.Fprintf(w, "  operator:   %s\n", op.off)
	} else {
		fmt.Fprintf(w, "  operator:   %s (0600%s; peerboot rollout --operator-token %s)\n", op.file, made, op.file)
	}
	fmt.Fprintf(w, "  iPXE:       chain %s/boot.ipxe?mac=${net0/mac}\n", base)
	if cfg.FilesURL != "" {
		fmt.Fprintf(w, "  boot files: %s (kernel and initrd, each hashed there before the first node is sent)\n", cfg.FilesURL)
	}
	fmt.Fprintf(w, "  UEFI HTTP:  %s/uefi/boot.efi\n", base)
	if demo.tmp != "" {
		b := cfg.Builds.All()[0]
		fmt.Fprintf(w, "  a report:   curl -H 'Authorization: Bearer %s' --data-binary @report.json '%s/reports?node=52:54:00:12:34:56'\n", srv.Token(b.ID, "52:54:00:12:34:56"), base)
		if !demo.built {
			fmt.Fprintf(w, "  (demo: nothing is built in %s yet, so no node can boot from this; `make image` builds it)\n", filepath.Join(cfg.Out, "default"))
		}
		fmt.Fprintf(w, "  (demo: the database is temporary; Ctrl-C ends it)\n")
	}
}

// displayAddr turns a wildcard listen address into one a browser can open.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// redactDSN hides a password in a PostgreSQL DSN before it is printed.
func redactDSN(s string) string {
	if i := strings.Index(s, "password="); i >= 0 {
		end := strings.IndexAny(s[i:], " &")
		if end < 0 {
			end = len(s) - i
		}
		return s[:i] + "password=xxx" + s[i+end:]
	}
	if strings.Contains(s, "://") && strings.Contains(s, "@") {
		scheme, rest, _ := strings.Cut(s, "://")
		userinfo, host, _ := strings.Cut(rest, "@")
		user, _, _ := strings.Cut(userinfo, ":")
		return scheme + "://" + user + ":xxx@" + host
	}
	return s
}

// startPXEHelpers starts the optional TFTP server and ProxyDHCP responder; both send
// iPXE on to the HTTP boot script, so they need the URL nodes reach it at.
func (cfg *ServeConfig) startPXEHelpers(ctx context.Context, httpAddr string, errc chan<- error) error {
	_, port, _ := net.SplitHostPort(httpAddr)
	base := strings.TrimRight(cfg.PublicURL, "/")
	var serverIP net.IP
	if cfg.ProxyDHCP != "" {
		ifc, err := net.InterfaceByName(cfg.ProxyDHCP)
		if err != nil {
			return usage(fmt.Errorf("--proxy-dhcp: %w", err))
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				serverIP = ipn.IP.To4()
				break
			}
		}
		if serverIP == nil {
			return usage(fmt.Errorf("--proxy-dhcp: %s has no IPv4 address", cfg.ProxyDHCP))
		}
		if base == "" {
			base = "http://" + net.JoinHostPort(serverIP.String(), port)
		}
	}
	if base == "" {
		host, _, _ := net.SplitHostPort(httpAddr)
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
			return usage(errors.New("--tftp needs --public-url (the HTTP address nodes reach, for the boot.ipxe it serves)"))
		}
		base = "http://" + httpAddr
	}
	chain := base + "/boot.ipxe?mac=${net0/mac}"
	if cfg.TFTP != "" {
		if cfg.TFTPDir == "" {
			return usage(errors.New("--tftp needs --tftp-dir: mkdir tftp && cp -L /usr/lib/ipxe/undionly.kpxe /usr/lib/ipxe/ipxe.efi tftp/ (from Debian's ipxe package)"))
		}
		if fi, err := os.Stat(cfg.TFTPDir); err != nil || !fi.IsDir() {
			return usage(fmt.Errorf("--tftp-dir %s: not a directory", cfg.TFTPDir))
		}
		pc, err := net.ListenPacket("udp4", cfg.TFTP)
		if err != nil {
			return exitcode.Tag(exitcode.Network, fmt.Errorf("--tftp %s: %w", cfg.TFTP, err))
		}
		t := &TFTP{Dir: cfg.TFTPDir, Chain: chain, Log: cfg.Log, MaxTransfers: cfg.TFTPMax, PerSource: cfg.TFTPPerSource}
		go func() { errc <- t.Serve(ctx, pc) }()
		fmt.Fprintf(cfg.Stdout, "  TFTP:       %s (%s, and boot.ipxe -> %s)\n", pc.LocalAddr(), cfg.TFTPDir, chain)
	}
	if cfg.ProxyDHCP != "" {
		pc, err := ListenProxyDHCP(ctx, cfg.ProxyDHCP, "0.0.0.0:67")
		if err != nil {
			return exitcode.Tag(exitcode.Network, err)
		}
		p := &ProxyDHCP{Interface: cfg.ProxyDHCP, ServerIP: serverIP, Chain: chain, Log: cfg.Log}
		go func() { errc <- p.Serve(ctx, pc) }()
		fmt.Fprintf(cfg.Stdout, "  ProxyDHCP:  %s (%s): PXE clients only\n", cfg.ProxyDHCP, serverIP)
	}
	return nil
}
