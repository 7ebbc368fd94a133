package netboot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
)

// The report path is one pipeline, each stage entered once per report:
//
//	receive  who posts, and what (HTTP: rates, the token, the body, the JSON)   receiveReport, collector.go
//	attest   the evidence, when sent: the nonce, attest.Verify, attest.Admit    attestReport, attest.go and enroll.go
//	store    one transaction: the report, its attestation, its nonce spent     storeReport, below; Store.AddReport
//	vote     whether it is a vote (rollout.Counts), then the rollout's rules,  applyRollout, rollout_server.go
//	         recorded with the vote in one transaction (RolloutStore.RecordVerdict)
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
// Refusals: receiveReport's, attestReport's (400 malformed evidence, 409 nonce
// spent, 403 a failed check), a replay of another node's stored report (409).
func (s *Server) postReport(w http.ResponseWriter, r *http.Request) {
	in, ok := s.receiveReport(w, r)
	if !ok {
		return
	}
	if sr := s.storedRetry(r, in); sr != nil {
		s.applyRollout(r.Context(), sr)
		s.duplicate(w, in.node, sr.ID, in.rep.Verdict, in.sum)
		return
	}
	att, ok := s.attestReport(w, r, in.node, in.buildID, in.remote, in.body, in.sum)
	if !ok {
		return
	}
	sr, dup, ok := s.storeReport(w, r, in, att)
	if !ok {
		return
	}
	s.applyRollout(r.Context(), sr)
	if dup {
		s.duplicate(w, in.node, sr.ID, in.rep.Verdict, sr.SHA256)
		return
	}
	s.prune(r, in.node)
	s.log.Info("report stored", "id", sr.ID, "node", in.node, "recipe", in.recipe, "build", in.buildID, "verdict", in.rep.Verdict, "attestation", att.status,
		"bytes", len(in.body), "ms", s.opt.Now().Sub(in.start).Milliseconds())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/api/reports/%d", sr.ID))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": sr.ID, "node": in.node, "verdict": in.rep.Verdict, "sha256": sr.SHA256, "attestation": att.status})
}

// storeReport commits in with its attestation. dup: this node's same report
// was already stored (sr is that one). On false the refusal is written.
func (s *Server) storeReport(w http.ResponseWriter, r *http.Request, in *incoming, att attestation) (sr *fleetdb.StoredReport, dup, ok bool) {
	sr = &fleetdb.StoredReport{NodeID: in.node, ReceivedAt: s.opt.Now(), Recipe: in.recipe, Build: in.buildID, Verdict: in.rep.Verdict,
		SHA256: in.sum, Remote: in.remote, Body: in.body, Attestation: att.status, AKName: att.akName, Nonce: att.nonce,
		NonceBuild: att.nonceBuild, NonceExpires: att.nonceExpires}
	fleetdb.Summarize(sr, in.rep)
	id, err := s.opt.Store.AddReport(r.Context(), sr)
	switch {
	case errors.Is(err, fleetdb.ErrDuplicate) && id > 0:
		sr.ID = id
		return sr, true, true
	case errors.Is(err, fleetdb.ErrDuplicate):
		s.fail(w, r, http.StatusConflict, "report refused", fmt.Errorf("replayed: report sha256 %s was already received", sr.SHA256[:16]), "node", in.node)
		return nil, false, false
	case errors.Is(err, fleetdb.ErrNonceSpent):
		s.nonceRaceLost(w, r, in.node, in.remote, sr.SHA256)
		return nil, false, false
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", in.node)
		return nil, false, false
	}
	sr.ID = id
	return sr, false, true
}
