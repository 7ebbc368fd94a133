package netboot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/output"
)

// Attestation on the collector (see attest for the evidence and its checks):
//
//   - Every boot gets a one-time nonce bound to the node and the build served
//     to it, the two things its report token names: in the iPXE script's
//     kernel arguments (peerboot.nonce=), or from POST /attest/nonce?node=
//     under the node's report token for a UKI whose command line is baked in.
//     A nonce is the build, its expiry, 8 random bytes and an HMAC of them and
//     the node under the server's secret (makeNonce): the server checks it
//     without a row, so issuing stores nothing per node and no number of
//     anonymous script fetches can evict the nonce a node is about to spend
//     (issue 28). The PCR 11 predicted for the build is recorded once per
//     build (attest_predictions), so a build replaced since, or a replica that
//     never served it, still verifies.
//   - POST /reports with the Peerboot-Attestation header is verified, the
//     nonce spent (an INSERT of its row: one replica wins; the row stays until
//     the nonce expires), the node's AK checked against the inventory's pin or
//     the one on record, recorded only inside an enrollment window
//     (enroll.go), and the report stored "attested" in the same transaction as
//     its attestation row. Any failed check refuses the POST (4xx with the
//     reason) and records the refusal for the node's page.
//   - Without the header a report is stored "unattested", under its token only.

// Defaults for Options' attestation fields.
const (
	defaultNonceTTL = 2 * time.Hour // a boot, its self-test and retries fit
	refusalsPerNode = 50            // refusals kept per node
)

// prediction is a build's PCR 11, computed once per build id.
type prediction struct {
	pcr11 string // hex; "" with why
	why   string
	saved bool // recorded in the store by this process
}

// predict returns the PCR 11 predicted for b's UKI at enter-initrd, cached per
// build id; "" and the reason when there is none.
func (s *Server) predict(b *Build) (string, string) {
	s.predMu.Lock()
	p, ok := s.predictions[b.ID]
	s.predMu.Unlock()
	if ok {
		return p.pcr11, p.why
	}
	switch {
	case s.opt.PredictPCR11 == nil:
		p.why = "this server predicts no PCR 11 values"
	case !b.HasUKI():
		p.why = fmt.Sprintf("build %s of %s has no UKI (peerboot.efi): a kernel booted without systemd-stub leaves PCR 11 unmeasured", b.ID, b.Recipe)
	default:
		f, _, err := b.Open(output.UKIFile)
		if err != nil {
			p.why = fmt.Sprintf("build %s: reading peerboot.efi: %v", b.ID, err)
			break
		}
		uki, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			p.why = fmt.Sprintf("build %s: reading peerboot.efi: %v", b.ID, err)
			break
		}
		v, err := s.opt.PredictPCR11(uki)
		if err != nil {
			p.why = fmt.Sprintf("build %s: predicting PCR 11: %v", b.ID, err)
			break
		}
		p.pcr11 = hex.EncodeToString(v[:])
	}
	if p.why != "" {
		s.log.Warn("no PCR 11 prediction: reports of this build cannot be attested", "build", b.ID, "recipe", b.Recipe, "why", p.why)
	}
	s.predMu.Lock()
	s.predictions[b.ID] = p
	s.predMu.Unlock()
	return p.pcr11, p.why
}

// issueNonce makes a fresh nonce for node booting b, recording b's PCR 11
// prediction first (once per build and process); "" when the store keeps no
// attestation.
func (s *Server) issueNonce(ctx context.Context, node string, b *Build) (string, time.Time, error) {
	as := s.opt.Store
	pcr11, why := s.predict(b)
	s.predMu.Lock()
	saved := s.predictions[b.ID].saved
	s.predMu.Unlock()
	if !saved {
		if err := as.SavePrediction(ctx, b.ID, pcr11, why, s.opt.Now()); err != nil {
			return "", time.Time{}, err
		}
		s.predMu.Lock()
		p := s.predictions[b.ID]
		p.saved = true
		s.predictions[b.ID] = p
		s.predMu.Unlock()
	}
	raw := make([]byte, attest.NonceRandom)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	expires := s.opt.Now().Add(s.opt.NonceTTL).Truncate(time.Second)
	n, err := attest.MakeNonce(s.secret, node, b.ID, expires, raw)
	return n, expires, err
}

// openNonce checks that nonce is one this server made for node (attest.OpenNonce).
func (s *Server) openNonce(nonce, node string) (build string, expires time.Time, ok bool) {
	return attest.OpenNonce(s.secret, nonce, node)
}

// postNonce is POST /attest/nonce?node=: a nonce for a node whose command line
// cannot carry one (a Secure Boot UKI's is baked in and signed). It takes the
// token a report would: a build's token names the build; a static token gets
// the build the inventory (and rollout) gives the node now.
func (s *Server) postNonce(w http.ResponseWriter, r *http.Request) {
	node, buildID, ok := s.authNode(w, r, "nonce refused", "asks too often", "the report token")
	if !ok {
		return
	}
	var b *Build
	if buildID != "" {
		if b = s.opt.Builds.ByID(buildID); b == nil {
			s.fail(w, r, http.StatusGone, "nonce refused", fmt.Errorf("build %s is no longer served: boot again", buildID), "node", node)
			return
		}
	} else {
		mac, _ := NormalizeMAC(node)
		m, ok := s.opt.Inventory.Lookup(mac, "")
		if !ok {
			s.fail(w, r, http.StatusNotFound, "nonce refused", fmt.Errorf("no inventory rule for node %s and no default recipe", node), "node", node)
			return
		}
		var err error
		if b, err = s.chooseBuild(r.Context(), m, node); err != nil {
			s.fail(w, r, http.StatusNotFound, "nonce refused", err, "node", node)
			return
		}
	}
	nonce, expires, err := s.issueNonce(r.Context(), node, b)
	switch {
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "nonce not stored", err, "node", node)
		return
	case nonce == "":
		s.fail(w, r, http.StatusNotImplemented, "nonce refused", errors.New("this server's store keeps no nonces"), "node", node)
		return
	}
	s.log.Info("nonce issued", "node", node, "build", b.ID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, map[string]any{"nonce": nonce, "node": node, "build": b.ID, "expires": expires.UTC()})
}

// attestation is what postReport stores of a report's attestation.
type attestation struct {
	status, akName, nonce string
	nonceBuild            string
	nonceExpires          time.Time
}

// attestReport checks the evidence of a report POST, if any. false: it
// refused the POST (answered, and recorded the refusal).
func (s *Server) attestReport(w http.ResponseWriter, r *http.Request, node, buildID, remote string, body []byte, sum string) (attestation, bool) {
	h := r.Header.Get(attest.Header)
	if h == "" {
		return attestation{status: fleetdb.Unattested}, true
	}
	refuse := func(status int, err error) (attestation, bool) {
		if rerr := s.opt.Store.AddRefusal(r.Context(), fleetdb.AttestRefusal{NodeID: node, At: s.opt.Now(), Reason: err.Error(), ReportSHA256: sum, Remote: remote}, refusalsPerNode); rerr != nil {
			s.log.Error("recording a refusal", "node", node, "error", rerr.Error())
		}
		s.fail(w, r, status, "attested report refused", err, "node", node)
		return attestation{}, false
	}
	as := s.opt.Store
	ev, err := attest.Decode(h)
	if err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("malformed evidence: %w", err))
	}
	nb, expires, ok := s.openNonce(ev.Nonce, node)
	if !ok {
		return refuse(http.StatusForbidden, fmt.Errorf("nonce unknown or expired: %q was not issued to node %s, or has expired", clipText(ev.Nonce), node))
	}
	if !s.opt.Now().Before(expires) {
		return refuse(http.StatusForbidden, fmt.Errorf("nonce unknown or expired: it expired at %s", expires.Format(time.RFC3339)))
	}
	switch spent, err := as.LookupNonce(r.Context(), ev.Nonce, node); {
	case err == nil:
		return refuse(http.StatusConflict, fmt.Errorf("nonce already used: spent at %s (a replayed report)", spent.UsedAt.Format(time.RFC3339)))
	case !errors.Is(err, fleetdb.ErrNotFound):
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", node)
		return attestation{}, false
	}
	if buildID != "" && nb != buildID {
		return refuse(http.StatusForbidden, fmt.Errorf("the nonce was issued for build %s, the token is for build %s", nb, buildID))
	}
	pcr11, why, known, err := as.Prediction(r.Context(), nb)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", node)
		return attestation{}, false
	}
	if pcr11 == "" {
		if !known {
			why = "none was recorded when the nonce was issued"
		}
		return refuse(http.StatusForbidden, fmt.Errorf("no PCR 11 prediction for build %s: %s", nb, why))
	}
	n := fleetdb.Nonce{Nonce: ev.Nonce, NodeID: node, Build: nb, PCR11: pcr11, Expires: expires}
	var want attest.Expect
	want.Nonce = n.Nonce
	p, _ := hex.DecodeString(n.PCR11)
	copy(want.PCR11[:], p)
	want.EKRoots = s.opt.EKRoots
	// The quote is checked against the AK it carries (want.AKName ""), so a
	// quote by another AK is known to verify before it is called a conflict;
	// which AK the node may use is decided after, by trustAK.
	res, err := attest.Verify(ev, body, want)
	if err != nil {
		return refuse(http.StatusForbidden, err)
	}
	// The nonce is spent in the report's transaction (insertAttestation), so a replica
	// killed before that commit leaves it for the node's retry; a POST that loses the
	// race to spend it is refused there (nonceRaceLost).
	if status, err := s.trustAK(r.Context(), node, remote, res, ev.AKPublic); err != nil {
		if status == http.StatusServiceUnavailable {
			s.fail(w, r, status, "report not stored", err, "node", node)
			return attestation{}, false
		}
		return refuse(status, err)
	}
	return attestation{status: fleetdb.Attested, akName: res.AKName, nonce: n.Nonce, nonceBuild: n.Build, nonceExpires: n.Expires}, true
}

// clipText shortens outside text quoted into a reason.
func clipText(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// attach fills the attestation of the summaries listed (pre-migration reports
// and stores without attestation read as unattested).
func (s *Server) attach(ctx context.Context, views ...*ReportSummary) error {
	var ids []int64
	for _, v := range views {
		if v != nil {
			v.Attestation = fleetdb.Unattested
			ids = append(ids, v.ID)
		}
	}
	as := s.opt.Store
	if len(ids) == 0 {
		return nil
	}
	got, err := as.Attestations(ctx, ids)
	if err != nil {
		return err
	}
	for _, v := range views {
		if v == nil {
			continue
		}
		if a, ok := got[v.ID]; ok {
			v.Attestation, v.AKName = a.Status, a.AKName
		}
	}
	vs := s.opt.Store
	votes, err := vs.Votes(ctx, ids)
	if err != nil {
		return err
	}
	for _, v := range views {
		if v == nil {
			continue
		}
		if vote, ok := votes[v.ID]; ok {
			v.Vote = &vote
		}
	}
	return nil
}

// refusalCounts is every node's count of refusals (none without an AttestStore).
func (s *Server) refusalCounts(ctx context.Context) (map[string]int64, error) {
	return s.opt.Store.RefusalCounts(ctx)
}

// attachNode fills a node view's attestation: its reports' and its refusals.
func (s *Server) attachNode(ctx context.Context, v *NodeView) error {
	views := []*ReportSummary{v.Previous}
	if v.Latest != nil {
		views = append(views, &v.Latest.ReportSummary)
	}
	for i := range v.History {
		views = append(views, &v.History[i])
	}
	if err := s.attach(ctx, views...); err != nil {
		return err
	}
	as := s.opt.Store
	var err error
	if v.Refusals, err = as.Refusals(ctx, v.ID, refusalsPerNode); err != nil {
		return err
	}
	v.Refused = int64(len(v.Refusals))
	ak, err := as.NodeAK(ctx, v.ID)
	if err != nil {
		return err
	}
	if ak != nil {
		v.AKName = ak.AKName
	}
	if v.AKConflicts, err = s.opt.Store.AKConflicts(ctx, v.ID); err != nil {
		return err
	}
	return nil
}
