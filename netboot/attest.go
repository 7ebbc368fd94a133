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
	"github.com/peerboot/peerboot/output"
)

// Attestation on the collector (see attest for the evidence and its checks):
//
//   - Every boot gets a one-time nonce bound to the node and the build served
//     to it: in the iPXE script's kernel arguments (peerboot.nonce=), or from
//     POST /attest/nonce?node= under the node's report token for a UKI whose
//     command line is baked in. The nonce row carries the PCR 11 predicted for
//     that build's UKI, so a build replaced since is still verifiable.
//   - POST /reports with the Peerboot-Attestation header is verified, the
//     nonce spent (one UPDATE ... WHERE used_at = 0: one replica wins), the
//     node's AK recorded on first use, and the report stored "attested" in the
//     same transaction as its attestation row. Any failed check refuses the
//     POST (4xx with the reason) and records the refusal for the node's page.
//   - Without the header a report is stored "unattested", under its token only.

// Defaults for Options' attestation fields.
const (
	defaultNonceTTL = 2 * time.Hour // a boot, its self-test and retries fit
	noncesPerNode   = 16            // unspent nonces kept per node
	refusalsPerNode = 50            // refusals kept per node
)

// prediction is a build's PCR 11, computed once per build id.
type prediction struct {
	pcr11 string // hex; "" with why
	why   string
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

// issueNonce stores a fresh nonce for node booting b; "" when the store keeps
// no nonces.
func (s *Server) issueNonce(ctx context.Context, node string, b *Build) (string, time.Time, error) {
	as, ok := s.opt.Store.(AttestStore)
	if !ok {
		return "", time.Time{}, nil
	}
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	pcr11, _ := s.predict(b)
	now := s.opt.Now()
	n := Nonce{Nonce: hex.EncodeToString(raw), NodeID: node, Build: b.ID, PCR11: pcr11, IssuedAt: now, Expires: now.Add(s.opt.NonceTTL)}
	if err := as.IssueNonce(ctx, n, noncesPerNode); err != nil {
		return "", time.Time{}, err
	}
	return n.Nonce, n.Expires, nil
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
}

// attestReport checks the evidence of a report POST, if any. false: it
// refused the POST (answered, and recorded the refusal).
func (s *Server) attestReport(w http.ResponseWriter, r *http.Request, node, buildID, remote string, body []byte, sum string) (attestation, bool) {
	h := r.Header.Get(attest.Header)
	if h == "" {
		return attestation{status: Unattested}, true
	}
	refuse := func(status int, err error) (attestation, bool) {
		if as, ok := s.opt.Store.(AttestStore); ok {
			if rerr := as.AddRefusal(r.Context(), AttestRefusal{NodeID: node, At: s.opt.Now(), Reason: err.Error(), ReportSHA256: sum, Remote: remote}, refusalsPerNode); rerr != nil {
				s.log.Error("recording a refusal", "node", node, "error", rerr.Error())
			}
		}
		s.fail(w, r, status, "attested report refused", err, "node", node)
		return attestation{}, false
	}
	as, ok := s.opt.Store.(AttestStore)
	if !ok {
		return refuse(http.StatusNotImplemented, errors.New("this server's store cannot check attestation"))
	}
	ev, err := attest.Decode(h)
	if err != nil {
		return refuse(http.StatusBadRequest, fmt.Errorf("malformed evidence: %w", err))
	}
	n, err := as.LookupNonce(r.Context(), ev.Nonce, node)
	switch {
	case errors.Is(err, ErrNotFound):
		return refuse(http.StatusForbidden, fmt.Errorf("nonce unknown or expired: %q was not issued to node %s, or has expired", clipText(ev.Nonce), node))
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", node)
		return attestation{}, false
	case !n.UsedAt.IsZero():
		return refuse(http.StatusConflict, fmt.Errorf("nonce already used: spent at %s (a replayed report)", n.UsedAt.Format(time.RFC3339)))
	case !s.opt.Now().Before(n.Expires):
		return refuse(http.StatusForbidden, fmt.Errorf("nonce unknown or expired: it expired at %s", n.Expires.Format(time.RFC3339)))
	case buildID != "" && n.Build != buildID:
		return refuse(http.StatusForbidden, fmt.Errorf("the nonce was issued for build %s, the token is for build %s", n.Build, buildID))
	case n.PCR11 == "":
		s.predMu.Lock()
		why := s.predictions[n.Build].why
		s.predMu.Unlock()
		if why == "" {
			why = "none was made when the nonce was issued"
		}
		return refuse(http.StatusForbidden, fmt.Errorf("no PCR 11 prediction for build %s: %s", n.Build, why))
	}
	var want attest.Expect
	want.Nonce = n.Nonce
	p, _ := hex.DecodeString(n.PCR11)
	copy(want.PCR11[:], p)
	want.EKRoots = s.opt.EKRoots
	rec, err := as.NodeAK(r.Context(), node)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", node)
		return attestation{}, false
	}
	if rec != nil {
		want.AKName = rec.AKName
	}
	res, err := attest.Verify(ev, body, want)
	if err != nil {
		return refuse(http.StatusForbidden, err)
	}
	// The nonce is spent in the report's transaction (insertAttestation), so a replica
	// killed before that commit leaves it for the node's retry; a POST that loses the
	// race to spend it is refused there (nonceRaceLost).
	if res.FirstUse {
		got, err := as.RecordAK(r.Context(), NodeAK{NodeID: node, AKName: res.AKName, AKPublic: ev.AKPublic, EKName: res.EKName, RecordedAt: s.opt.Now()})
		if err != nil {
			s.fail(w, r, http.StatusServiceUnavailable, "report not stored", err, "node", node)
			return attestation{}, false
		}
		if got.AKName != res.AKName {
			return refuse(http.StatusForbidden, fmt.Errorf("AK changed: node %s recorded AK %s first, this quote is signed by %s", node, got.AKName, res.AKName))
		}
		s.log.Info("AK recorded (first attested boot)", "node", node, "ak", res.AKName)
	}
	return attestation{status: Attested, akName: res.AKName, nonce: n.Nonce}, true
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
			v.Attestation = Unattested
			ids = append(ids, v.ID)
		}
	}
	as, ok := s.opt.Store.(AttestStore)
	if !ok || len(ids) == 0 {
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
	return nil
}

// refusalCounts is every node's count of refusals (none without an AttestStore).
func (s *Server) refusalCounts(ctx context.Context) (map[string]int64, error) {
	as, ok := s.opt.Store.(AttestStore)
	if !ok {
		return map[string]int64{}, nil
	}
	return as.RefusalCounts(ctx)
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
	as, ok := s.opt.Store.(AttestStore)
	if !ok {
		return nil
	}
	var err error
	v.Refusals, err = as.Refusals(ctx, v.ID, refusalsPerNode)
	v.Refused = int64(len(v.Refusals))
	return err
}
