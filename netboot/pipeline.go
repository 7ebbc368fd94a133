package netboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/attestation"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/vote"
	"github.com/peerboot/peerboot/selftest"
)

// The report path is one pipeline, each stage a package entered once per
// report (docs/design.md, "serve's report pipeline"):
//
//	receive  who posts, and what: rates, the token, the body, the JSON     receiveReport (collector.go)
//	attest   the evidence, when sent: the nonce, the quote, the AK         attestation.Stage.Verify
//	store    one transaction: the report, its attestation, its nonce spent  fleetdb.ReportStore.AddReport (sqldb)
//	vote     whether it is a vote (rollout.Counts), then the rollout's      vote.Stage.Cast
//	         rules, recorded with the vote in one transaction
//
// This file is the pipeline and its answers: each stage returns, and only
// here does a result become an HTTP status (refused, below).
//
// A retry of a stored report (its answer lost) skips attest and store and is
// answered as the duplicate it is; it still passes vote, which records a
// report's consequences once however often it arrives, so a replica killed
// between store and vote loses nothing.

// incoming is a report that receive let in.
type incoming struct {
	start   time.Time
	remote  string
	node    string
	buildID string // "" for a static token
	recipe  string
	body    []byte
	sum     string // hex sha256 of body
	rep     *selftest.Report
}

// postReport is POST /reports. 201 means the report is committed to the
// database; 200 that this node's same report already was (a retry whose
// answer was lost, perhaps sent to another replica): the POST is idempotent.
// Refusals: receiveReport's, the attest stage's (400 malformed evidence, 409
// nonce spent, 403 a failed check), a replay of another node's stored report
// (409).
func (s *Server) postReport(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	in, ok := s.receiveReport(w, r)
	if !ok {
		return
	}
	f := s.facts(in)
	sr, err := s.storedRetry(ctx, r, in)
	if err != nil {
		s.refused(w, r, in, err)
		return
	}
	if sr != nil {
		s.votes.Cast(ctx, sr, f.vote)
		s.duplicate(w, in.node, sr.ID, in.rep.Verdict, in.sum)
		return
	}
	att, err := s.attest.Verify(ctx, attestation.Report{Node: in.node, Build: in.buildID, Evidence: r.Header.Get(attest.Header),
		Body: in.body, SHA256: in.sum, Remote: in.remote, PinnedAK: f.pinnedAK, PinnedEK: f.pinnedEK})
	if err != nil {
		s.refused(w, r, in, err)
		return
	}
	sr, dup, err := s.storeReport(ctx, in, att)
	if err != nil {
		s.refused(w, r, in, err)
		return
	}
	s.votes.Cast(ctx, sr, f.vote)
	if dup {
		s.duplicate(w, in.node, sr.ID, in.rep.Verdict, sr.SHA256)
		return
	}
	s.prune(r, in.node)
	s.log.Info("report stored", "id", sr.ID, "node", in.node, "recipe", in.recipe, "build", in.buildID, "verdict", in.rep.Verdict, "attestation", att.Status,
		"bytes", len(in.body), "ms", s.opt.Now().Sub(in.start).Milliseconds())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/api/reports/%d", sr.ID))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": sr.ID, "node": in.node, "verdict": in.rep.Verdict, "sha256": sr.SHA256, "attestation": att.Status})
}

// errReplayed is a report whose body another node already stored.
var errReplayed = errors.New("replayed")

// storeReport commits in with its attestation. dup: this node's same report
// was already stored (sr is that one).
func (s *Server) storeReport(ctx context.Context, in *incoming, att attestation.Result) (sr *fleetdb.StoredReport, dup bool, err error) {
	sr = &fleetdb.StoredReport{NodeID: in.node, ReceivedAt: s.opt.Now(), Recipe: in.recipe, Build: in.buildID, Verdict: in.rep.Verdict,
		SHA256: in.sum, Remote: in.remote, Body: in.body, Attestation: att.Status, AKName: att.AKName, Nonce: att.Nonce,
		NonceBuild: att.NonceBuild, NonceExpires: att.NonceExpires}
	fleetdb.Summarize(sr, in.rep)
	id, err := s.opt.Store.AddReport(ctx, sr)
	switch {
	case errors.Is(err, fleetdb.ErrDuplicate) && id > 0:
		sr, err = s.retryOf(ctx, id, in)
		return sr, err == nil, err
	case errors.Is(err, fleetdb.ErrDuplicate):
		return nil, false, fmt.Errorf("%w: report sha256 %s was already received", errReplayed, sr.SHA256[:16])
	case errors.Is(err, fleetdb.ErrNonceSpent):
		// Another POST spent the nonce between the check and this commit.
		return nil, false, &attestation.Refusal{Kind: attestation.Replayed, Err: errors.New("nonce already used: another POST spent it first (a replayed report)")}
	case err != nil:
		return nil, false, err
	}
	sr.ID = id
	return sr, false, nil
}

// refused answers a report a stage did not take. A refusal of its evidence
// is recorded for the node's page; a store that failed decided nothing (503).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, in *incoming, err error) {
	var ref *attestation.Refusal
	switch {
	case errors.As(err, &ref) && ref.Kind != attestation.Unavailable:
		status := map[attestation.Kind]int{attestation.Malformed: http.StatusBadRequest, attestation.Forbidden: http.StatusForbidden,
			attestation.Replayed: http.StatusConflict}[ref.Kind]
		rec := fleetdb.AttestRefusal{NodeID: in.node, At: s.opt.Now(), Reason: err.Error(), ReportSHA256: in.sum, Remote: in.remote}
		if rerr := s.opt.Store.AddRefusal(r.Context(), rec, refusalsPerNode); rerr != nil {
			s.log.Error("recording a refusal", "node", in.node, "error", rerr.Error())
		}
		s.fail(w, r, status, "attested report refused", err, "node", in.node)
	case errors.Is(err, errReplayed):
		s.fail(w, r, http.StatusConflict, "report refused", err, "node", in.node)
	default:
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", in.node)
	}
}

// duplicate answers a report this node already stored: 200 with the stored report's
// id, so a node retrying after a lost answer (a replica killed after its commit, a
// timeout) learns its report is in, and the report is stored once.
func (s *Server) duplicate(w http.ResponseWriter, node string, id int64, verdict, sum string) {
	s.log.Info("report already stored (a retry)", "id", id, "node", node, "sha256", sum[:16])
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/api/reports/%d", id))
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(map[string]any{"id": id, "node": node, "verdict": verdict, "sha256": sum, "duplicate": true})
}

// storedRetry finds an attested POST of a report this node already stored (a
// retry whose answer was lost) before its evidence is checked: the first try
// spent the nonce it carries, so the check would refuse the retry as a replay.
// Another body under that nonce still is one. nil, nil: not such a retry.
func (s *Server) storedRetry(ctx context.Context, r *http.Request, in *incoming) (*fleetdb.StoredReport, error) {
	if r.Header.Get(attest.Header) == "" {
		return nil, nil // unattested: AddReport's duplicate answers it
	}
	id, err := s.opt.Store.StoredReportID(ctx, in.node, in.sum)
	if err != nil {
		s.log.Error("looking up a retried report", "node", in.node, "error", err.Error())
		return nil, nil
	}
	if id == 0 {
		return nil, nil
	}
	return s.retryOf(ctx, id, in)
}

// retryOf is this node's stored report id as its retry in votes: for the
// build and recipe it was stored under, at the time it was stored. A retry
// carries the token its first try did; the same bytes under another build's
// token are a replay (anyone can fetch a node's token for the build it is
// served now), refused: else a stored report, attested and never a vote (a
// static token names no build), would vote for a build its node never booted.
func (s *Server) retryOf(ctx context.Context, id int64, in *incoming) (*fleetdb.StoredReport, error) {
	got, err := s.opt.Store.Report(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("reading the stored copy of a retried report: %w", err)
	}
	if got.Build != in.buildID {
		return nil, fmt.Errorf("%w: report sha256 %s was stored under the token of build %q, this POST has the token of build %q (a retry sends the token it first sent)",
			errReplayed, in.sum[:16], got.Build, in.buildID)
	}
	return &fleetdb.StoredReport{ID: id, NodeID: in.node, Recipe: got.Recipe, Build: got.Build, Verdict: got.Verdict, SHA256: got.SHA256, ReceivedAt: got.ReceivedAt}, nil
}

// facts is what the inventory and the catalogue say of a report, read once
// and handed to the stages as data: the node's pinned TPM (attest), its
// listing and its recipe's rollout (vote).
type facts struct {
	pinnedAK, pinnedEK string
	vote               vote.Facts
}

func (s *Server) facts(in *incoming) facts {
	var f facts
	// receive already made in.recipe the build's own where this server knows
	// the build (buildRecipe: a token it issued, or the catalogue), so a
	// report's body cannot name the rollout it votes in.
	f.vote.Recipe = in.recipe
	f.vote.Policy, f.vote.HasPolicy = s.opt.Inventory.Policy(f.vote.Recipe)
	mac, err := NormalizeMAC(in.node)
	if err != nil {
		return f
	}
	r, ok := s.opt.Inventory.ByMAC(mac)
	if !ok {
		return f
	}
	f.pinnedAK, f.pinnedEK = r.AKName, r.EKName
	f.vote.Listed, f.vote.Listing = true, vote.Listing{Recipe: r.Recipe, Channel: r.Channel}
	switch {
	case r.AKName != "" || r.EKName != "":
		f.vote.Listing.MustAttest = "its TPM is pinned in the inventory"
	case r.TPM:
		f.vote.Listing.MustAttest = "tpm = true in the inventory"
	}
	return f
}
