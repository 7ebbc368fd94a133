package netboot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/netboot/api"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/soakplot"
	"github.com/peerboot/peerboot/selftest"
)

// POST /progress?node= is a burn-in's progress (selftest.SoakProgress) that
// peerboot-init sends every few minutes while p2pcheck soaks (docs/burn-in.md). It
// is authenticated as a report is (the node's token: a stranger cannot post a node's
// progress), bounded (selftest.MaxSoakProgressBytes, its own per-node rate), checked
// by the one parser (selftest.DecodeSoakProgress), and kept as the node's latest only:
// it is shown, never voted on, and the final report still comes by POST /reports.
// A nonce is spent once, by the report, so progress goes under the token alone.

// postProgress stores a node's progress: 200 with the state it read.
func (s *Server) postProgress(w http.ResponseWriter, r *http.Request) {
	const refused = "progress refused"
	node, buildID, ok := s.authNode(w, r, refused, "sends progress too often", "the image gets it as peerboot.token=")
	if !ok {
		return
	}
	if wait := s.progressLimit.take(node); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
		s.fail(w, r, http.StatusTooManyRequests, refused, fmt.Errorf("node %s sends progress too often: retry in %s", node, wait.Round(time.Second)), "node", node)
		return
	}
	const max = selftest.MaxSoakProgressBytes
	if r.ContentLength > max {
		s.fail(w, r, http.StatusRequestEntityTooLarge, refused, fmt.Errorf("%d bytes, the limit is %d", r.ContentLength, max), "node", node)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		s.fail(w, r, http.StatusRequestEntityTooLarge, refused, fmt.Errorf("more than %d bytes", max), "node", node)
		return
	case errors.As(err, &netErr) && netErr.Timeout():
		s.fail(w, r, http.StatusRequestTimeout, refused, fmt.Errorf("the body did not arrive within %s", s.opt.Limits.BodyTimeout), "node", node)
		return
	case err != nil:
		s.fail(w, r, http.StatusBadRequest, refused, fmt.Errorf("reading the body: %w", err), "node", node)
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	p, err := selftest.DecodeSoakProgress(body)
	switch {
	case errors.Is(err, selftest.ErrNotJSON):
		s.fail(w, r, http.StatusBadRequest, refused, err, "node", node)
		return
	case err != nil:
		s.fail(w, r, http.StatusUnprocessableEntity, refused, err, "node", node)
		return
	}
	recipe, _ := s.buildRecipe(buildID)
	rec := fleetdb.Progress{NodeID: node, ReceivedAt: s.opt.Now(), Recipe: recipe, Build: buildID, Remote: remoteIP(r), State: p.State,
		ElapsedMS: p.ElapsedMS, RequestedMS: p.RequestedMS, Rounds: p.Rounds, Faulty: p.FaultyRounds, FirstFault: firstFault(p), Body: body}
	if err := s.opt.Store.SetProgress(r.Context(), rec); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "progress not stored", err, "node", node)
		return
	}
	s.prune(r, node)
	s.log.Info("burn-in progress", "node", node, "state", p.State, "rounds", p.Rounds, "elapsed_ms", p.ElapsedMS, "faulty", p.FaultyRounds, "bytes", len(body))
	ans := bootproto.ProgressAnswer{Node: node, State: p.State, Rounds: p.Rounds}
	// The stop request, if an operator made one on this burn-in (SetProgress kept it).
	if c, err := s.opt.Store.Progress(r.Context(), node); err == nil {
		if c != nil && !c.StopAt.IsZero() && p.State == selftest.SoakRunning {
			ans.Stop, ans.StopAt, ans.StopBy, ans.StopReason = true, c.StopAt, c.StopBy, c.StopReason
			s.log.Info("burn-in stop sent to the node", "node", node, "requested_at", c.StopAt, "by", c.StopBy)
		}
	} else {
		s.log.Warn("burn-in progress: reading the stop request", "node", node, "error", err.Error())
	}
	writeJSON(w, ans)
}

// POST /api/nodes/{node}/soak/stop (an operator write: operator.go) asks a node's
// running burn-in to stop. serve cannot reach the node; the node reads the request
// in the answer to its next progress POST (every peerboot.soak_progress=, 3 min by
// default) and ends the soak as Ctrl-C on its console does: the report is written
// and sent with everything so far.
func (s *Server) apiSoakStop(w http.ResponseWriter, r *http.Request) {
	const refused = "burn-in stop refused"
	a, ok := s.readAction(w, r)
	if !ok {
		return
	}
	if a.Build != "" {
		s.fail(w, r, http.StatusBadRequest, refused, errors.New(`a stop takes an optional {"reason": "..."}, no build`))
		return
	}
	id, status, err := s.writeNode(r.Context(), r.PathValue("node"))
	if err != nil {
		s.fail(w, r, status, refused, err)
		return
	}
	p, recorded, err := s.opt.Store.RequestStop(r.Context(), id, s.opt.Now(), remoteIP(r), a.Reason)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "burn-in stop not stored", err, "node", id)
		return
	}
	if p == nil {
		s.fail(w, r, http.StatusNotFound, refused, fmt.Errorf("node %s is not burning in: serve has no burn-in progress from it: %w", id, fleetdb.ErrNotFound), "node", id)
		return
	}
	if p.State != selftest.SoakRunning {
		s.fail(w, r, http.StatusConflict, refused, fmt.Errorf("node %s is not burning in: its last burn-in is %s (progress received %s)", id, p.State, p.ReceivedAt.Format(time.RFC3339)), "node", id)
		return
	}
	s.log.Info("burn-in stop requested", "node", id, "by", remoteIP(r), "reason", a.Reason, "already", !recorded)
	writeJSON(w, api.SoakStop{Node: id, State: p.State, Rounds: p.Rounds, StopAt: p.StopAt, StopBy: p.StopBy, Reason: p.StopReason, Already: !recorded})
}

// firstFault is what the fleet page says went wrong first: the first faulty round,
// else how a failed or skipped soak ended.
func firstFault(p *selftest.SoakProgress) string {
	if p.FirstFault != "" {
		return p.FirstFault
	}
	if p.State == selftest.SoakFailed || p.State == selftest.SoakSkipped {
		return p.Message
	}
	return ""
}

// BurnIn is a node's burn-in as the pages show it: from its latest progress when
// that is newer than its latest report.
type BurnIn struct {
	State       string    `json:"state"`
	ElapsedMS   int64     `json:"elapsed_ms"`
	RequestedMS int64     `json:"requested_ms"`
	Rounds      int       `json:"rounds"`
	Faulty      int       `json:"faulty_rounds"`
	FirstFault  string    `json:"first_fault,omitempty"`
	ReceivedAt  time.Time `json:"received_at"`
	// Text is the fleet page's line: "burning in · 3 h 00 of 12 h 00 · clean".
	Text string `json:"text"`
	// Clean: nothing faulty so far.
	Clean bool `json:"clean"`
	// StopRequested: an operator asked this burn-in to stop (when, from where, why).
	StopRequested *StopRequest `json:"stop_requested,omitempty"`
	// SilentMS: a running burn-in serve has not heard from for longer than
	// Options.BurnInSilent, for this long (0: heard in time, or not running).
	SilentMS int64 `json:"silent_ms,omitempty"`
}

// StopRequest is an operator's request that a burn-in stop.
type StopRequest struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
}

// burnInView is p as the pages show it at now; a running burn-in not heard from
// for longer than silent says so first.
func burnInView(p fleetdb.Progress, now time.Time, silent time.Duration) *BurnIn {
	b := &BurnIn{State: p.State, ElapsedMS: p.ElapsedMS, RequestedMS: p.RequestedMS, Rounds: p.Rounds, Faulty: p.Faulty, FirstFault: p.FirstFault,
		ReceivedAt: p.ReceivedAt, Clean: p.Faulty == 0 && p.State != selftest.SoakFailed}
	health := "clean"
	if !b.Clean {
		health = p.FirstFault
		if p.Faulty > 1 {
			health = fmt.Sprintf("%d faulty rounds, the first %s", p.Faulty, p.FirstFault)
		}
	}
	of := fmt.Sprintf("%s of %s", soakplot.Elapsed(p.ElapsedMS), soakplot.Elapsed(p.RequestedMS))
	switch p.State {
	case selftest.SoakRunning:
		b.Text = fmt.Sprintf("burning in · %s · %d rounds · %s", of, p.Rounds, health)
	case selftest.SoakFinished:
		b.Text = fmt.Sprintf("burn-in finished · %s · %d rounds · %s · the report follows", soakplot.Elapsed(p.ElapsedMS), p.Rounds, health)
	case selftest.SoakFailed:
		b.Text = fmt.Sprintf("burn-in failed · %s · %s", of, health)
	case selftest.SoakSkipped:
		b.Text = "burn-in skipped · " + p.FirstFault
	default:
		b.Text = fmt.Sprintf("burn-in stopped · %s · %d rounds · %s", of, p.Rounds, health)
	}
	if !p.StopAt.IsZero() {
		b.StopRequested = &StopRequest{At: p.StopAt, By: p.StopBy, Reason: p.StopReason}
		stop := fmt.Sprintf("stop requested by %s at %s", p.StopBy, p.StopAt.Format("2006-01-02 15:04:05 UTC"))
		if p.StopReason != "" {
			stop += ": " + p.StopReason
		}
		if p.State == selftest.SoakRunning {
			stop += " (the node reads it with its next progress)"
		}
		b.Text += " · " + stop
	}
	if quiet := now.Sub(p.ReceivedAt); p.State == selftest.SoakRunning && quiet > silent {
		b.SilentMS = quiet.Milliseconds()
		b.Text = fmt.Sprintf("silent for %s (the node stopped sending progress: down, hung or cut off?) · last heard: %s", soakplot.Elapsed(b.SilentMS), b.Text)
	}
	return b
}

// newer says whether a progress is newer than the node's latest report (nil: none):
// a report received after it is the burn-in's end, and the page shows that instead.
func newer(p fleetdb.Progress, latest *ReportView) bool {
	return latest == nil || p.ReceivedAt.After(latest.ReceivedAt)
}

// SoakView is the node page's burn-in section: its plot, from the latest progress
// or the shown report's soak series.
type SoakView struct {
	From        string                 `json:"from"` // "progress" or "report"
	Rounds      int                    `json:"rounds"`
	Stride      int                    `json:"stride"`
	Points      int                    `json:"points"`
	Pairs       []selftest.SoakPairNow `json:"pairs,omitempty"` // progress only
	GPUs        []GPUNow               `json:"gpus,omitempty"`  // progress only: the latest NVML sample
	Bandwidth   template.HTML          `json:"-"`
	Temperature template.HTML          `json:"-"`
	Error       string                 `json:"error,omitempty"`
}

func soakView(from string, rounds int, pl selftest.SoakPlot) *SoakView {
	// soakplot formats every figure and escapes every name itself.
	return &SoakView{From: from, Rounds: rounds, Stride: pl.Stride, Points: len(pl.Points),
		Bandwidth: template.HTML(soakplot.Bandwidth(pl)), Temperature: template.HTML(soakplot.Temperature(pl))}
}

// attachBurnIn puts the node's burn-in on v: the progress line when the progress is
// newer than the report shown, and the plot from the one that is.
func (s *Server) attachBurnIn(ctx context.Context, v *NodeView, current bool) error {
	if current {
		p, err := s.opt.Store.Progress(ctx, v.ID)
		if err != nil {
			return err
		}
		if p != nil && newer(*p, v.Latest) {
			v.BurnIn = burnInView(*p, s.opt.Now(), s.opt.BurnInSilent)
			sp, err := selftest.DecodeSoakProgress(p.Body)
			if err != nil {
				v.Soak = &SoakView{From: "progress", Error: err.Error()}
				return nil
			}
			v.Soak = soakView("progress", sp.Rounds, sp.Plot)
			v.Soak.Pairs = sp.Pairs
			for _, g := range sp.GPUs {
				v.Soak.GPUs = append(v.Soak.GPUs, gpuNow(g))
			}
			return nil
		}
	}
	if v.Latest != nil && v.Latest.Report != nil && v.Latest.Report.Soak != nil {
		sk := v.Latest.Report.Soak
		v.Soak = soakView("report", sk.Rounds, selftest.NewSoakPlot(sk.Series, sk.Stride, selftest.SoakMaxPoints))
	}
	return nil
}

// GPUNow is a GPU's latest sample as the node page shows it ("" where NVML did not
// answer).
type GPUNow struct {
	GPU         int    `json:"gpu"`
	Link        string `json:"link"`
	Temperature string `json:"temperature"`
	SMClock     string `json:"sm_clock"`
	MemClock    string `json:"mem_clock"`
	Power       string `json:"power"`
	Throttle    string `json:"throttle"`
}

func gpuNow(g selftest.SoakGPU) GPUNow {
	v := GPUNow{GPU: g.GPU}
	if g.LinkGen > 0 {
		v.Link = fmt.Sprintf("Gen%d x%d", g.LinkGen, g.LinkWidth)
	}
	if g.TemperatureC != nil {
		v.Temperature = fmt.Sprintf("%d °C", *g.TemperatureC)
	}
	if g.SMClockMHz != nil {
		v.SMClock = fmt.Sprintf("%d MHz", *g.SMClockMHz)
	}
	if g.MemClockMHz != nil {
		v.MemClock = fmt.Sprintf("%d MHz", *g.MemClockMHz)
	}
	if g.PowerMW != nil {
		v.Power = fmt.Sprintf("%.0f W", float64(*g.PowerMW)/1000)
	}
	if g.ThrottleReasons != nil {
		v.Throttle = cmp.Or(selftest.ThrottleNames(*g.ThrottleReasons), "none")
	}
	return v
}
