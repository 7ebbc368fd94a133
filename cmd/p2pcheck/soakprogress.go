package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/selftest"
)

// --soak-progress FILE: while the rounds run, a small progress document
// (selftest.SoakProgress) is rewritten atomically, after the first round, then at
// most every progressEvery, and once more when the soak ends (or is skipped).
// peerboot-init POSTs it to serve every few minutes (docs/burn-in.md).

// progressEvery bounds how often the file is rewritten: an 8-hour soak of 2-second
// rounds would otherwise rewrite it 14,400 times for a reader that looks every minutes.
const progressEvery = 10 * time.Second

// progressWriter writes the progress file; a zero path writes nothing.
type progressWriter struct {
	path   string
	now    func() time.Time
	last   time.Time
	stderr io.Writer
	failed bool // a write failed: said once, the soak goes on
	// faulty and firstFault count the rounds that found something, as they come
	// (the series may have dropped some by the end).
	faulty     int
	firstFault string
}

func newProgressWriter(path string, stderr io.Writer) *progressWriter {
	return &progressWriter{path: path, now: time.Now, stderr: stderr}
}

// round notes a finished round and writes the progress when it is due.
func (w *progressWriter) round(r *selftest.Report, s *selftest.Soak, t *soakTracker, rd *selftest.SoakRound) {
	if rd.Faulty() {
		w.faulty++
		if w.firstFault == "" {
			w.firstFault = fmt.Sprintf("round %d at %s: %s", rd.Round, soakAt(rd.AtMS), faultText(rd))
		}
	}
	if w.path == "" || (!w.last.IsZero() && w.now().Sub(w.last) < progressEvery) {
		return
	}
	w.write(w.progress(r, s, t, selftest.SoakRunning, ""))
}

// end writes the soak's last progress: how it ended, with its judged findings.
func (w *progressWriter) end(r *selftest.Report, s *selftest.Soak, t *soakTracker) {
	if w.path == "" {
		return
	}
	state := map[string]string{"duration": selftest.SoakFinished, "rounds": selftest.SoakFinished, "failure": selftest.SoakFailed}[s.Stopped]
	if state == "" {
		state = selftest.SoakStopped
	}
	msg := "stopped: " + s.Stopped
	if s.StoppedAt != "" {
		msg += " (" + s.StoppedAt + ")"
	}
	w.write(w.progress(r, s, t, state, msg))
}

// notStarted writes the progress of a soak that never ran its rounds: skipped (no
// GPUs, none expected) or failed to start; msg is the finding's message.
func (w *progressWriter) notStarted(r *selftest.Report, requested time.Duration, state, msg string) {
	if w.path == "" {
		return
	}
	p := &selftest.SoakProgress{Schema: selftest.SoakProgressSchema, State: state, Message: msg, RequestedMS: requested.Milliseconds(),
		Pairs: []selftest.SoakPairNow{}, GPUs: []selftest.SoakGPU{}, Plot: selftest.NewSoakPlot(nil, 1, selftest.SoakMaxPoints)}
	p.Fails, p.Warns = counts(r)
	w.write(p)
}

func (w *progressWriter) progress(r *selftest.Report, s *selftest.Soak, t *soakTracker, state, msg string) *selftest.SoakProgress {
	p := &selftest.SoakProgress{Schema: selftest.SoakProgressSchema, State: state, Message: truncate(msg, 1000), RequestedMS: s.RequestedMS, ElapsedMS: s.ElapsedMS,
		Rounds: s.Rounds, FaultyRounds: w.faulty, FirstFault: truncate(w.firstFault, 1000), Pairs: t.now(), GPUs: []selftest.SoakGPU{}}
	if n := len(s.Series); n > 0 {
		p.GPUs = append(p.GPUs, s.Series[n-1].GPUs...)
	}
	p.Fails, p.Warns = counts(r)
	// A box with many GPUs has many pairs a point: fewer points keep the document
	// within its bound (8 GPUs fit at SoakMaxPoints; 16 GPUs' 240 pairs do not).
	for n := selftest.SoakMaxPoints; ; n /= 2 {
		p.Plot = selftest.NewSoakPlot(s.Series, s.Stride, n)
		if b, err := json.Marshal(p); err != nil || len(b) <= selftest.MaxSoakProgressBytes || n <= 8 {
			return p
		}
	}
}

func (w *progressWriter) write(p *selftest.SoakProgress) {
	b, err := selftest.EncodeSoakProgress(p)
	if err == nil {
		err = fsutil.WriteFileAtomic(w.path, b, 0o644)
	}
	w.last = w.now()
	if err != nil && !w.failed {
		w.failed = true
		fmt.Fprintf(w.stderr, "p2pcheck: --soak-progress: %v (the soak goes on; the report has everything)\n", err)
	}
}

// now is every peer pair's copy-engine write at the largest size the soak copied:
// its start (the median of its first rounds) and its latest figure.
func (t *soakTracker) now() []selftest.SoakPairNow {
	var full int64
	for k := range t.points {
		full = max(full, k.bytes)
	}
	out := []selftest.SoakPairNow{}
	for k, pts := range t.points {
		if k.bytes != full || k.src == k.dst || k.method != selftest.MethodCE || k.direction != selftest.DirWrite || len(pts) == 0 {
			continue
		}
		start, _ := startEnd(pts)
		out = append(out, selftest.SoakPairNow{Src: k.src, Dst: k.dst, Bytes: k.bytes, StartGBps: start, NowGBps: pts[len(pts)-1].gbps})
	}
	slices.SortFunc(out, func(a, b selftest.SoakPairNow) int { return (a.Src-b.Src)*selftest.MaxGPUs + a.Dst - b.Dst })
	return out
}

// faultText says briefly what a faulty round found.
func faultText(rd *selftest.SoakRound) string {
	switch {
	case rd.Error != "":
		return rd.Error
	case len(rd.Events) > 0:
		return "kernel log: " + rd.Events[0].Line
	case len(rd.AER) > 0:
		a := rd.AER[0]
		return fmt.Sprintf("PCIe AER at %s: +%d correctable, +%d uncorrectable", a.BDF, a.Correctable, a.NonFatal+a.Fatal)
	case rd.AllReduce != nil && rd.AllReduce.Error != "":
		return "all-reduce " + rd.AllReduce.Error
	case rd.AllReduce != nil && rd.AllReduce.Wrong > 0:
		return fmt.Sprintf("all-reduce: %d elements wrong", rd.AllReduce.Wrong)
	}
	for _, c := range rd.Copies {
		if c.Error != "" {
			return soakCopyName(c.Src, c.Dst, c.Method, c.Direction) + ": " + c.Error
		}
		if !c.Verified {
			return soakCopyName(c.Src, c.Dst, c.Method, c.Direction) + " not verified"
		}
	}
	return "a fault"
}

// counts are the report's fail and warn findings.
func counts(r *selftest.Report) (fails, warns int) {
	for _, f := range r.Findings {
		switch f.Status {
		case selftest.SevFail:
			fails++
		case selftest.SevWarn:
			warns++
		}
	}
	return fails, warns
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
