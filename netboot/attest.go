package netboot

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/netboot/attestation"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/output"
)

// Attestation is the pipeline's attest stage (package attestation); here are
// its HTTP side, POST /attest/nonce, and what the pages show of it.

// refusalsPerNode bounds the refusals kept per node.
const refusalsPerNode = 50

// issueNonce is a fresh nonce for node booting b (attestation.Stage.Issue).
func (s *Server) issueNonce(ctx context.Context, node string, b *Build) (string, time.Time, error) {
	return s.attest.Issue(ctx, node, attestBuild(b))
}

// openNonce checks that nonce is one this server made for node.
func (s *Server) openNonce(nonce, node string) (build string, expires time.Time, ok bool) {
	return s.attest.OpenNonce(nonce, node)
}

// attestBuild is what the attestation stage needs of a build: its UKI.
func attestBuild(b *Build) attestation.Build {
	ab := attestation.Build{ID: b.ID, Recipe: b.Recipe}
	if b.HasUKI() {
		ab.UKI = func() ([]byte, error) {
			f, _, err := b.Open(output.UKIFile)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			return io.ReadAll(f)
		}
	}
	return ab
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
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "nonce not stored", err, "node", node)
		return
	}
	s.log.Info("nonce issued", "node", node, "build", b.ID)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, map[string]any{"nonce": nonce, "node": node, "build": b.ID, "expires": expires.UTC()})
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

// refusalCounts is every node's count of refusals.
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
