package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/recipe"
)

type serveFlags struct {
	out, listen, publicURL, inventory, recipe, db string
	maxReport                                     string
	rate                                          time.Duration
	burst                                         int
	reportTokens                                  []string
	auth, pageToken                               string
	demo, logJSON                                 bool
	tftp, tftpDir, proxyDHCP                      string
	sourceRate                                    time.Duration
	sourceBurst                                   int
	keepReports, keepUnreported                   int
	keepBytes                                     string
	maxConns                                      int
	bodyTimeout, writeIdle, burnInSilent          time.Duration
	tftpMax, tftpPerSource                        int
	ekCA                                          string
	operatorToken                                 string
	enroll                                        time.Duration
	filesURL                                      string
}

func serveCmd() *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve [OUTDIR...] [--inventory FILE] [--listen ADDR] [--demo]",
		Short: "Netboot nodes over HTTP, collect their self-test reports, show the fleet",
		Long: `serve is an HTTP boot service for iPXE and UEFI HTTP boot, a collector for the
self-test reports the nodes POST back, and the fleet pages that show them.

It serves each OUTDIR (default: every build under --out) as written by peerboot build
and peerboot sign. Point iPXE (DHCP option 67, or an embedded script) at

    chain http://SERVER:8080/boot.ipxe?mac=${net0/mac}

and each node gets a script for its recipe's current build, chosen by --inventory (MAC
or hostname glob -> recipe and extra kernel arguments; without one every node boots
--recipe), with the sha256 of each file, and a kernel command line carrying
peerboot.report_url= and a peerboot.token= good for that node and build only. UEFI HTTP boot takes the UKI at
/uefi/boot.efi (or /uefi/RECIPE.efi); its command line is baked in, so it reports to its
recipe's boot.report_url with a --report-token.

Reports are stored with their history per node (MAC, hostname, serial) in SQLite
(--db PATH, default OUT/reports.db, WAL, fsync on commit) or PostgreSQL (--db with a
DSN: postgres://... or "host=... dbname=..."; several serve processes may share one
PostgreSQL database as replicas, SQLite is one process's). The fleet pages are at / and /nodes/NODE,
with the same data as JSON under /api/. --auth USER:PASSWORD (or $PEERBOOT_SERVE_AUTH)
and --page-token protect the pages, never the boot files. Writes (peerboot rollout
promote, halt, resume, clear, enroll, ak-reset) need the operator token instead:
serve creates it 0600 at --operator-token FILE (default OUT/operator.token) on first
start, and peerboot rollout reads the same file; page credentials never authorise a
write, and a cross-site request is refused. The database is kept bounded
(--keep-reports, --keep-report-bytes, --keep-unreported) and is created 0600: it holds
the token secret. Clients that stall are cut off (--body-timeout, --write-timeout) and
connections are capped (--max-conns).

A report POSTed with a Peerboot-Attestation header (a TPM2 quote over PCRs 4, 7, 11,
bound to the boot's one-time peerboot.nonce= or a POST /attest/nonce) is verified and
stored "attested", or refused with the reason; one without is stored "unattested".
A node's first AK is recorded only inside an enrollment window (peerboot rollout
enroll NODE..., or --enroll DURATION for every node from start) or when the inventory
pins it (ak_name); another AK is refused and listed on the node's page as a conflict
(peerboot rollout ak-reset NODE forgets the one on record). --ek-ca FILE also requires
an EK certificate chaining to that PEM bundle. Only nodes the inventory names by MAC
vote in a rollout, and a node with an AK on record, tpm = true or a pin votes only
with attested reports.

--tftp ADDR adds a read-only TFTP server (same file rules) for firmware that can only
TFTP a first-stage iPXE; --proxy-dhcp IFACE answers PXE clients only, on IFACE, for
networks whose DHCP server cannot be changed. Both are off by default.

--files-url URL sends nodes to an HTTP mirror, object store or CDN for the kernel and
initrd (peerboot publish --http DIR writes its layout, sha256/<hex>), while scripts,
reports and rollouts stay here: serve fetches and hashes each file there once before
the first node is sent for it and boots nodes from its own copy while the mirror's is
missing or altered; the script names the initrd's sha256, which the node's init checks.

--demo serves out/default (make image builds it) on 127.0.0.1:8080 with a throwaway
database holding three example nodes (8-GPU and 4-GPU fixture reports, and a 4-GPU
box three hours into a 12-hour burn-in). Before anything
is built it serves the fleet pages alone: a build named "demo" with no boot files.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), f, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	def := netboot.DefaultServeConfig()
	fl.StringVar(&f.out, "out", def.Out, "output root whose builds are served when no OUTDIR is given")
	fl.StringVar(&f.listen, "listen", def.Listen, "address to listen on")
	fl.StringVar(&f.publicURL, "public-url", "", "URL nodes reach this server at (default: the Host they asked for)")
	fl.StringVar(&f.inventory, "inventory", "", "TOML inventory: MAC or hostname glob -> recipe and kernel arguments")
	fl.StringVar(&f.recipe, "recipe", "", "recipe every node boots without an inventory (default: the only build, or \"default\")")
	fl.StringVar(&f.db, "db", "", "report database: an SQLite file (default OUT/reports.db) or a PostgreSQL DSN")
	fl.StringVar(&f.maxReport, "max-report", recipe.Size(def.MaxReportBytes).String(), "largest report accepted")
	fl.DurationVar(&f.rate, "rate", def.RateEvery, "reports per node: one per this, after --burst")
	fl.IntVar(&f.burst, "burst", def.RateBurst, "reports a node may send at once")
	fl.DurationVar(&f.sourceRate, "source-rate", def.SourceRateEvery, "reports per client address: one per this, after --source-burst")
	fl.IntVar(&f.sourceBurst, "source-burst", def.SourceBurst, "reports one client address may send at once")
	fl.IntVar(&f.keepReports, "keep-reports", def.Retention.ReportsPerNode, "reports kept per node, newest first (-1: all)")
	fl.StringVar(&f.keepBytes, "keep-report-bytes", recipe.Size(def.Retention.ReportBytes).String(), "report bytes kept in all; the oldest go first, each node's latest last (-1: no bound)")
	fl.IntVar(&f.keepUnreported, "keep-unreported", def.Retention.UnreportedNodes, "nodes kept that fetched a script but never reported, most recently seen first (-1: all)")
	fl.IntVar(&f.maxConns, "max-conns", def.Limits.MaxConns, "open HTTP connections at most; more wait in the listen backlog")
	fl.DurationVar(&f.bodyTimeout, "body-timeout", def.Limits.BodyTimeout, "a request body must arrive whole within this")
	fl.DurationVar(&f.writeIdle, "write-timeout", def.Limits.WriteIdle, "a response that makes no progress for this long (a client that stops reading) is cut off")
	fl.DurationVar(&f.burnInSilent, "burn-in-silent", def.BurnInSilent, "a running burn-in not heard from for this long shows as silent on the pages (set it above a few of the nodes' peerboot.soak_progress intervals)")
	fl.IntVar(&f.tftpMax, "tftp-max", def.TFTPMax, "TFTP transfers at once; more requests are dropped")
	fl.IntVar(&f.tftpPerSource, "tftp-per-source", def.TFTPPerSource, "TFTP transfers at once per client address")
	fl.StringArrayVar(&f.reportTokens, "report-token", nil, "extra report token accepted for any build (UKI and disk boots); repeatable")
	fl.StringVar(&f.auth, "auth", "", "USER:PASSWORD for the pages (default $PEERBOOT_SERVE_AUTH)")
	fl.StringVar(&f.pageToken, "page-token", "", "bearer token for the pages and the JSON API")
	fl.BoolVar(&f.demo, "demo", false, "serve out/default on 127.0.0.1:8080 with three example nodes (one burning in) in a throwaway database")
	fl.BoolVar(&f.logJSON, "log-json", false, "log as JSON lines instead of text")
	fl.StringVar(&f.tftp, "tftp", "", "also serve TFTP on this address (e.g. :69): the first-stage iPXE of --tftp-dir and a boot.ipxe chaining to HTTP")
	fl.StringVar(&f.tftpDir, "tftp-dir", "", "first-stage iPXE files served over TFTP, e.g. a copy of Debian's ipxe.efi and undionly.kpxe (cp -L: symlinks out of the directory are refused)")
	fl.StringVar(&f.operatorToken, "operator-token", "", "file of the operator token that authorises rollout writes, created 0600 if missing (default OUT/operator.token, or $PEERBOOT_OPERATOR_TOKEN_FILE)")
	fl.DurationVar(&f.enroll, "enroll", 0, "open an AK enrollment window for every node for this long from start (the first AK a node quotes with is recorded only inside a window: peerboot rollout enroll)")
	fl.StringVar(&f.ekCA, "ek-ca", "", "PEM bundle of TPM EK CA certificates: attested reports must carry an EK certificate chaining to it")
	fl.StringVar(&f.filesURL, "files-url", "", "HTTP mirror holding the builds' files as sha256/<hex> (peerboot publish --http DIR): boot scripts fetch the kernel and initrd there, checked by sha256")
	fl.StringVar(&f.proxyDHCP, "proxy-dhcp", "", "answer PXE clients on this interface as a ProxyDHCP (the site's DHCP server keeps giving addresses)")
	return cmd
}

func runServe(ctx context.Context, f *serveFlags, args []string, stdout, stderr io.Writer) error {
	cfg, err := f.config(args, stdout, stderr)
	if err != nil {
		return exitcode.Tag(exitcode.Usage, err)
	}
	return netboot.Run(ctx, cfg)
}

// config checks the flags and turns them into serve's configuration.
func (f *serveFlags) config(args []string, stdout, stderr io.Writer) (netboot.ServeConfig, error) {
	cfg := netboot.DefaultServeConfig()
	// A malformed address is the command line's fault (2); one that cannot be
	// bound, in use or not this host's, is the network's (5) when listening.
	if err := checkListenAddr(f.listen); err != nil {
		return cfg, fmt.Errorf("--listen: %w", err)
	}
	max, err := recipe.ParseSize(f.maxReport)
	if err != nil || max <= 0 {
		return cfg, fmt.Errorf("--max-report: want a size such as 4MiB, got %q", f.maxReport)
	}
	keepBytes := int64(-1)
	if f.keepBytes != "-1" {
		n, err := recipe.ParseSize(f.keepBytes)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("--keep-report-bytes: want a size such as 8GiB, or -1, got %q", f.keepBytes)
		}
		keepBytes = int64(n)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"--keep-reports", f.keepReports}, {"--keep-unreported", f.keepUnreported}} {
		if c.v == 0 || c.v < -1 {
			return cfg, fmt.Errorf("%s: want a count, or -1 for no bound, got %d", c.name, c.v)
		}
	}
	if f.maxConns <= 0 || f.sourceBurst <= 0 || f.tftpMax <= 0 || f.tftpPerSource <= 0 || f.bodyTimeout <= 0 || f.writeIdle <= 0 || f.sourceRate <= 0 || f.burnInSilent <= 0 {
		return cfg, errors.New("--max-conns, --source-burst, --source-rate, --body-timeout, --write-timeout, --burn-in-silent, --tftp-max and --tftp-per-source must be above zero")
	}
	if f.enroll < 0 {
		return cfg, errors.New("--enroll: want a duration such as 1h")
	}
	opt := &cfg.Options
	opt.DefaultRecipe, opt.PublicURL, opt.MaxReportBytes = f.recipe, f.publicURL, int64(max)
	opt.RateEvery, opt.RateBurst, opt.SourceRateEvery, opt.SourceBurst = f.rate, f.burst, f.sourceRate, f.sourceBurst
	opt.StaticTokens, opt.PageToken = f.reportTokens, f.pageToken
	opt.Retention = fleetdb.Retention{ReportsPerNode: f.keepReports, ReportBytes: keepBytes, UnreportedNodes: f.keepUnreported}
	opt.Limits = netboot.Limits{MaxConns: f.maxConns, BodyTimeout: f.bodyTimeout, WriteIdle: f.writeIdle}
	opt.FilesURL, opt.EnrollAll, opt.PredictPCR11, opt.BurnInSilent = f.filesURL, f.enroll, predictPCR11, f.burnInSilent
	if f.ekCA != "" {
		if opt.EKRoots, err = loadEKRoots(f.ekCA); err != nil {
			return cfg, err
		}
	}
	if opt.Log = slog.New(slog.NewTextHandler(stderr, nil)); f.logJSON {
		opt.Log = slog.New(slog.NewJSONHandler(stderr, nil))
	}
	auth := f.auth
	if auth == "" {
		auth = os.Getenv("PEERBOOT_SERVE_AUTH")
	}
	if auth != "" {
		u, p, ok := strings.Cut(auth, ":")
		if !ok || u == "" || p == "" {
			return cfg, errors.New("--auth: want USER:PASSWORD")
		}
		opt.PageUser, opt.PagePassword = u, p
	}
	cfg.Out, cfg.Dirs, cfg.Listen, cfg.InventoryFile, cfg.DB = f.out, args, f.listen, f.inventory, f.db
	cfg.OpenStore = func(ctx context.Context, spec string) (fleetdb.Store, error) { return sqldb.Open(ctx, spec) }
	// The demo keeps its token beside its throwaway database, whatever the
	// environment names.
	if cfg.OperatorTokenFile = f.operatorToken; cfg.OperatorTokenFile == "" && !f.demo {
		cfg.OperatorTokenFile = os.Getenv(envOperatorToken)
	}
	cfg.TFTP, cfg.TFTPDir, cfg.TFTPMax, cfg.TFTPPerSource, cfg.ProxyDHCP = f.tftp, f.tftpDir, f.tftpMax, f.tftpPerSource, f.proxyDHCP
	cfg.Demo, cfg.Stdout, cfg.Stderr = f.demo, stdout, stderr
	return cfg, nil
}

// checkListenAddr checks that addr has the HOST:PORT form net.Listen takes
// (HOST may be empty; PORT a number 0-65535 or a service name).
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want HOST:PORT such as :8080 or 127.0.0.1:8080, got %q", addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("want a port number, got %q in %q", port, addr)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("want a host name or address, got %q in %q", host, addr)
	}
	return nil
}
