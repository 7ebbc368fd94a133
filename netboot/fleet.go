package netboot

import (
	"bytes"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
)

//go:embed templates/*.html
var templateFS embed.FS

var pageTemplates = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"gbps": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"size": sizeLabel,
}).ParseFS(templateFS, "templates/*.html"))

// pages guards the fleet pages and the JSON API with the optional basic auth or token.
func (s *Server) pages(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opt.PageUser == "" && s.opt.PageToken == "" {
			h(w, r)
			return
		}
		if s.opt.PageUser != "" {
			if u, p, ok := r.BasicAuth(); ok &&
				subtle.ConstantTimeCompare([]byte(u), []byte(s.opt.PageUser)) == 1 &&
				subtle.ConstantTimeCompare([]byte(p), []byte(s.opt.PagePassword)) == 1 {
				h(w, r)
				return
			}
		}
		if s.opt.PageToken != "" {
			if t := bearer(r); t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.opt.PageToken)) == 1 {
				h(w, r)
				return
			}
		}
		if s.opt.PageUser != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="peerboot fleet"`)
		}
		s.fail(w, r, http.StatusUnauthorized, "page refused", errors.New("log in (basic auth) or send Authorization: Bearer TOKEN"))
	})
}

// NodeView is a node as the pages and the API show it.
type NodeView struct {
	ID        string               `json:"id"`
	Name      string               `json:"name,omitempty"` // from the inventory
	MAC       string               `json:"mac,omitempty"`
	Hostname  string               `json:"hostname,omitempty"`
	Serial    string               `json:"serial,omitempty"`
	FirstSeen time.Time            `json:"first_seen"`
	LastSeen  time.Time            `json:"last_seen"`
	Boots     int64                `json:"boots"`
	Reports   int64                `json:"reports"`
	Latest    *ReportView          `json:"latest"`
	History   []ReportSummary      `json:"history,omitempty"`
	Changes   []Change             `json:"changes_since_previous"`
	Previous  *ReportSummary       `json:"previous,omitempty"`
	Rollout   *fleetdb.NodeRollout `json:"rollout,omitempty"` // the build last served, and its hold; only /api/nodes/{node}
	// Refused counts the node's attested POSTs refused by a check; Refusals (node
	// page) lists the newest with their reasons.
	Refused  int64                   `json:"refused"`
	Refusals []fleetdb.AttestRefusal `json:"refusals,omitempty"`
	// AKName is the AK on record (node page); AKConflicts the AKs refused
	// after their quotes verified (enroll.go), for the operator to decide.
	AKName      string               `json:"ak_name,omitempty"`
	AKConflicts []fleetdb.AKConflict `json:"ak_conflicts,omitempty"`
	// BurnIn is the latest burn-in progress when it is newer than the latest report
	// (progress.go); Soak the node page's plot, from it or the report's soak.
	BurnIn *BurnIn   `json:"burn_in,omitempty"`
	Soak   *SoakView `json:"soak,omitempty"`
}

// ReportSummary is a report without its body.
type ReportSummary struct {
	ID         int64     `json:"id"`
	ReceivedAt time.Time `json:"received_at"`
	Recipe     string    `json:"recipe"`
	Build      string    `json:"build"`
	Verdict    string    `json:"verdict"`
	SHA256     string    `json:"sha256"`
	// Attestation is "attested" (a TPM quote verified, attest.go) or "unattested"
	// (the token only); AKName is the attested report's AK.
	Attestation string `json:"attestation"`
	AKName      string `json:"ak_name,omitempty"`
	// Vote says whether the report counted toward its recipe's rollout, and why
	// not (nil: no rollout decided on it).
	Vote *fleetdb.Vote `json:"vote,omitempty"`
}

// ReportView is a decoded report with what the pages draw from it.
type ReportView struct {
	ReportSummary
	GPUs       int                `json:"gpus"`
	Findings   []selftest.Finding `json:"findings"`
	Failing    []selftest.Finding `json:"-"`
	BusBWAtMax float64            `json:"busbw_at_max"`
	Heatmap    *Heatmap           `json:"heatmap,omitempty"`
	NCCL       *Curve             `json:"nccl,omitempty"`
	Report     *selftest.Report   `json:"-"`
	Error      string             `json:"error,omitempty"`
}

func summary(r *fleetdb.StoredReport) ReportSummary {
	return ReportSummary{ID: r.ID, ReceivedAt: r.ReceivedAt, Recipe: r.Recipe, Build: r.Build, Verdict: r.Verdict, SHA256: r.SHA256}
}

// listView is what the lists show of a report: its summary columns, no body.
func listView(r *fleetdb.StoredReport) *ReportView {
	v := &ReportView{ReportSummary: summary(r), GPUs: r.GPUs, BusBWAtMax: r.BusBWAtMax, Findings: r.Failing, Failing: r.Failing}
	if v.Findings == nil {
		v.Findings = []selftest.Finding{}
	}
	return v
}

// reportView decodes a report's body: only the node page and its API do.
func reportView(r *fleetdb.StoredReport, full bool) *ReportView {
	v := &ReportView{ReportSummary: summary(r), Findings: []selftest.Finding{}}
	rep, err := selftest.Decode(r.Body)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Report = rep
	v.GPUs = len(rep.GPUs)
	v.Findings = rep.Findings
	for _, f := range rep.Findings {
		if f.Status == selftest.SevFail || f.Status == selftest.SevWarn {
			v.Failing = append(v.Failing, f)
		}
	}
	if rep.NCCL != nil {
		v.BusBWAtMax = rep.NCCL.BusBWAtMax
	}
	if full {
		v.Heatmap = NewHeatmap(rep)
		v.NCCL = NewCurve(rep)
	}
	return v
}

func (s *Server) nodeView(n *fleetdb.NodeSummary) NodeView {
	v := NodeView{ID: n.ID, MAC: n.MAC, Hostname: n.Hostname, Serial: n.Serial, FirstSeen: n.FirstSeen, LastSeen: n.LastSeen,
		Boots: n.Boots, Reports: n.Reports, Changes: []Change{}}
	if m, ok := s.opt.Inventory.Lookup(n.MAC, n.Hostname); ok {
		v.Name = m.Name
	}
	if n.Latest != nil {
		v.Latest = listView(n.Latest)
	}
	return v
}

type fleetData struct {
	Nodes                []NodeView
	Pass, Fail, NoReport int
	Builds               []*Build
	Rollouts             []fleetdb.RolloutStatus // recipes with a [[rollout]]
	Held                 map[string]bool         // node ids held back by a rollout
	Generated            time.Time
}

func (s *Server) fleet(r *http.Request) (*fleetData, error) {
	nodes, err := s.opt.Store.Nodes(r.Context())
	if err != nil {
		return nil, err
	}
	ro, err := s.rolloutStatuses(r.Context())
	if err != nil {
		return nil, err
	}
	d := &fleetData{Nodes: []NodeView{}, Builds: s.opt.Builds.All(), Rollouts: ro, Held: map[string]bool{}, Generated: s.opt.Now()}
	for _, st := range ro {
		for _, h := range st.HeldBack {
			d.Held[h.Node] = true
		}
	}
	refused, err := s.refusalCounts(r.Context())
	if err != nil {
		return nil, err
	}
	progress, err := s.opt.Store.Progresses(r.Context())
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		v := s.nodeView(&nodes[i])
		v.Refused = refused[v.ID]
		if p, ok := progress[v.ID]; ok && newer(p, v.Latest) {
			v.BurnIn = burnInView(p, d.Generated, s.opt.BurnInSilent)
		}
		switch {
		case v.Latest == nil:
			d.NoReport++
		case v.Latest.Verdict == selftest.Pass:
			d.Pass++
		default:
			d.Fail++
		}
		d.Nodes = append(d.Nodes, v)
	}
	latest := make([]*ReportSummary, 0, len(d.Nodes))
	for i := range d.Nodes {
		if l := d.Nodes[i].Latest; l != nil {
			latest = append(latest, &l.ReportSummary)
		}
	}
	if err := s.attach(r.Context(), latest...); err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request) {
	d, err := s.fleet(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "fleet page", err)
		return
	}
	s.render(w, r, "fleet.html", d)
}

func (s *Server) apiNodes(w http.ResponseWriter, r *http.Request) {
	d, err := s.fleet(r)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "nodes", err)
		return
	}
	writeJSON(w, d.Nodes)
}

// node loads one node with a full view of its latest (or ?report=ID) report, the
// change since the report before it, and its history.
func (s *Server) node(r *http.Request) (*NodeView, int, error) {
	n, err := s.opt.Store.Node(r.Context(), r.PathValue("node"))
	if errors.Is(err, fleetdb.ErrNotFound) {
		return nil, http.StatusNotFound, err
	}
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	v := s.nodeView(n)
	if v.Rollout, err = s.opt.Store.NodeRollout(r.Context(), n.ID); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	hist, err := s.opt.Store.Reports(r.Context(), n.ID, 50)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	for i := range hist {
		v.History = append(v.History, summary(&hist[i]))
	}
	if len(hist) == 0 {
		if err := s.attachNode(r.Context(), &v); err != nil {
			return nil, http.StatusInternalServerError, err
		}
		if err := s.attachBurnIn(r.Context(), &v, true); err != nil {
			return nil, http.StatusInternalServerError, err
		}
		return &v, 0, nil
	}
	at := 0
	if q := r.URL.Query().Get("report"); q != "" {
		id, _ := strconv.ParseInt(q, 10, 64)
		at = -1
		for i := range hist {
			if hist[i].ID == id {
				at = i
			}
		}
		if at < 0 {
			return nil, http.StatusNotFound, fmt.Errorf("node %s has no report %q among its last %d", n.ID, q, len(hist))
		}
	}
	cur, err := s.opt.Store.Report(r.Context(), hist[at].ID)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	v.Latest = reportView(cur, true)
	if at+1 < len(hist) && v.Latest.Report != nil {
		prev, err := s.opt.Store.Report(r.Context(), hist[at+1].ID)
		if err != nil {
			return nil, http.StatusInternalServerError, err
		}
		if pr, err := selftest.Decode(prev.Body); err == nil {
			v.Changes = DiffReports(pr, v.Latest.Report)
			ps := summary(prev)
			v.Previous = &ps
		}
	}
	if err := s.attachNode(r.Context(), &v); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	// The progress is the node's now: beside its latest report, not an older one.
	if err := s.attachBurnIn(r.Context(), &v, at == 0); err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return &v, 0, nil
}

func (s *Server) nodePage(w http.ResponseWriter, r *http.Request) {
	v, status, err := s.node(r)
	if err != nil {
		s.fail(w, r, status, "node page", err)
		return
	}
	s.render(w, r, "node.html", v)
}

func (s *Server) apiNode(w http.ResponseWriter, r *http.Request) {
	v, status, err := s.node(r)
	if err != nil {
		s.fail(w, r, status, "node", err)
		return
	}
	writeJSON(w, v)
}

func (s *Server) apiReport(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "report", fmt.Errorf("want a report number, got %q", r.PathValue("id")))
		return
	}
	rep, err := s.opt.Store.Report(r.Context(), id)
	if errors.Is(err, fleetdb.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, "report", err)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, "report", err)
		return
	}
	// The body was checked to be exactly one JSON value when it was stored.
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Peerboot-Node", rep.NodeID)
	w.Write(rep.Body)
}

type buildView struct {
	Recipe       string            `json:"recipe"`
	RecipeDigest string            `json:"recipe_digest"`
	ID           string            `json:"build"`
	Dir          string            `json:"dir"`
	PXE          bool              `json:"pxe"`
	UKI          bool              `json:"uki"`
	ISO          bool              `json:"iso"`
	Cmdline      string            `json:"cmdline"`
	Files        map[string]string `json:"files"`
}

func (s *Server) apiBuilds(w http.ResponseWriter, r *http.Request) {
	out := []buildView{}
	for _, b := range s.opt.Builds.All() {
		out = append(out, buildView{Recipe: b.Recipe, RecipeDigest: b.RecipeDigest, ID: b.ID, Dir: b.Dir, PXE: b.HasPXE(), UKI: b.HasUKI(), ISO: b.HasISO(), Cmdline: b.Cmdline, Files: b.Files})
	}
	writeJSON(w, out)
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	// Rendered whole before the first byte goes out, so a template error is a 500,
	// not half a page; written from the buffer as is (no copy of a page of 1,000 nodes).
	var buf bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		s.fail(w, r, http.StatusInternalServerError, "rendering "+name, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:")
	w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
