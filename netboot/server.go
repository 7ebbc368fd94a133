// Package netboot is `peerboot serve`: an HTTP boot service for iPXE and UEFI HTTP
// boot that serves build outputs, a collector for the self-test reports the nodes POST
// back, and the fleet pages that show them.
//
// Routes:
//
//	GET  /boot.ipxe?mac=&host=&serial=        the node's iPXE script (inventory: MAC or hostname -> recipe)
//	GET  /builds/{recipe}/{build}/{file...}   a file of a build output (Range, ETag = sha256)
//	GET  /uefi/boot.efi, /uefi/{recipe}.efi   the UKI, for UEFI HTTP boot
//	POST /reports?node=                       a self-test report (Authorization: Bearer TOKEN; Peerboot-Attestation: evidence)
//	POST /attest/nonce?node=                  a one-time nonce for an attested report (the report token)
//	POST /progress?node=                      a burn-in's progress while it runs (the report token; progress.go)
//	GET  /, /nodes/{node}                     the fleet pages
//	GET  /api/nodes, /api/nodes/{node}, /api/reports/{id}, /api/builds   the same as JSON
//	GET  /api/rollouts, /api/rollouts/{recipe}                          the rollouts as JSON
//	POST /api/rollouts/{recipe}/{promote,halt,resume}, /api/nodes/{node}/{clear,ak-reset},
//	     /api/attest/enroll, /api/nodes/{node}/soak/stop                the operator's writes (operator.go)
//
// docs/hardening.md has the table: who may call each, with what, to change what.
//
// Beside it, off by default: a read-only TFTP server for a first-stage iPXE (TFTP) and
// a ProxyDHCP responder that answers PXE clients only (ProxyDHCP).
package netboot

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/netboot/attestation"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/vote"
)

// Options configure a Server; Builds and Store are required.
type Options struct {
	Builds    *Builds
	Inventory *Inventory // nil: every node boots DefaultRecipe
	// DefaultRecipe is used without an inventory; "" picks the only build, or "default".
	DefaultRecipe string
	Store         fleetdb.Store
	// PublicURL is the base the nodes reach this server at ("http://10.0.0.1:8080"),
	// written into boot scripts and report URLs. "": the Host the node asked for.
	PublicURL string
	Log       *slog.Logger
	// MaxReportBytes bounds a report body (default 4 MiB).
	MaxReportBytes int64
	// RateEvery and RateBurst limit reports per node: a burst, then one per RateEvery
	// (defaults 3 and 10s).
	RateEvery time.Duration
	RateBurst int
	// SourceRateEvery and SourceBurst limit report POSTs per client address, checked
	// before anything else (defaults 1s and 30: a rack behind one NAT still reports).
	SourceRateEvery time.Duration
	SourceBurst     int
	// Retention bounds the store; zero fields take DefaultRetention's.
	Retention fleetdb.Retention
	// Limits are the HTTP deadlines and caps; zero fields take DefaultLimits'.
	Limits Limits
	// StaticTokens are accepted for any build: for UKI and disk boots, whose report
	// URL comes from the recipe and cannot carry a per-build token.
	StaticTokens []string
	// Pages and the JSON API need these when set (the boot files and /reports never do).
	PageUser, PagePassword string
	PageToken              string
	// OperatorToken authorises the writes (operator.go): rollout actions, holds,
	// AK reset and enrollment. "": every write is refused.
	OperatorToken string
	// Secret keys the per-build tokens; nil: the store's (made on first start).
	Secret []byte
	// Now is the clock (tests).
	Now func() time.Time
	// Attested reports (package attestation): PredictPCR11 gives the PCR 11 a UKI leaves at
	// enter-initrd (measure.Predict); nil: reports with evidence are refused, having
	// nothing to be compared with. EKRoots, when set, must verify the nodes' EK
	// certificates (serve --ek-ca). NonceTTL is a boot nonce's life (default 2h).
	PredictPCR11 func(uki []byte) ([32]byte, error)
	EKRoots      *x509.CertPool
	NonceTTL     time.Duration
	// FilesURL, when set, is an HTTP mirror holding the builds' files in the
	// mirror package's layout (sha256/<hex>): boot scripts fetch the kernel and
	// initrd from there once serve has checked the mirror holds their bytes,
	// and from serve itself when it does not (mirror.go).
	FilesURL string
	// EnrollAll, when set, opens an AK enrollment window for every node for
	// this long from New (serve --enroll; enroll.go).
	EnrollAll time.Duration
	// BurnInSilent: a running burn-in not heard from for this long is shown
	// as silent (the node died, hung or lost the network), not as burning in
	// (default DefaultBurnInSilent).
	BurnInSilent time.Duration
}

// DefaultBurnInSilent is five of the init's default progress intervals: one
// lost POST is not silence, a box that stopped talking for a quarter hour is.
const DefaultBurnInSilent = 5 * bootproto.DefaultSoakProgressEvery

// Server is the HTTP boot service, report collector and fleet dashboard.
type Server struct {
	opt    Options
	mux    *http.ServeMux
	log    *slog.Logger
	secret []byte
	limit  *limiter // per node
	source *limiter // per client address
	// progressLimit is the per-node rate of burn-in progress (progress.go), apart
	// from the reports' so that progress never delays a report.
	progressLimit *limiter
	// issued remembers the recipe of every build a token was made for in this process,
	// so a node that booted a build since replaced still reports under its recipe.
	mu     sync.Mutex
	issued map[string]string
	mirror *mirrorChecks // Options.FilesURL's checked files
	ro     rollouts      // rollout_server.go
	// The report pipeline's stages after receive (pipeline.go): attest checks
	// a report's evidence, votes decides what it means for its rollout.
	attest *attestation.Stage
	votes  *vote.Stage
}

// DefaultOptions are the report limits, retention and HTTP limits New gives a zero
// field; `peerboot serve` takes its flags' defaults from here.
func DefaultOptions() Options {
	return Options{
		MaxReportBytes:  4 << 20,
		RateEvery:       10 * time.Second,
		RateBurst:       3,
		SourceRateEvery: time.Second,
		SourceBurst:     30,
		Retention:       fleetdb.DefaultRetention(),
		Limits:          DefaultLimits(),
		BurnInSilent:    DefaultBurnInSilent,
	}
}

// New makes a Server; it reads (or creates) the token secret from the store.
func New(ctx context.Context, opt Options) (*Server, error) {
	if opt.Builds == nil || opt.Store == nil {
		return nil, errors.New("netboot: Builds and Store are required")
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	def := DefaultOptions()
	if opt.MaxReportBytes <= 0 {
		opt.MaxReportBytes = def.MaxReportBytes
	}
	if opt.RateEvery <= 0 {
		opt.RateEvery = def.RateEvery
	}
	if opt.RateBurst <= 0 {
		opt.RateBurst = def.RateBurst
	}
	if opt.SourceRateEvery <= 0 {
		opt.SourceRateEvery = def.SourceRateEvery
	}
	if opt.SourceBurst <= 0 {
		opt.SourceBurst = def.SourceBurst
	}
	if opt.BurnInSilent <= 0 {
		opt.BurnInSilent = def.BurnInSilent
	}
	opt.Retention = withDefaults(opt.Retention)
	opt.Limits = opt.Limits.withDefaults()
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.FilesURL != "" {
		u, err := checkFilesURL(opt.FilesURL)
		if err != nil {
			return nil, err
		}
		opt.FilesURL = u
	}
	if opt.PublicURL != "" {
		opt.PublicURL = strings.TrimRight(opt.PublicURL, "/")
		if !strings.HasPrefix(opt.PublicURL, "http://") && !strings.HasPrefix(opt.PublicURL, "https://") {
			return nil, fmt.Errorf("public URL %q: want http://HOST[:PORT]", opt.PublicURL)
		}
	}
	recipes := opt.Builds.Recipes()
	if opt.Inventory == nil && opt.DefaultRecipe == "" {
		switch {
		case len(recipes) == 1:
			opt.DefaultRecipe = recipes[0]
		case contains(recipes, "default"):
			opt.DefaultRecipe = "default"
		default:
			return nil, fmt.Errorf("serving %s: say which recipe nodes boot (an inventory or a default recipe)", strings.Join(recipes, ", "))
		}
	}
	if opt.Inventory == nil {
		opt.Inventory = &Inventory{Default: opt.DefaultRecipe}
	}
	if err := opt.Inventory.CheckRecipes("inventory", recipes); err != nil {
		return nil, err
	}
	s := &Server{opt: opt, log: opt.Log, issued: map[string]string{},
		mirror: &mirrorChecks{client: &http.Client{Timeout: 10 * time.Minute}, ok: map[string]bool{}, failed: map[string]time.Time{}}}
	s.limit = newLimiter(opt.RateEvery, opt.RateBurst, opt.Now)
	s.source = newLimiter(opt.SourceRateEvery, opt.SourceBurst, opt.Now)
	s.progressLimit = newLimiter(opt.RateEvery, opt.RateBurst, opt.Now)
	s.secret = opt.Secret
	if s.secret == nil {
		sec, err := opt.Store.Secret(ctx, func() ([]byte, error) {
			b := make([]byte, 32)
			_, err := rand.Read(b)
			return b, err
		})
		if err != nil {
			return nil, err
		}
		s.secret = sec
	}
	for _, b := range opt.Builds.All() {
		s.issued[b.ID] = b.Recipe
	}
	s.attest = attestation.New(attestation.Config{Secret: s.secret, Store: opt.Store, PredictPCR11: opt.PredictPCR11,
		EKRoots: opt.EKRoots, NonceTTL: opt.NonceTTL, Now: opt.Now, Log: opt.Log})
	s.votes = vote.New(vote.Config{Store: opt.Store, Log: opt.Log})
	if opt.EnrollAll > 0 {
		now := opt.Now()
		if err := opt.Store.OpenEnrollment(ctx, "*", now, now.Add(opt.EnrollAll)); err != nil {
			return nil, err
		}
		s.log.Info("AK enrollment window opened for every node", "until", now.Add(opt.EnrollAll))
	}
	s.routes()
	s.syncRollouts(ctx)
	return s, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /boot.ipxe", s.bootScript)
	m.HandleFunc("GET /builds/{recipe}/{build}/{file...}", s.buildFile)
	m.HandleFunc("GET /uefi/{name}", s.uefi)
	m.HandleFunc("GET /iso/{name}", s.iso)
	m.HandleFunc("POST /reports", s.postReport)
	m.HandleFunc("POST /attest/nonce", s.postNonce)
	m.HandleFunc("POST "+bootproto.ProgressPath, s.postProgress)
	m.Handle("POST /api/nodes/{node}/soak/stop", s.operator(s.apiSoakStop))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	m.Handle("GET /{$}", s.pages(s.fleetPage))
	m.Handle("GET /nodes/{node}", s.pages(s.nodePage))
	m.Handle("GET /api/nodes", s.pages(s.apiNodes))
	m.Handle("GET /api/nodes/{node}", s.pages(s.apiNode))
	m.Handle("GET /api/reports/{id}", s.pages(s.apiReport))
	m.Handle("GET /api/builds", s.pages(s.apiBuilds))
	s.rolloutRoutes(m)
	s.mux = m
}

// Token is the report token of one node booting one build: the build id and an HMAC
// of both under the server's secret, so the server checks it without remembering what
// it handed out, and a token is good for the node it was issued to only. To the node
// it is opaque.
func (s *Server) Token(buildID, node string) string {
	m := hmac.New(sha256.New, s.secret)
	io.WriteString(m, "peerboot report token v2\x00"+buildID+"\x00"+node)
	return buildID + "." + hex.EncodeToString(m.Sum(nil))[:32]
}

// buildRecipe is the recipe of build id: the one this process issued a token
// for (kept when the catalogue has since replaced the build), else the
// catalogue's (a build a rescan found, or one another replica served: a token
// is good for any build this secret signed). known is false when neither has
// it: then nothing here knows its recipe better than the report's body.
func (s *Server) buildRecipe(id string) (recipe string, known bool) {
	s.mu.Lock()
	recipe, known = s.issued[id]
	s.mu.Unlock()
	if known {
		return recipe, true
	}
	if b := s.opt.Builds.ByID(id); b != nil {
		return b.Recipe, true
	}
	return "", false
}

// checkToken returns the build id a token was issued for to node, or "" for a static
// token (good for any node).
func (s *Server) checkToken(tok, node string) (string, bool) {
	for _, st := range s.opt.StaticTokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(st)) == 1 {
			return "", true
		}
	}
	id, _, ok := strings.Cut(tok, ".")
	if !ok || len(id) != 16 || !isHex(id) {
		return "", false
	}
	return id, hmac.Equal([]byte(tok), []byte(s.Token(id, node)))
}

// baseURL is where nodes reach this server: PublicURL, else the Host they asked.
func (s *Server) baseURL(r *http.Request) (string, error) {
	if s.opt.PublicURL != "" {
		return s.opt.PublicURL, nil
	}
	host := r.Host
	if host == "" || len(host) > 255 {
		return "", errors.New("no Host header: start the server with --public-url")
	}
	for _, c := range host {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-:[]", c)) {
			return "", fmt.Errorf("host %q is not a host name: start the server with --public-url", host)
		}
	}
	return "http://" + host, nil
}

// remoteIP is the client's address without the port.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// fail answers an error in plain text and logs it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, what string, err error, attrs ...any) {
	attrs = append([]any{"status", status, "path", r.URL.Path, "remote", r.RemoteAddr, "error", err.Error()}, attrs...)
	s.log.Warn(what, attrs...)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.ContentLength != 0 {
		// Refused: the rest of the body is not waited for (net/http would drain it
		// before answering, up to the body deadline).
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s: %v\n", what, err)
}
