package selftest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// A soak's progress (p2pcheck --soak-progress, docs/burn-in.md): a small document
// p2pcheck rewrites while the rounds run, which peerboot-init POSTs to serve every few
// minutes so a rack's burn-in is watched from the fleet page. It carries the soak's
// series reduced to what a plot draws (SoakPlot); serve draws the same plot from a
// finished report's Soak.Series through NewSoakPlot, so the two cannot differ.

// SoakProgressSchema is the progress document's version.
const SoakProgressSchema = 1

// MaxSoakProgressBytes bounds a progress document: what serve reads from a POST and
// the init from the file. 8 GPUs (56 ordered pairs) at SoakMaxPoints fit in a third.
const MaxSoakProgressBytes = 256 << 10

// SoakMaxPoints bounds a SoakPlot's points.
const SoakMaxPoints = 128

// soakMaxPairs and soakMaxText bound a progress document's lists and strings.
const (
	soakMaxPairs = MaxGPUs * (MaxGPUs - 1)
	soakMaxText  = 1024
)

// The states of a soak in its progress.
const (
	SoakRunning  = "running"
	SoakFinished = "finished" // its duration or --soak-rounds ended it
	SoakStopped  = "stopped"  // a deadline or Ctrl-C ended it early
	SoakFailed   = "failed"   // a hard failure stopped it (FirstFault says which)
	SoakSkipped  = "skipped"  // it never started (Message says why)
)

// SoakStates are the states in the order messages list them.
var SoakStates = []string{SoakRunning, SoakFinished, SoakStopped, SoakFailed, SoakSkipped}

// SoakProgress is a soak's state while it runs and when it ended.
type SoakProgress struct {
	Schema int    `json:"schema"`
	State  string `json:"state"`
	// Message says why a soak was skipped or how it stopped ("" while running).
	Message     string `json:"message,omitempty"`
	RequestedMS int64  `json:"requested_ms"`
	ElapsedMS   int64  `json:"elapsed_ms"`
	Rounds      int    `json:"rounds"`
	// FaultyRounds counts the rounds that found something (SoakRound.Faulty), and
	// FirstFault names the first: "round 12 at T+0:03:10: ...".
	FaultyRounds int    `json:"faulty_rounds"`
	FirstFault   string `json:"first_fault,omitempty"`
	// Fails and Warns count the report's fail and warn findings so far: the
	// self-test's, and at the end the soak's judged ones too.
	Fails int `json:"fails"`
	Warns int `json:"warns"`
	// Pairs is every peer pair's copy-engine write at the soak's largest size: its
	// first rounds against its latest.
	Pairs []SoakPairNow `json:"pairs"`
	// GPUs is the latest NVML sample of each GPU.
	GPUs []SoakGPU `json:"gpus"`
	Plot SoakPlot  `json:"plot"`
}

// SoakPairNow is one peer pair's bandwidth now against its start.
type SoakPairNow struct {
	Src       int     `json:"src"`
	Dst       int     `json:"dst"`
	Bytes     int64   `json:"bytes"`
	StartGBps float64 `json:"start_gbps"` // median of its first three rounds
	NowGBps   float64 `json:"now_gbps"`   // its latest round
}

// SoakPlot is a soak's series reduced to what its plot draws: peer copy-engine write
// bandwidth per ordered pair and GPU temperature, over time. Bandwidth is comparable
// at one size only, so points carry it for rounds at the soak's largest copy size.
type SoakPlot struct {
	Stride int         `json:"stride"` // rounds of the soak one point of the plot stands for, at least
	Pairs  []PairKey   `json:"pairs"`  // the order of each point's GBps
	GPUs   []int       `json:"gpus"`   // the order of each point's TempC
	Points []SoakPoint `json:"points"`
}

// PairKey names an ordered GPU pair.
type PairKey struct {
	Src int `json:"src"`
	Dst int `json:"dst"`
}

func (k PairKey) String() string { return fmt.Sprintf("%d->%d", k.Src, k.Dst) }

// SoakPoint is one round in a plot.
type SoakPoint struct {
	Round int   `json:"round"`
	AtMS  int64 `json:"at_ms"`
	Bytes int64 `json:"bytes"`
	// GBps is each pair's figure (SoakPlot.Pairs' order; 0: not measured), absent
	// for a round at a smaller size.
	GBps []float64 `json:"gbps,omitempty"`
	// TempC is each GPU's temperature (SoakPlot.GPUs' order; 0: not read), absent
	// when the round has no NVML sample.
	TempC []int `json:"temp_c,omitempty"`
	Fault bool  `json:"fault,omitempty"` // the round found something
}

// NewSoakPlot reduces a soak's series (stride rounds per entry) to at most max
// points: half chosen evenly among the rounds at the largest copy size (their
// bandwidth), the rest evenly among all rounds (temperature), every faulty round the
// bound leaves room for, and the first and last.
func NewSoakPlot(series []SoakRound, stride, maxPoints int) SoakPlot {
	p := SoakPlot{Stride: stride, Pairs: []PairKey{}, GPUs: []int{}, Points: []SoakPoint{}}
	if p.Stride < 1 {
		p.Stride = 1
	}
	if len(series) == 0 || maxPoints < 2 {
		return p
	}
	var full int64
	pairs, gpus := map[PairKey]bool{}, map[int]bool{}
	for _, r := range series {
		full = max(full, r.Bytes)
		for _, c := range r.Copies {
			if plotted(c) {
				pairs[PairKey{c.Src, c.Dst}] = true
			}
		}
		for _, g := range r.GPUs {
			if g.TemperatureC != nil {
				gpus[g.GPU] = true
			}
		}
	}
	for k := range pairs {
		p.Pairs = append(p.Pairs, k)
	}
	slices.SortFunc(p.Pairs, func(a, b PairKey) int { return (a.Src-b.Src)*MaxGPUs + a.Dst - b.Dst })
	for g := range gpus {
		p.GPUs = append(p.GPUs, g)
	}
	slices.Sort(p.GPUs)
	var atFull, faulty []int
	for i, r := range series {
		if r.Bytes == full {
			atFull = append(atFull, i)
		}
		if r.Faulty() {
			faulty = append(faulty, i)
		}
	}
	all := make([]int, len(series))
	for i := range all {
		all[i] = i
	}
	pick := map[int]bool{0: true, len(series) - 1: true}
	for _, i := range evenly(atFull, maxPoints/2) {
		pick[i] = true
	}
	// Evenly among all rounds until the room left for faulty ones is filled (a pick
	// may fall on a round already chosen: then a denser spread is tried).
	room := maxPoints - min(len(faulty), maxPoints/4)
	for n := min(room-len(pick), len(all)); len(pick) < room && n <= len(all); n++ {
		for _, i := range evenly(all, n) {
			if len(pick) < room {
				pick[i] = true
			}
		}
	}
	for _, i := range faulty {
		if len(pick) < maxPoints {
			pick[i] = true
		}
	}
	idx := make([]int, 0, len(pick))
	for i := range pick {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	if n := len(idx); n > 1 {
		span := series[len(series)-1].Round - series[0].Round + 1
		p.Stride = max(p.Stride, (span+n-1)/n)
	}
	pairIx := map[PairKey]int{}
	for i, k := range p.Pairs {
		pairIx[k] = i
	}
	gpuIx := map[int]int{}
	for i, g := range p.GPUs {
		gpuIx[g] = i
	}
	for _, i := range idx {
		r := &series[i]
		pt := SoakPoint{Round: r.Round, AtMS: r.AtMS, Bytes: r.Bytes, Fault: r.Faulty()}
		if r.Bytes == full && len(p.Pairs) > 0 {
			pt.GBps = make([]float64, len(p.Pairs))
			for _, c := range r.Copies {
				if j, ok := pairIx[PairKey{c.Src, c.Dst}]; ok && plotted(c) && c.Error == "" {
					pt.GBps[j] = math.Round(c.GBps*100) / 100
				}
			}
		}
		if len(p.GPUs) > 0 && len(r.GPUs) > 0 {
			pt.TempC = make([]int, len(p.GPUs))
			for _, g := range r.GPUs {
				if j, ok := gpuIx[g.GPU]; ok && g.TemperatureC != nil {
					pt.TempC[j] = *g.TemperatureC
				}
			}
		}
		p.Points = append(p.Points, pt)
	}
	return p
}

// plotted says whether a copy is one the plot draws: a peer copy-engine write.
func plotted(c SoakCopy) bool {
	return c.Src != c.Dst && c.Method == MethodCE && c.Direction == DirWrite
}

// evenly picks at most n of list, spread evenly, the first and last included.
func evenly(list []int, n int) []int {
	if n <= 0 || len(list) == 0 {
		return nil
	}
	if len(list) <= n {
		return list
	}
	if n == 1 {
		return list[:1]
	}
	out := make([]int, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, list[i*(len(list)-1)/(n-1)])
	}
	return out
}

// EncodeSoakProgress is the progress document's bytes.
func EncodeSoakProgress(p *SoakProgress) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding soak progress: %w", err)
	}
	if len(b) > MaxSoakProgressBytes {
		return nil, fmt.Errorf("encoding soak progress: %d bytes, the limit is %d", len(b), MaxSoakProgressBytes)
	}
	return b, nil
}

// DecodeSoakProgress reads a progress document from outside bytes (a POST, a file)
// and checks it: one JSON value of at most MaxSoakProgressBytes, this schema, a known
// state, counts and figures in range, lists within their bounds and of one length
// with what they index. Bad JSON wraps ErrNotJSON; other errors name the key.
func DecodeSoakProgress(b []byte) (*SoakProgress, error) {
	if len(b) > MaxSoakProgressBytes {
		return nil, fmt.Errorf("soak progress: %d bytes, the limit is %d", len(b), MaxSoakProgressBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	p := &SoakProgress{}
	if err := d.Decode(p); err != nil {
		return nil, fmt.Errorf("soak progress: %w", jsonError(b, err))
	}
	if tail := bytes.TrimSpace(b[d.InputOffset():]); len(tail) > 0 {
		line, col := lineCol(b, d.InputOffset())
		return nil, fmt.Errorf("soak progress: %w", &PosError{line, col, fmt.Errorf("%w: bytes follow the document", ErrNotJSON)})
	}
	if err := validateSoakProgress(p); err != nil {
		return nil, err
	}
	if p.Pairs == nil {
		p.Pairs = []SoakPairNow{}
	}
	if p.GPUs == nil {
		p.GPUs = []SoakGPU{}
	}
	if p.Plot.Pairs == nil {
		p.Plot.Pairs = []PairKey{}
	}
	if p.Plot.GPUs == nil {
		p.Plot.GPUs = []int{}
	}
	if p.Plot.Points == nil {
		p.Plot.Points = []SoakPoint{}
	}
	return p, nil
}

// maxSoakMS bounds the durations a progress may carry: the longest soak a boot
// takes (bootproto.MaxSoakHours, 168 h), with a day to spare.
const maxSoakMS = int64(192 * time.Hour / time.Millisecond)

func validateSoakProgress(p *SoakProgress) error {
	v := &validator{}
	if p.Schema != SoakProgressSchema {
		v.add("schema", "%d, want %d", p.Schema, SoakProgressSchema)
	}
	if !slices.Contains(SoakStates, p.State) {
		v.add("state", "%q, want one of %v", p.State, SoakStates)
	}
	text := func(key, s string) {
		if len(s) > soakMaxText || !utf8.ValidString(s) {
			v.add(key, "want UTF-8 text of at most %d bytes, got %d bytes", soakMaxText, len(s))
		}
	}
	text("message", p.Message)
	text("first_fault", p.FirstFault)
	span := func(key string, ms int64) {
		if ms < 0 || ms > maxSoakMS {
			v.add(key, "%d, want 0..%d (192 h)", ms, maxSoakMS)
		}
	}
	span("requested_ms", p.RequestedMS)
	span("elapsed_ms", p.ElapsedMS)
	for _, c := range []struct {
		key string
		n   int
	}{{"rounds", p.Rounds}, {"fails", p.Fails}, {"warns", p.Warns}} {
		if c.n < 0 || c.n > 1<<30 {
			v.add(c.key, "%d, want 0..%d", c.n, 1<<30)
		}
	}
	if p.FaultyRounds < 0 || p.FaultyRounds > p.Rounds {
		v.add("faulty_rounds", "%d, want 0..%d (the rounds run)", p.FaultyRounds, p.Rounds)
	}
	if len(p.Pairs) > soakMaxPairs {
		v.add("pairs", "%d entries, want at most %d", len(p.Pairs), soakMaxPairs)
	} else {
		for i, x := range p.Pairs {
			key := fmt.Sprintf("pairs[%d]", i)
			v.index(key+".src", x.Src, MaxGPUs, "")
			v.index(key+".dst", x.Dst, MaxGPUs, "")
			v.rate(key+".start_gbps", x.StartGBps)
			v.rate(key+".now_gbps", x.NowGBps)
			if x.Bytes < 0 {
				v.add(key+".bytes", "%d, want 0 or more", x.Bytes)
			}
		}
	}
	if len(p.GPUs) > MaxGPUs {
		v.add("gpus", "%d entries, want at most %d", len(p.GPUs), MaxGPUs)
	} else {
		for i, g := range p.GPUs {
			key := fmt.Sprintf("gpus[%d]", i)
			v.index(key+".gpu", g.GPU, MaxGPUs, "")
			if g.TemperatureC != nil && (*g.TemperatureC < -50 || *g.TemperatureC > 200) {
				v.add(key+".temperature_c", "%d, want -50..200", *g.TemperatureC)
			}
		}
	}
	validatePlot(v, &p.Plot)
	return v.errAs("invalid soak progress")
}

func validatePlot(v *validator, p *SoakPlot) {
	if p.Stride < 0 || p.Stride > 1<<30 {
		v.add("plot.stride", "%d, want 0..%d", p.Stride, 1<<30)
	}
	if len(p.Pairs) > soakMaxPairs {
		v.add("plot.pairs", "%d entries, want at most %d", len(p.Pairs), soakMaxPairs)
		return
	}
	if len(p.GPUs) > MaxGPUs {
		v.add("plot.gpus", "%d entries, want at most %d", len(p.GPUs), MaxGPUs)
		return
	}
	if len(p.Points) > SoakMaxPoints {
		v.add("plot.points", "%d entries, want at most %d", len(p.Points), SoakMaxPoints)
		return
	}
	for i, k := range p.Pairs {
		v.index(fmt.Sprintf("plot.pairs[%d].src", i), k.Src, MaxGPUs, "")
		v.index(fmt.Sprintf("plot.pairs[%d].dst", i), k.Dst, MaxGPUs, "")
	}
	for i, g := range p.GPUs {
		v.index(fmt.Sprintf("plot.gpus[%d]", i), g, MaxGPUs, "")
	}
	prev := SoakPoint{Round: 0, AtMS: -1}
	for i, pt := range p.Points {
		key := fmt.Sprintf("plot.points[%d]", i)
		if pt.Round <= prev.Round {
			v.add(key+".round", "%d, want more than the point before's %d", pt.Round, prev.Round)
		}
		if pt.AtMS < max(prev.AtMS, 0) || pt.AtMS > maxSoakMS {
			v.add(key+".at_ms", "%d, want %d..%d", pt.AtMS, max(prev.AtMS, 0), maxSoakMS)
		}
		if pt.Bytes < 0 {
			v.add(key+".bytes", "%d, want 0 or more", pt.Bytes)
		}
		if pt.GBps != nil && len(pt.GBps) != len(p.Pairs) {
			v.add(key+".gbps", "%d values, want %d (one per plot.pairs)", len(pt.GBps), len(p.Pairs))
		}
		for j, g := range pt.GBps {
			v.rate(fmt.Sprintf("%s.gbps[%d]", key, j), g)
		}
		if pt.TempC != nil && len(pt.TempC) != len(p.GPUs) {
			v.add(key+".temp_c", "%d values, want %d (one per plot.gpus)", len(pt.TempC), len(p.GPUs))
		}
		for j, t := range pt.TempC {
			if t < -50 || t > 200 {
				v.add(fmt.Sprintf("%s.temp_c[%d]", key, j), "%d, want -50..200", t)
			}
		}
		prev = pt
	}
}

// errAs is err with another heading than a report's.
func (v *validator) errAs(what string) error {
	err := v.err()
	if err == nil {
		return nil
	}
	msg, _ := strings.CutPrefix(err.Error(), "invalid report")
	return errors.New(what + msg)
}
