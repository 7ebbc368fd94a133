package netboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// Which AK a node may quote with (issue 28: trust on first use let an
// attacker's swtpm register a node's first AK and lock the real node out) is
// attest.Admit's decision: an ak_name pinned in the inventory, else the AK on
// record, else one recorded inside an enrollment window an operator opened
// (peerboot rollout enroll, or serve --enroll DURATION for every node); an
// ek_name pin is a check only. Here are its facts and its consequences: every
// AK refused after its quote verified is kept as a conflict (the node page and
// the API list them), so a replaced TPM or a forger shows instead of silently
// failing; peerboot rollout ak-reset NODE forgets the AK on record.

const conflictsPerNode = 8 // AK conflicts kept per node

// trustAK admits res's AK for node or refuses it, recording it when admitted
// for the first time. The status is the POST's answer when it is refused (503:
// the store failed).
func (s *Server) trustAK(ctx context.Context, node, remote string, res *attest.Result, akPublic []byte) (int, error) {
	as, es := s.opt.Store, s.opt.Store
	f := attest.AKFacts{Node: node}
	if mac, err := NormalizeMAC(node); err == nil {
		pin, _ := s.opt.Inventory.ByMAC(mac)
		f.PinnedAK, f.PinnedEK = pin.AKName, pin.EKName
	}
	rec, err := as.NodeAK(ctx, node)
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if rec != nil {
		f.Recorded = rec.AKName
	}
	if f.PinnedAK == "" && f.Recorded == "" {
		if f.Enrolling, err = es.Enrolling(ctx, node, s.opt.Now()); err != nil {
			return http.StatusServiceUnavailable, err
		}
	}
	refuse := func(why error) (int, error) {
		c := fleetdb.AKConflict{NodeID: node, AKName: res.AKName, EKName: res.EKName, Last: s.opt.Now(), Remote: remote}
		if err := es.AddAKConflict(ctx, c, conflictsPerNode); err != nil {
			s.log.Error("recording an AK conflict", "node", node, "error", err.Error())
		}
		return http.StatusForbidden, why
	}
	adm, err := attest.Admit(f, res)
	if err != nil {
		return refuse(err)
	}
	if !adm.Record {
		return 0, nil
	}
	got, err := as.RecordAK(ctx, fleetdb.NodeAK{NodeID: node, AKName: res.AKName, AKPublic: akPublic, EKName: res.EKName, RecordedAt: s.opt.Now()})
	if err != nil {
		return http.StatusServiceUnavailable, err
	}
	if got.AKName != res.AKName && f.PinnedAK == "" {
		// Another POST (at another replica, perhaps) recorded its AK first.
		return refuse(fmt.Errorf("AK changed: node %s recorded AK %s first, this quote is signed by %s", node, clipText(got.AKName), clipText(res.AKName)))
	}
	s.log.Info("AK recorded", "node", node, "ak", res.AKName, "how", adm.How)
	if f.Enrolling {
		// A node's own window admits one AK: whoever quotes next is a conflict.
		if err := es.CloseEnrollment(ctx, node); err != nil {
			s.log.Error("closing an enrollment window", "node", node, "error", err.Error())
		}
	}
	return 0, nil
}

// enrollBody is POST /api/attest/enroll's body.
type enrollBody struct {
	Nodes []string `json:"nodes"` // MACs or node ids; none: every node
	For   string   `json:"for"`   // a Go duration, at most maxEnrollment
}

// maxEnrollment bounds a window: enrollment is a decision about now, not a
// standing policy.
const maxEnrollment = 7 * 24 * time.Hour

func (s *Server) apiEnroll(w http.ResponseWriter, r *http.Request) {
	es := s.opt.Store
	var b enrollBody
	data, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err == nil && len(data) > maxActionBody {
		err = fmt.Errorf("the body is over %d bytes", maxActionBody)
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(&b)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "enroll refused", fmt.Errorf(`want {"nodes": ["MAC", ...], "for": "1h"}: %w`, err))
		return
	}
	d, err := time.ParseDuration(b.For)
	if err != nil || d <= 0 || d > maxEnrollment {
		s.fail(w, r, http.StatusBadRequest, "enroll refused", fmt.Errorf("for: want a duration up to %s, got %q", maxEnrollment, b.For))
		return
	}
	nodes := []string{}
	for _, n := range b.Nodes {
		id, err := nodeKey(n)
		if err != nil {
			s.fail(w, r, http.StatusBadRequest, "enroll refused", err)
			return
		}
		nodes = append(nodes, id)
	}
	if len(nodes) == 0 {
		nodes = []string{"*"}
	}
	now := s.opt.Now()
	until := now.Add(d)
	for _, n := range nodes {
		if err := es.OpenEnrollment(r.Context(), n, now, until); err != nil {
			s.fail(w, r, http.StatusInternalServerError, "enroll failed", err)
			return
		}
	}
	s.log.Info("AK enrollment window opened", "nodes", nodes, "until", until)
	writeJSON(w, map[string]any{"nodes": nodes, "until": until.UTC()})
}

func (s *Server) apiAKReset(w http.ResponseWriter, r *http.Request) {
	es := s.opt.Store
	if _, ok := s.readAction(w, r); !ok {
		return
	}
	id, err := nodeKey(r.PathValue("node"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "ak-reset refused", err)
		return
	}
	if n, err := s.opt.Store.Node(r.Context(), id); err == nil {
		id = n.ID
	}
	old, err := es.ResetAK(r.Context(), id)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "ak-reset failed", err)
		return
	}
	if old == nil {
		s.fail(w, r, http.StatusNotFound, "ak-reset refused", fmt.Errorf("node %s has no AK on record: %w", id, fleetdb.ErrNotFound))
		return
	}
	s.log.Info("AK reset", "node", id, "ak", old.AKName)
	writeJSON(w, map[string]any{"node": id, "ak_name": old.AKName})
}

// nodeKey is a node named on the command line: a MAC (normalized) or a node id.
func nodeKey(n string) (string, error) {
	if mac, err := NormalizeMAC(n); err == nil {
		return mac, nil
	}
	if !nodeWord.MatchString(n) {
		return "", fmt.Errorf("node: want a MAC or a node id (up to 64 of A-Z a-z 0-9 . _ : -), got %q", n)
	}
	return n, nil
}
