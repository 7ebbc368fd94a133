// Package attestation is the report pipeline's second stage (docs/design.md,
// "serve's report pipeline"): the evidence a report carries, checked once.
// It issues the nonces a boot quotes, verifies a report's quote against the
// nonce and the PCR 11 predicted for its build (attest.Verify), and decides
// which AK the node may quote with (attest.Admit). It speaks neither HTTP nor
// SQL: it takes the store through the small interfaces of fleetdb, and its
// refusals are errors whose Kind the HTTP layer turns into a status.
//
//   - Every boot gets a one-time nonce bound to the node and the build served
//     to it, the two things its report token names: in the iPXE script's
//     kernel arguments (peerboot.nonce=), or from POST /attest/nonce?node=
//     under the node's report token for a UKI whose command line is baked in.
//     A nonce is the build, its expiry, 8 random bytes and an HMAC of them and
//     the node under the server's secret (attest.MakeNonce): the server checks
//     it without a row, so issuing stores nothing per node and no number of
//     anonymous script fetches can evict the nonce a node is about to spend
//     (issue 28). The PCR 11 predicted for the build is recorded once per
//     build, so a build replaced since, or a replica that never served it,
//     still verifies.
//   - A report with evidence is verified here; its nonce is spent by the store
//     stage, in the report's own transaction (one replica wins); the node's
//     AK is checked against the inventory's pin or the one on record, and
//     recorded only inside an enrollment window (trust.go).
//   - Without evidence a report is unattested, under its token only.
package attestation

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// Defaults.
const (
	DefaultNonceTTL  = 2 * time.Hour // a boot, its self-test and retries fit
	conflictsPerNode = 8             // AK conflicts kept per node
)

// Store is what the stage reads and writes: spent nonces (read; the store
// stage spends them), predictions, AKs, enrollment windows and conflicts.
type Store interface {
	LookupNonce(ctx context.Context, nonce, node string) (*fleetdb.Nonce, error)
	fleetdb.PredictionStore
	fleetdb.AKStore
	Enrolling(ctx context.Context, node string, at time.Time) (bool, error)
	CloseEnrollment(ctx context.Context, node string) error
	AddAKConflict(ctx context.Context, c fleetdb.AKConflict, keep int) error
}

// Config is the stage's setting; Secret and Store are required.
type Config struct {
	Secret []byte // keys the nonces (the server's token secret)
	Store  Store
	// PredictPCR11 gives the PCR 11 a UKI leaves at enter-initrd
	// (measure.Predict); nil: every report with evidence is refused, having
	// nothing to be compared with.
	PredictPCR11 func(uki []byte) ([32]byte, error)
	EKRoots      *x509.CertPool // when set, must verify the nodes' EK certificates
	NonceTTL     time.Duration  // a nonce's life; 0: DefaultNonceTTL
	Now          func() time.Time
	Log          *slog.Logger
}

// Stage verifies reports' evidence and issues nonces.
type Stage struct {
	cfg Config
	// predictions caches each build's PCR 11, computed once per build id.
	mu          sync.Mutex
	predictions map[string]prediction
}

// New makes the stage.
func New(cfg Config) *Stage {
	if cfg.NonceTTL <= 0 {
		cfg.NonceTTL = DefaultNonceTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Stage{cfg: cfg, predictions: map[string]prediction{}}
}

// Kind says which check refused a report; the HTTP layer answers it.
type Kind int

const (
	Malformed   Kind = iota + 1 // the evidence does not decode (400)
	Forbidden                   // a check failed: nonce, prediction, quote, AK (403)
	Replayed                    // the nonce was already spent (409)
	Unavailable                 // the store failed: nothing was decided (503)
)

// Refusal is a report the stage did not let through and why.
type Refusal struct {
	Kind Kind
	Err  error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(k Kind, err error) *Refusal { return &Refusal{Kind: k, Err: err} }

// Report is what the stage sees of a report: who sent it, under which token,
// with which evidence, and the AK and EK names the inventory pins for the
// node ("": none).
type Report struct {
	Node               string
	Build              string // the build its token names; "" for a static token
	Evidence           string // the Peerboot-Attestation header; "": none
	Body               []byte
	SHA256             string // hex, of Body
	Remote             string
	PinnedAK, PinnedEK string
}

// Result is the report's attestation, as the store stage records it.
type Result struct {
	Status       string // fleetdb.Attested or fleetdb.Unattested
	AKName       string
	Nonce        string // the nonce it spends
	NonceBuild   string
	NonceExpires time.Time
}

// Verify checks rep's evidence, if any: the nonce (made by this server for
// this node, unexpired, unspent, for the token's build), the quote against
// the build's PCR 11, and the AK (trust.go). A refusal is a *Refusal.
func (s *Stage) Verify(ctx context.Context, rep Report) (Result, error) {
	if rep.Evidence == "" {
		return Result{Status: fleetdb.Unattested}, nil
	}
	ev, err := attest.Decode(rep.Evidence)
	if err != nil {
		return Result{}, refuse(Malformed, fmt.Errorf("malformed evidence: %w", err))
	}
	nb, expires, ok := s.OpenNonce(ev.Nonce, rep.Node)
	if !ok {
		return Result{}, refuse(Forbidden, fmt.Errorf("nonce unknown or expired: %q was not issued to node %s, or has expired", Clip(ev.Nonce), rep.Node))
	}
	if !s.cfg.Now().Before(expires) {
		return Result{}, refuse(Forbidden, fmt.Errorf("nonce unknown or expired: it expired at %s", expires.Format(time.RFC3339)))
	}
	switch spent, err := s.cfg.Store.LookupNonce(ctx, ev.Nonce, rep.Node); {
	case err == nil:
		return Result{}, refuse(Replayed, fmt.Errorf("nonce already used: spent at %s (a replayed report)", spent.UsedAt.Format(time.RFC3339)))
	case !errors.Is(err, fleetdb.ErrNotFound):
		return Result{}, refuse(Unavailable, err)
	}
	if rep.Build != "" && nb != rep.Build {
		return Result{}, refuse(Forbidden, fmt.Errorf("the nonce was issued for build %s, the token is for build %s", nb, rep.Build))
	}
	pcr11, why, known, err := s.cfg.Store.Prediction(ctx, nb)
	if err != nil {
		return Result{}, refuse(Unavailable, err)
	}
	if pcr11 == "" {
		if !known {
			why = "none was recorded when the nonce was issued"
		}
		return Result{}, refuse(Forbidden, fmt.Errorf("no PCR 11 prediction for build %s: %s", nb, why))
	}
	var want attest.Expect
	want.Nonce = ev.Nonce
	p, _ := hex.DecodeString(pcr11)
	copy(want.PCR11[:], p)
	want.EKRoots = s.cfg.EKRoots
	// The quote is checked against the AK it carries (want.AKName ""), so a
	// quote by another AK is known to verify before it is called a conflict;
	// which AK the node may use is decided after, by trustAK.
	res, err := attest.Verify(ev, rep.Body, want)
	if err != nil {
		return Result{}, refuse(Forbidden, err)
	}
	// The nonce is spent in the report's transaction (the store stage), so a
	// replica killed before that commit leaves it for the node's retry; a POST
	// that loses the race to spend it is refused there.
	if err := s.trustAK(ctx, rep, res, ev.AKPublic); err != nil {
		return Result{}, err
	}
	return Result{Status: fleetdb.Attested, AKName: res.AKName, Nonce: ev.Nonce, NonceBuild: nb, NonceExpires: expires}, nil
}

// Build is what issuing a nonce needs of a served build.
type Build struct {
	ID, Recipe string
	// UKI reads the build's UKI; nil: the build has none (a kernel booted
	// without systemd-stub leaves PCR 11 unmeasured).
	UKI func() ([]byte, error)
}

// prediction is a build's PCR 11, computed once per build id.
type prediction struct {
	pcr11 string // hex; "" with why
	why   string
	saved bool // recorded in the store by this process
}

// predict returns the PCR 11 predicted for b's UKI at enter-initrd, cached per
// build id; "" and the reason when there is none.
func (s *Stage) predict(b Build) prediction {
	s.mu.Lock()
	p, ok := s.predictions[b.ID]
	s.mu.Unlock()
	if ok {
		return p
	}
	switch {
	case s.cfg.PredictPCR11 == nil:
		p.why = "this server predicts no PCR 11 values"
	case b.UKI == nil:
		p.why = fmt.Sprintf("build %s of %s has no UKI (peerboot.efi): a kernel booted without systemd-stub leaves PCR 11 unmeasured", b.ID, b.Recipe)
	default:
		uki, err := b.UKI()
		if err != nil {
			p.why = fmt.Sprintf("build %s: reading peerboot.efi: %v", b.ID, err)
			break
		}
		v, err := s.cfg.PredictPCR11(uki)
		if err != nil {
			p.why = fmt.Sprintf("build %s: predicting PCR 11: %v", b.ID, err)
			break
		}
		p.pcr11 = hex.EncodeToString(v[:])
	}
	if p.why != "" {
		s.cfg.Log.Warn("no PCR 11 prediction: reports of this build cannot be attested", "build", b.ID, "recipe", b.Recipe, "why", p.why)
	}
	s.mu.Lock()
	s.predictions[b.ID] = p
	s.mu.Unlock()
	return p
}

// Issue makes a fresh nonce for node booting b, recording b's PCR 11
// prediction first (once per build and process).
func (s *Stage) Issue(ctx context.Context, node string, b Build) (string, time.Time, error) {
	if p := s.predict(b); !p.saved {
		if err := s.cfg.Store.SavePrediction(ctx, b.ID, p.pcr11, p.why, s.cfg.Now()); err != nil {
			return "", time.Time{}, err
		}
		s.mu.Lock()
		p.saved = true
		s.predictions[b.ID] = p
		s.mu.Unlock()
	}
	raw := make([]byte, attest.NonceRandom)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	expires := s.cfg.Now().Add(s.cfg.NonceTTL).Truncate(time.Second)
	n, err := attest.MakeNonce(s.cfg.Secret, node, b.ID, expires, raw)
	return n, expires, err
}

// OpenNonce checks that nonce is one this server made for node (attest.OpenNonce).
func (s *Stage) OpenNonce(nonce, node string) (build string, expires time.Time, ok bool) {
	return attest.OpenNonce(s.cfg.Secret, nonce, node)
}

// Clip shortens outside text quoted into a reason.
func Clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
