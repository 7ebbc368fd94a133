package netboot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/peerboot/peerboot/netboot/api"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// The operator's side of AK enrollment (package attestation decides which AK
// a node may quote with): opening a window, forgetting a node's AK.

// maxEnrollment bounds a window: enrollment is a decision about now, not a
// standing policy.
const maxEnrollment = 7 * 24 * time.Hour

func (s *Server) apiEnroll(w http.ResponseWriter, r *http.Request) {
	es := s.opt.Store
	var b api.EnrollRequest // For: at most maxEnrollment
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
	writeJSON(w, api.Enrolled{Nodes: nodes, Until: until.UTC()})
}

func (s *Server) apiAKReset(w http.ResponseWriter, r *http.Request) {
	es := s.opt.Store
	if _, ok := s.readAction(w, r); !ok {
		return
	}
	id, status, err := s.writeNode(r.Context(), r.PathValue("node"))
	if err != nil {
		s.fail(w, r, status, "ak-reset refused", err)
		return
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
	writeJSON(w, api.AKReset{Node: id, AKName: old.AKName})
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
