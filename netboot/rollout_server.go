package netboot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/peerboot/peerboot/netboot/api"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/vote"
	"github.com/peerboot/peerboot/rollout"
)

// rollouts is the server's side of the rollouts: which catalogue builds this process
// has told the store about (the store keeps the rest, so replicas and restarts agree).
type rollouts struct {
	mu   sync.Mutex
	seen map[string]bool // build ids recorded with SeeBuild
}

// syncRollouts rescans the catalogue and records every build of a recipe with a
// rollout the store has not been told of by this process, in entry order: the first
// time the store sees one, the rules put it on channels.
func (s *Server) syncRollouts(ctx context.Context) {
	rs := s.opt.Store
	if len(s.opt.Inventory.Rollouts) == 0 {
		return
	}
	for _, b := range s.opt.Builds.Rescan() {
		s.log.Info("build added to the catalogue", "recipe", b.Recipe, "build", b.ID, "dir", b.Dir)
	}
	s.ro.mu.Lock()
	defer s.ro.mu.Unlock()
	if s.ro.seen == nil {
		s.ro.seen = map[string]bool{}
	}
	for _, b := range s.opt.Builds.All() {
		p, ok := s.opt.Inventory.Policy(b.Recipe)
		if !ok || s.ro.seen[b.ID] {
			continue
		}
		s.mu.Lock()
		s.issued[b.ID] = b.Recipe
		s.mu.Unlock()
		evs, err := rs.SeeBuild(ctx, p, b.ID, s.opt.Now())
		if err != nil {
			s.log.Error("rollout: recording a build", "recipe", b.Recipe, "build", b.ID, "error", err.Error())
			return // tried again at the next request, still in order
		}
		s.ro.seen[b.ID] = true
		for _, ev := range evs {
			s.logEvent(ev)
		}
	}
}

func (s *Server) logEvent(ev rollout.Event) { vote.LogEvent(s.log, ev) }

// chooseBuild is the build a node gets: without a rollout its recipe's newest; with
// one, its hold's build, else its channel's, else (a build the catalogue no longer
// holds) the newest, logged.
func (s *Server) chooseBuild(ctx context.Context, m Match, node string) (*Build, error) {
	p, ok := s.opt.Inventory.Policy(m.Recipe)
	rs := s.opt.Store
	if !ok {
		return s.opt.Builds.Get(m.Recipe)
	}
	s.syncRollouts(ctx)
	c, err := rs.ServeBuild(ctx, p, m.Channel, node)
	if err != nil {
		s.log.Error("rollout: choosing a build", "node", node, "error", err.Error())
		return s.opt.Builds.Get(m.Recipe)
	}
	for _, id := range []string{c.Build, c.ChannelBuild} {
		if b := s.opt.Builds.ByID(id); id != "" && b != nil && b.Recipe == m.Recipe {
			if id != c.Build {
				s.log.Warn("rollout: the held node's rollback build is not in the catalogue: serving its channel's", "node", node,
					"rollback", c.Build, "channel", c.Channel, "build", id)
			}
			return b, nil
		}
	}
	b, err := s.opt.Builds.Get(m.Recipe)
	if err == nil {
		s.log.Warn("rollout: the chosen build is not in the catalogue: serving the newest", "node", node, "recipe", m.Recipe,
			"chosen", c.Build, "channel", c.Channel, "newest", b.ID)
	}
	return b, err
}

func (s *Server) rolloutRoutes(m *http.ServeMux) {
	m.Handle("GET /api/rollouts", s.pages(s.apiRollouts))
	m.Handle("GET /api/rollouts/{recipe}", s.pages(s.apiRollout))
	m.Handle("POST /api/rollouts/{recipe}/{action}", s.operator(s.apiRolloutAction))
	m.Handle("POST /api/nodes/{node}/clear", s.operator(s.apiClear))
	m.Handle("POST /api/nodes/{node}/ak-reset", s.operator(s.apiAKReset))
	m.Handle("POST /api/attest/enroll", s.operator(s.apiEnroll))
}

// rolloutStatuses is every recipe's rollout, by recipe name.
func (s *Server) rolloutStatuses(ctx context.Context) ([]fleetdb.RolloutStatus, error) {
	out := []fleetdb.RolloutStatus{}
	rs := s.opt.Store
	s.syncRollouts(ctx)
	pols := append([]RolloutPolicy(nil), s.opt.Inventory.Rollouts...)
	sort.Slice(pols, func(i, j int) bool { return pols[i].Recipe < pols[j].Recipe })
	for _, rp := range pols {
		p, _ := s.opt.Inventory.Policy(rp.Recipe)
		st, err := rs.RolloutStatus(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, *st)
	}
	return out, nil
}

func (s *Server) apiRollouts(w http.ResponseWriter, r *http.Request) {
	out, err := s.rolloutStatuses(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "rollouts", err)
		return
	}
	writeJSON(w, out)
}

// policyOf is the rollout of the request's {recipe}; it answers 404 when there is none.
func (s *Server) policyOf(w http.ResponseWriter, r *http.Request) (rollout.Policy, fleetdb.RolloutStore, bool) {
	recipe := r.PathValue("recipe")
	p, ok := s.opt.Inventory.Policy(recipe)
	rs := fleetdb.RolloutStore(s.opt.Store)
	if !ok {
		s.fail(w, r, http.StatusNotFound, "rollout", fmt.Errorf("recipe %q has no [[rollout]] in the inventory: %w", recipe, fleetdb.ErrNotFound))
		return p, nil, false
	}
	return p, rs, true
}

func (s *Server) apiRollout(w http.ResponseWriter, r *http.Request) {
	p, rs, ok := s.policyOf(w, r)
	if !ok {
		return
	}
	s.syncRollouts(r.Context())
	st, err := rs.RolloutStatus(r.Context(), p)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "rollout", err)
		return
	}
	writeJSON(w, st)
}

// readAction decodes the optional body of a write (the operator guard has let it
// in): nothing, or JSON said to be JSON.
func (s *Server) readAction(w http.ResponseWriter, r *http.Request) (api.Action, bool) {
	var a api.Action
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct != "" && ct != "application/json" {
		s.fail(w, r, http.StatusUnsupportedMediaType, "rollout action refused", errors.New("send Content-Type: application/json (and an optional JSON body)"))
		return a, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	if err == nil {
		a, err = parseAction(body)
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "rollout action refused", err)
		return a, false
	}
	return a, true
}

const maxActionBody = 4096

// parseAction decodes an action's optional body: nothing, or one JSON object with
// build (a build id) and reason (one line, cut to 200 bytes), no other key.
func parseAction(body []byte) (api.Action, error) {
	var a api.Action
	if len(body) > maxActionBody {
		return a, fmt.Errorf("the body is over %d bytes", maxActionBody)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return a, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf(`want {"build": "ID"} or {"reason": "..."}: %w`, err)
	}
	if dec.More() {
		return a, errors.New(`want one JSON object, got more after it`)
	}
	if a.Build != "" && (len(a.Build) != 16 || !isHex(a.Build)) {
		return a, fmt.Errorf("build: want a build id (16 hex digits), got %q", a.Build)
	}
	if strings.ContainsAny(a.Reason, "\x00\r\n") {
		return a, fmt.Errorf("reason: want one line, got %q", a.Reason)
	}
	if len(a.Reason) > 200 {
		a.Reason = strings.ToValidUTF8(a.Reason[:200], "")
	}
	return a, nil
}

func (s *Server) actionResult(w http.ResponseWriter, r *http.Request, ev rollout.Event, err error) {
	switch {
	case errors.Is(err, fleetdb.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, "rollout action refused", err)
	case errors.Is(err, fleetdb.ErrRolloutState):
		s.fail(w, r, http.StatusConflict, "rollout action refused", err)
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, "rollout action failed", err)
	default:
		s.logEvent(ev)
		writeJSON(w, ev)
	}
}

func (s *Server) apiRolloutAction(w http.ResponseWriter, r *http.Request) {
	p, rs, ok := s.policyOf(w, r)
	if !ok {
		return
	}
	a, ok := s.readAction(w, r)
	if !ok {
		return
	}
	s.syncRollouts(r.Context())
	var ev rollout.Event
	var err error
	switch r.PathValue("action") {
	case "promote":
		ev, err = rs.Promote(r.Context(), p, a.Build, s.opt.Now())
	case "halt":
		ev, err = rs.Halt(r.Context(), p, a.Reason, s.opt.Now())
	case "resume":
		ev, err = rs.Resume(r.Context(), p, s.opt.Now())
	default:
		s.fail(w, r, http.StatusNotFound, "rollout action refused", fmt.Errorf("want promote, halt or resume, got %q", r.PathValue("action")))
		return
	}
	s.actionResult(w, r, ev, err)
}

func (s *Server) apiClear(w http.ResponseWriter, r *http.Request) {
	rs := s.opt.Store
	if _, ok := s.readAction(w, r); !ok {
		return
	}
	id, status, err := s.writeNode(r.Context(), r.PathValue("node"))
	if err != nil {
		s.fail(w, r, status, "rollout action refused", err)
		return
	}
	ev, err := rs.ClearHold(r.Context(), id, s.opt.Now())
	s.actionResult(w, r, ev, err)
}
