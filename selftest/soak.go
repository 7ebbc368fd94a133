package selftest

import (
	"fmt"
	"strings"
	"time"
)

// Soak is a burn-in run (p2pcheck --soak, docs/burn-in.md): the copy phase repeated
// round after round with a new data pattern and copy size each round, NVML sampled
// between rounds, the kernel log read after every round. It is an optional part of the
// report (absent in a boot self-test's), so schema 2 readers that do not know it still
// decode the report.
type Soak struct {
	// RequestedMS is the duration asked for; ElapsedMS how long the rounds ran.
	RequestedMS int64 `json:"requested_ms"`
	ElapsedMS   int64 `json:"elapsed_ms"`
	Rounds      int   `json:"rounds"` // rounds run (started), the failing one included
	// Stopped says why the soak ended: "duration", "rounds" (the --soak-rounds
	// bound), "failure" (the first hard failure; StoppedAt names it), "deadline" or
	// "interrupted" (SIGINT or SIGTERM: Ctrl-C on the console).
	Stopped   string `json:"stopped"`
	StoppedAt string `json:"stopped_at,omitempty"`
	// Stride is how many rounds one entry of Series stands for: the series keeps
	// round 1 and every Stride-th round after it, every round with a fault and the
	// latest round, at most SoakMaxSeries entries; when full it doubles Stride and
	// drops the rounds off it. 1: every round is there.
	Stride int         `json:"stride"`
	Series []SoakRound `json:"series"`
	// Pairs summarises every copy over all rounds, downsampled or not: one entry per
	// ordered pair, method, direction and size.
	Pairs []SoakPair `json:"pairs"`
	// AER is the PCIe AER counters of each GPU and each port above it, before the
	// first round and after the last (absent: the kernel exposes none).
	AER []SoakAER `json:"aer,omitempty"`
}

// AERCounts are one PCIe device's Advanced Error Reporting totals, as the kernel
// counts them since boot in sysfs aer_dev_correctable, aer_dev_nonfatal and
// aer_dev_fatal (TOTAL_ERR_COR, TOTAL_ERR_NONFATAL, TOTAL_ERR_FATAL). Detail holds
// every non-zero per-error counter by the kernel's name with its file's kind,
// e.g. "correctable BadDLLP".
type AERCounts struct {
	Correctable int64            `json:"correctable"`
	NonFatal    int64            `json:"nonfatal"`
	Fatal       int64            `json:"fatal"`
	Detail      map[string]int64 `json:"detail,omitempty"`
}

// SoakAER is one device's AER counters over the soak: a GPU or a port on its path.
type SoakAER struct {
	BDF   string    `json:"bdf"`
	Of    string    `json:"of"` // "GPU1", or "port above GPU1"
	Start AERCounts `json:"start"`
	End   AERCounts `json:"end"`
	// FirstRound is the first round after which a counter had grown (0: none grew),
	// FirstAtMS when that round started.
	FirstRound int   `json:"first_round,omitempty"`
	FirstAtMS  int64 `json:"first_at_ms,omitempty"`
}

// SoakAERGrowth is what one device's AER counters gained during one round.
type SoakAERGrowth struct {
	BDF         string `json:"bdf"`
	Correctable int64  `json:"correctable"`
	NonFatal    int64  `json:"nonfatal"`
	Fatal       int64  `json:"fatal"`
}

// SoakMaxSeries bounds Soak.Series: an 8-hour soak of 2-second rounds would otherwise
// put 14,400 rounds into a report that the fleet page and the report partition keep.
const SoakMaxSeries = 256

// SoakRound is one round's figures.
type SoakRound struct {
	Round  int        `json:"round"` // from 1
	AtMS   int64      `json:"at_ms"` // start of the round, from the start of the soak
	Bytes  int64      `json:"bytes"` // copy size of this round
	Seed   uint32     `json:"seed"`  // the pattern seed (cuda.Options.Seed)
	Copies []SoakCopy `json:"copies"`
	// AllReduce is the round's all-reduce sweep (nil: not run), Wrong the elements that
	// differed from the exact sum over all its sizes.
	AllReduce *SoakAllReduce `json:"all_reduce,omitempty"`
	// Latency is the median small-write latency of each peer pair, µs, by "src->dst".
	Latency map[string]float64 `json:"latency_us,omitempty"`
	GPUs    []SoakGPU          `json:"gpus"`   // NVML after the round
	Events  []KEvent           `json:"events"` // kernel-log events logged during the round
	// AER lists the devices whose AER counters grew during the round.
	AER   []SoakAERGrowth `json:"aer,omitempty"`
	Error string          `json:"error,omitempty"`
}

// SoakCopy is one copy of a round.
type SoakCopy struct {
	Src       int       `json:"src"`
	Dst       int       `json:"dst"`
	Method    string    `json:"method"`
	Direction string    `json:"direction"`
	GBps      float64   `json:"gbps"`
	Verified  bool      `json:"verified"`
	Mismatch  *Mismatch `json:"mismatch,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// SoakAllReduce is one round's all-reduce sweep.
type SoakAllReduce struct {
	BusBWAtMax float64 `json:"busbw_at_max"`
	Sizes      int     `json:"sizes"`
	Wrong      int64   `json:"wrong"`
	Error      string  `json:"error,omitempty"`
}

// SoakGPU is one GPU's NVML sample after a round. Fields NVML does not answer on the
// card stay at their zero value (-1 for the replay counter, as in NVMLGPU).
type SoakGPU struct {
	GPU           int   `json:"gpu"`
	LinkGen       int   `json:"link_gen"`
	LinkWidth     int   `json:"link_width"`
	ReplayCounter int64 `json:"replay_counter"`
	BAR1Used      int64 `json:"bar1_used"`
	// Sensors as NVMLGPU has them; absent where NVML did not answer.
	TemperatureC    *int    `json:"temperature_c,omitempty"`
	SMClockMHz      *int    `json:"sm_clock_mhz,omitempty"`
	MemClockMHz     *int    `json:"mem_clock_mhz,omitempty"`
	PowerMW         *int    `json:"power_mw,omitempty"`
	ThrottleReasons *uint64 `json:"throttle_reasons,omitempty"`
	ECC             *ECC    `json:"ecc,omitempty"`
}

// Throttle reasons (nvml.h nvmlClocksThrottleReason*) the soak warns about: the clocks
// came down for heat or a hardware signal, not because the GPU idled or sat at its
// power cap (ThrottlePowerCap, reported on its own: a card at full load often is).
const (
	ThrottlePowerCap   uint64 = 0x4
	ThrottleHWSlowdown uint64 = 0x8
	ThrottleSWThermal  uint64 = 0x20
	ThrottleHWThermal  uint64 = 0x40
	ThrottleHWBrake    uint64 = 0x80
	ThrottleHeat              = ThrottleHWSlowdown | ThrottleSWThermal | ThrottleHWThermal | ThrottleHWBrake
)

// ThrottleNames spells a throttle mask's bits the soak knows.
func ThrottleNames(mask uint64) string {
	var out []string
	for _, b := range []struct {
		bit  uint64
		name string
	}{{ThrottlePowerCap, "SW power cap"}, {ThrottleHWSlowdown, "HW slowdown"}, {ThrottleSWThermal, "SW thermal slowdown"}, {ThrottleHWThermal, "HW thermal slowdown"}, {ThrottleHWBrake, "HW power brake"}} {
		if mask&b.bit != 0 {
			out = append(out, b.name)
		}
	}
	return strings.Join(out, ", ")
}

// SoakPair is one copy's figures over the whole soak.
type SoakPair struct {
	Src       int     `json:"src"`
	Dst       int     `json:"dst"`
	Method    string  `json:"method"`
	Direction string  `json:"direction"`
	Bytes     int64   `json:"bytes"`
	Rounds    int     `json:"rounds"`     // rounds that copied it with a figure
	Verified  int     `json:"verified"`   // of which verified intact
	StartGBps float64 `json:"start_gbps"` // median of its first three rounds
	EndGBps   float64 `json:"end_gbps"`   // median of its last three rounds; 0: fewer than six rounds
	MinGBps   float64 `json:"min_gbps"`
	MinRound  int     `json:"min_round"`
}

// Faulty says whether a round found anything a downsampled series must keep.
func (r *SoakRound) Faulty() bool {
	if r.Error != "" || len(r.Events) > 0 || len(r.AER) > 0 || (r.AllReduce != nil && (r.AllReduce.Wrong > 0 || r.AllReduce.Error != "")) {
		return true
	}
	for _, c := range r.Copies {
		if !c.Verified || c.Error != "" {
			return true
		}
	}
	return false
}

// AddRound appends r to the series, halving it when it passes SoakMaxSeries. The
// series keeps the rounds on its stride (round 1, 1+Stride, 1+2*Stride, …), every
// faulty round, and the latest round; halving doubles the stride. Rounds added
// after a halving respect the stride too, so the series stays spread evenly over
// the whole soak (an 8-hour soak's first hours are not thinned more than its last).
func (s *Soak) AddRound(r SoakRound) {
	if s.Stride == 0 {
		s.Stride = 1
	}
	onStride := func(x SoakRound, stride int) bool { return (x.Round-1)%stride == 0 }
	// The previous latest round was kept only for being the latest.
	if n := len(s.Series); n > 1 && !onStride(s.Series[n-1], s.Stride) && !s.Series[n-1].Faulty() {
		s.Series = s.Series[:n-1]
	}
	s.Series = append(s.Series, r)
	for len(s.Series) > SoakMaxSeries {
		stride := s.Stride * 2
		last := len(s.Series) - 1
		kept := make([]SoakRound, 0, len(s.Series))
		for i, x := range s.Series {
			if i == 0 || i == last || onStride(x, stride) || x.Faulty() {
				kept = append(kept, x)
			}
		}
		if len(kept) == len(s.Series) {
			// Faulty rounds alone pass the bound: the oldest ones after the first go,
			// and the stride stays.
			s.Series = append(kept[:1], kept[len(kept)-SoakMaxSeries+1:]...)
			break
		}
		s.Series, s.Stride = kept, stride
	}
}

// renderSoak is the burn-in's console summary: how it ended, each copy at its largest
// size from start to end, and each GPU's link and replay counter first and last. The
// whole series is in the JSON.
func renderSoak(b *strings.Builder, r *Report) {
	s := r.Soak
	if s == nil {
		return
	}
	section(b, "Soak (burn-in)")
	fmt.Fprintf(b, "  %d rounds in %s of %s, stopped: %s", s.Rounds, time.Duration(s.ElapsedMS)*time.Millisecond, time.Duration(s.RequestedMS)*time.Millisecond, s.Stopped)
	if s.StoppedAt != "" {
		fmt.Fprintf(b, " (%s)", s.StoppedAt)
	}
	b.WriteString("\n")
	largest := map[string]int64{}
	key := func(p SoakPair) string { return fmt.Sprintf("%d>%d %s %s", p.Src, p.Dst, p.Method, p.Direction) }
	for _, p := range s.Pairs {
		largest[key(p)] = max(largest[key(p)], p.Bytes)
	}
	rows := [][]string{{"  COPY", "SIZE", "ROUNDS", "VERIFIED", "START GB/s", "END GB/s", "MIN GB/s (ROUND)"}}
	for _, p := range s.Pairs {
		if p.Bytes != largest[key(p)] {
			continue
		}
		name := fmt.Sprintf("GPU%d->GPU%d %s %s", p.Src, p.Dst, p.Method, p.Direction)
		if p.Src == p.Dst {
			name = fmt.Sprintf("GPU%d local %s", p.Src, p.Method)
		}
		end := "-"
		if p.EndGBps > 0 {
			end = fmt.Sprintf("%.1f", p.EndGBps)
		}
		rows = append(rows, []string{"  " + name, HumanBytes(p.Bytes), fmt.Sprint(p.Rounds), fmt.Sprint(p.Verified), fmt.Sprintf("%.1f", p.StartGBps), end, fmt.Sprintf("%.1f (%d)", p.MinGBps, p.MinRound)})
	}
	if len(rows) > 1 {
		writeTable(b, rows)
	}
	if len(s.Series) == 0 {
		return
	}
	first, last := s.Series[0], s.Series[len(s.Series)-1]
	if len(first.GPUs) == 0 || len(last.GPUs) == 0 {
		return
	}
	rows = [][]string{{"  GPU", "LINK FIRST", "LINK LAST", "REPLAY FIRST", "REPLAY LAST", "TEMP FIRST", "TEMP LAST", "SM MHz LAST", "POWER W LAST"}}
	opt := func(p *int, div int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p / div)
	}
	for _, f := range first.GPUs {
		for _, l := range last.GPUs {
			if l.GPU == f.GPU {
				rows = append(rows, []string{fmt.Sprintf("  GPU%d", f.GPU), fmt.Sprintf("Gen%d x%d", f.LinkGen, f.LinkWidth), fmt.Sprintf("Gen%d x%d", l.LinkGen, l.LinkWidth), fmt.Sprint(f.ReplayCounter), fmt.Sprint(l.ReplayCounter),
					opt(f.TemperatureC, 1), opt(l.TemperatureC, 1), opt(l.SMClockMHz, 1), opt(l.PowerMW, 1000)})
			}
		}
	}
	writeTable(b, rows)
}
