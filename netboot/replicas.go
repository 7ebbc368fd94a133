package netboot

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

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
// Another body under that nonce still is one. nil: not such a retry.
func (s *Server) storedRetry(r *http.Request, in *incoming) *fleetdb.StoredReport {
	if r.Header.Get(attest.Header) == "" {
		return nil // unattested: AddReport's duplicate answers it
	}
	id, err := s.opt.Store.StoredReportID(r.Context(), in.node, in.sum)
	if err != nil {
		s.log.Error("looking up a retried report", "node", in.node, "error", err.Error())
		return nil
	}
	if id == 0 {
		return nil
	}
	return &fleetdb.StoredReport{ID: id, NodeID: in.node, Recipe: in.recipe, Build: in.buildID, Verdict: in.rep.Verdict, SHA256: in.sum, ReceivedAt: s.opt.Now()}
}

// nonceRaceLost refuses an attested POST whose nonce another POST spent between its
// check and its commit, and records the refusal as attestReport records its own.
func (s *Server) nonceRaceLost(w http.ResponseWriter, r *http.Request, node, remote, sum string) {
	err := errors.New("nonce already used: another POST spent it first (a replayed report)")
	if rerr := s.opt.Store.AddRefusal(r.Context(), fleetdb.AttestRefusal{NodeID: node, At: s.opt.Now(), Reason: err.Error(), ReportSHA256: sum, Remote: remote}, refusalsPerNode); rerr != nil {
		s.log.Error("recording a refusal", "node", node, "error", rerr.Error())
	}
	s.fail(w, r, http.StatusConflict, "attested report refused", err, "node", node)
}
