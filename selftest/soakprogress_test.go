package selftest

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// plotRound is a round of a 2-GPU soak: both peer CE writes at gbps, GPU temps t0, t1.
func plotRound(round int, bytes int64, gbps float64, t0, t1 int) SoakRound {
	return SoakRound{Round: round, AtMS: int64(round-1) * 2000, Bytes: bytes,
		Copies: []SoakCopy{
			{Src: 0, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: 900, Verified: true},
			{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: gbps, Verified: true},
			{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, GBps: gbps + 1, Verified: true},
			{Src: 0, Dst: 1, Method: MethodSM, Direction: DirWrite, GBps: 11, Verified: true},
			{Src: 0, Dst: 1, Method: MethodCE, Direction: DirRead, GBps: 12, Verified: true},
		},
		GPUs: []SoakGPU{{GPU: 0, TemperatureC: &t0}, {GPU: 1, TemperatureC: &t1}}}
}

func TestNewSoakPlot(t *testing.T) {
	const full = 256 << 20
	sizes := []int64{full, full / 4, full / 16, full/2 + 592}
	series := func(n int) []SoakRound {
		var out []SoakRound
		for r := 1; r <= n; r++ {
			out = append(out, plotRound(r, sizes[(r-1)%4], 20+float64(r)/10, 40+r%7, 50))
		}
		return out
	}
	corrupt := series(300)
	corrupt[211].Copies[1].Verified = false
	corrupt[211].Copies[1].Mismatch = &Mismatch{Offset: 64, Got: 1, Want: 2, Words: 1}
	for _, tc := range []struct {
		name                       string
		series                     []SoakRound
		stride, max                int
		points, bw, minStride      int
		pairs                      string
		fault                      int // a round that must be a point (0: none)
		firstRound, lastRound      int
		firstGBps01, firstTempGPU0 float64
	}{
		{"empty", nil, 1, SoakMaxPoints, 0, 0, 1, "", 0, 0, 0, 0, 0},
		{"one round", series(1), 1, SoakMaxPoints, 1, 1, 1, "0->1 1->0", 0, 1, 1, 20.1, 41},
		{"every round fits", series(40), 1, SoakMaxPoints, 40, 10, 1, "0->1 1->0", 0, 1, 40, 20.1, 41},
		{"downsampled", series(300), 1, 64, 64, 32, 5, "0->1 1->0", 0, 1, 300, 20.1, 41},
		{"a faulty round is kept", corrupt, 1, 64, 64, 32, 5, "0->1 1->0", 212, 1, 300, 20.1, 41},
		{"the series' stride carries", series(10), 4, SoakMaxPoints, 10, 3, 4, "0->1 1->0", 0, 1, 10, 20.1, 41},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewSoakPlot(tc.series, tc.stride, tc.max)
			if len(p.Points) != tc.points {
				t.Fatalf("%d points, want %d", len(p.Points), tc.points)
			}
			if p.Stride < tc.minStride {
				t.Errorf("stride %d, want at least %d", p.Stride, tc.minStride)
			}
			var pairs []string
			for _, k := range p.Pairs {
				pairs = append(pairs, k.String())
			}
			if got := strings.Join(pairs, " "); got != tc.pairs {
				t.Errorf("pairs %q, want %q (peer copy-engine writes only)", got, tc.pairs)
			}
			if tc.points == 0 {
				return
			}
			bw, prev := 0, 0
			seen := map[int]bool{}
			for _, pt := range p.Points {
				if pt.Round <= prev {
					t.Errorf("round %d after %d", pt.Round, prev)
				}
				prev = pt.Round
				seen[pt.Round] = true
				if pt.GBps != nil {
					bw++
					if pt.Bytes != full {
						t.Errorf("round %d at %d bytes carries bandwidth", pt.Round, pt.Bytes)
					}
				}
				if len(pt.TempC) != len(p.GPUs) {
					t.Errorf("round %d: %d temperatures for %d GPUs", pt.Round, len(pt.TempC), len(p.GPUs))
				}
			}
			if bw < tc.bw {
				t.Errorf("%d points with bandwidth, want at least %d", bw, tc.bw)
			}
			if p.Points[0].Round != tc.firstRound || p.Points[len(p.Points)-1].Round != tc.lastRound {
				t.Errorf("rounds %d..%d, want %d..%d", p.Points[0].Round, p.Points[len(p.Points)-1].Round, tc.firstRound, tc.lastRound)
			}
			if tc.fault > 0 && !seen[tc.fault] {
				t.Errorf("faulty round %d was dropped", tc.fault)
			}
			if g := p.Points[0].GBps; len(g) == 0 || g[0] != tc.firstGBps01 || float64(p.Points[0].TempC[0]) != tc.firstTempGPU0 {
				t.Errorf("first point %+v, want 0->1 at %g GB/s and GPU0 at %g °C", p.Points[0], tc.firstGBps01, tc.firstTempGPU0)
			}
		})
	}
}

func goodProgress() *SoakProgress {
	s := make([]SoakRound, 0, 12)
	for r := 1; r <= 12; r++ {
		s = append(s, plotRound(r, 1<<20, 20, 45, 47))
	}
	t := 47
	return &SoakProgress{Schema: SoakProgressSchema, State: SoakRunning, RequestedMS: 3600000, ElapsedMS: 24000, Rounds: 12,
		Pairs: []SoakPairNow{{Src: 0, Dst: 1, Bytes: 1 << 20, StartGBps: 20, NowGBps: 19.5}},
		GPUs:  []SoakGPU{{GPU: 0, ReplayCounter: -1, TemperatureC: &t}}, Plot: NewSoakPlot(s, 1, SoakMaxPoints)}
}

func TestDecodeSoakProgress(t *testing.T) {
	good, err := EncodeSoakProgress(goodProgress())
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodeSoakProgress(good)
	if err != nil {
		t.Fatalf("a progress p2pcheck writes: %v", err)
	}
	if again, _ := EncodeSoakProgress(p); string(again) != string(good) {
		t.Errorf("decode, encode changed it:\n%s\n%s", good, again)
	}
	edit := func(f func(p *SoakProgress)) string {
		p := goodProgress()
		f(p)
		b, err := EncodeSoakProgress(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, in, want string
		notJSON        bool
	}{
		{"empty", "", "empty input", true},
		{"not an object", `[1]`, "want a JSON object", false},
		{"trailing bytes", string(good) + ` {}`, "1:" + strconv.Itoa(len(good)+1) + ": ", true},
		{"too big", `{"message":"` + strings.Repeat("x", MaxSoakProgressBytes) + `"}`, "bytes, the limit is 262144", false},
		{"schema", edit(func(p *SoakProgress) { p.Schema = 2 }), "schema: 2, want 1", false},
		{"state", edit(func(p *SoakProgress) { p.State = "burning" }), `state: "burning", want one of [running finished stopped failed skipped]`, false},
		{"negative elapsed", edit(func(p *SoakProgress) { p.ElapsedMS = -1 }), "elapsed_ms: -1, want 0..", false},
		{"faulty beyond rounds", edit(func(p *SoakProgress) { p.FaultyRounds = 13 }), "faulty_rounds: 13, want 0..12", false},
		{"long message", edit(func(p *SoakProgress) { p.Message = strings.Repeat("é", 600) }), "message: want UTF-8 text of at most 1024 bytes, got 1200 bytes", false},
		{"pair gpu", edit(func(p *SoakProgress) { p.Pairs[0].Dst = 64 }), "pairs[0].dst: 64, want 0..63", false},
		{"pair rate", edit(func(p *SoakProgress) { p.Pairs[0].NowGBps = -3 }), "pairs[0].now_gbps: -3 GB/s", false},
		{"temperature", edit(func(p *SoakProgress) { x := 900; p.GPUs[0].TemperatureC = &x }), "gpus[0].temperature_c: 900, want -50..200", false},
		{"point gbps length", edit(func(p *SoakProgress) { p.Plot.Points[0].GBps = []float64{1} }), "plot.points[0].gbps: 1 values, want 2 (one per plot.pairs)", false},
		{"point temp length", edit(func(p *SoakProgress) { p.Plot.Points[3].TempC = []int{1, 2, 3} }), "plot.points[3].temp_c: 3 values, want 2", false},
		{"rounds out of order", edit(func(p *SoakProgress) { p.Plot.Points[2].Round = 1 }), "plot.points[2].round: 1, want more than the point before's 2", false},
		{"too many points", edit(func(p *SoakProgress) {
			for i := 0; len(p.Plot.Points) <= SoakMaxPoints; i++ {
				p.Plot.Points = append(p.Plot.Points, SoakPoint{Round: 100 + i, AtMS: 1 << 20})
			}
		}), "plot.points: 129 entries, want at most 128", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeSoakProgress([]byte(tc.in))
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			if errors.Is(err, ErrNotJSON) != tc.notJSON {
				t.Errorf("errors.Is(ErrNotJSON) = %v, want %v (%v)", !tc.notJSON, tc.notJSON, err)
			}
		})
	}
}

// FuzzDecodeSoakProgress: the progress serve takes from a node's POST is outside
// bytes. Whatever it is, decoding returns an error or a document that passes its own
// checks again after a round trip, and never panics.
func FuzzDecodeSoakProgress(f *testing.F) {
	good, err := EncodeSoakProgress(goodProgress())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"schema":1,"state":"skipped","message":"no GPUs","plot":{"stride":1,"pairs":[],"gpus":[],"points":[]}}`))
	f.Add([]byte(`{"schema":1,"state":"running","plot":{"pairs":[{"src":0,"dst":1}],"points":[{"round":1,"gbps":[1e309]}]}}`))
	f.Add([]byte(`{"schema":1`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeSoakProgress(b)
		if err != nil {
			return
		}
		again, err := EncodeSoakProgress(p)
		if err != nil {
			t.Fatalf("a decoded progress does not encode: %v", err)
		}
		if _, err := DecodeSoakProgress(again); err != nil {
			t.Fatalf("a decoded progress does not decode again: %v\n%s", err, again)
		}
	})
}
