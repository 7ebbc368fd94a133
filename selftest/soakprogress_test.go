package selftest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// Each check of a progress document at its bound: the value just inside is taken,
// the one just outside refused with the key, the value and the range named (one
// problem, so the whole message is known).
func TestSoakProgressBounds(t *testing.T) {
	temp := func(c int) *int { return &c }
	pairs := func(n int) []SoakPairNow {
		out := make([]SoakPairNow, n)
		for i := range out {
			out[i] = SoakPairNow{Src: i / MaxGPUs, Dst: i % MaxGPUs}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(p *SoakProgress)
		want string // "": accepted
	}{
		{"every state", func(p *SoakProgress) { p.State = SoakSkipped }, ""},
		{"state finished", func(p *SoakProgress) { p.State = SoakFinished }, ""},
		{"schema 0", func(p *SoakProgress) { p.Schema = 0 }, "schema: 0, want 1"},
		{"message at the limit", func(p *SoakProgress) { p.Message = strings.Repeat("x", soakMaxText) }, ""},
		{"message past the limit", func(p *SoakProgress) { p.Message = strings.Repeat("x", soakMaxText+1) }, "message: want UTF-8 text of at most 1024 bytes, got 1025 bytes"},
		{"first fault not UTF-8", func(p *SoakProgress) { p.FirstFault = "round 3: \xff" }, "first_fault: want UTF-8 text of at most 1024 bytes, got 10 bytes"},
		{"requested at 192 h", func(p *SoakProgress) { p.RequestedMS = maxSoakMS }, ""},
		{"requested past 192 h", func(p *SoakProgress) { p.RequestedMS = maxSoakMS + 1 }, "requested_ms: 691200001, want 0..691200000 (192 h)"},
		{"elapsed 0", func(p *SoakProgress) { p.ElapsedMS = 0 }, ""},
		{"rounds at the bound", func(p *SoakProgress) { p.Rounds = 1 << 30 }, ""},
		{"rounds past the bound", func(p *SoakProgress) { p.Rounds = 1<<30 + 1 }, "rounds: 1073741825, want 0..1073741824"},
		{"rounds negative", func(p *SoakProgress) { p.Rounds = -1 }, "rounds: -1, want 0..1073741824\n  faulty_rounds: 0, want 0..-1 (the rounds run)"},
		{"fails negative", func(p *SoakProgress) { p.Fails = -1 }, "fails: -1, want 0..1073741824"},
		{"warns past the bound", func(p *SoakProgress) { p.Warns = 1<<30 + 1 }, "warns: 1073741825, want 0..1073741824"},
		{"every round faulty", func(p *SoakProgress) { p.FaultyRounds = p.Rounds }, ""},
		{"faulty negative", func(p *SoakProgress) { p.FaultyRounds = -1 }, "faulty_rounds: -1, want 0..12 (the rounds run)"},
		{"pairs at the bound", func(p *SoakProgress) { p.Pairs = pairs(soakMaxPairs) }, ""},
		{"pairs past the bound", func(p *SoakProgress) { p.Pairs = pairs(soakMaxPairs + 1) }, "pairs: 4033 entries, want at most 4032"},
		{"pair src negative", func(p *SoakProgress) { p.Pairs[0].Src = -1 }, "pairs[0].src: -1, want 0..63"},
		{"pair start rate", func(p *SoakProgress) { p.Pairs[0].StartGBps = 1e5 }, "pairs[0].start_gbps: 100000 GB/s, want 0..10000"},
		{"pair bytes negative", func(p *SoakProgress) { p.Pairs[0].Bytes = -1 }, "pairs[0].bytes: -1, want 0 or more"},
		{"pair bytes 0", func(p *SoakProgress) { p.Pairs[0].Bytes = 0 }, ""},
		{"gpus at the bound", func(p *SoakProgress) { p.GPUs = make([]SoakGPU, MaxGPUs) }, ""},
		{"gpus past the bound", func(p *SoakProgress) { p.GPUs = make([]SoakGPU, MaxGPUs+1) }, "gpus: 65 entries, want at most 64"},
		{"gpu index", func(p *SoakProgress) { p.GPUs[0].GPU = MaxGPUs }, "gpus[0].gpu: 64, want 0..63"},
		{"temperature at the bounds", func(p *SoakProgress) {
			p.GPUs = []SoakGPU{{GPU: 0, TemperatureC: temp(-50)}, {GPU: 1, TemperatureC: temp(200)}, {GPU: 2}}
		}, ""},
		{"temperature below", func(p *SoakProgress) { p.GPUs[0].TemperatureC = temp(-51) }, "gpus[0].temperature_c: -51, want -50..200"},
		{"temperature above", func(p *SoakProgress) { p.GPUs[0].TemperatureC = temp(201) }, "gpus[0].temperature_c: 201, want -50..200"},
		{"plot stride 0", func(p *SoakProgress) { p.Plot.Stride = 0 }, ""},
		{"plot stride at the bound", func(p *SoakProgress) { p.Plot.Stride = 1 << 30 }, ""},
		{"plot stride negative", func(p *SoakProgress) { p.Plot.Stride = -1 }, "plot.stride: -1, want 0..1073741824"},
		{"plot stride past the bound", func(p *SoakProgress) { p.Plot.Stride = 1<<30 + 1 }, "plot.stride: 1073741825, want 0..1073741824"},
		{"plot pairs past the bound", func(p *SoakProgress) {
			p.Plot = SoakPlot{Pairs: make([]PairKey, soakMaxPairs+1)}
		}, "plot.pairs: 4033 entries, want at most 4032"},
		{"plot gpus past the bound", func(p *SoakProgress) { p.Plot = SoakPlot{GPUs: make([]int, MaxGPUs+1)} }, "plot.gpus: 65 entries, want at most 64"},
		{"plot gpus at the bound", func(p *SoakProgress) { p.Plot = SoakPlot{GPUs: make([]int, MaxGPUs)} }, ""},
		{"plot pairs at the bound", func(p *SoakProgress) { p.Plot = SoakPlot{Pairs: make([]PairKey, soakMaxPairs)} }, ""},
		{"plot points at the bound", func(p *SoakProgress) {
			p.Plot = SoakPlot{}
			for i := 1; i <= SoakMaxPoints; i++ {
				p.Plot.Points = append(p.Plot.Points, SoakPoint{Round: i})
			}
		}, ""},
		{"plot pair dst", func(p *SoakProgress) { p.Plot.Pairs[1].Dst = -1 }, "plot.pairs[1].dst: -1, want 0..63"},
		{"plot pair src", func(p *SoakProgress) { p.Plot.Pairs[1].Src = 64 }, "plot.pairs[1].src: 64, want 0..63"},
		{"plot gpu", func(p *SoakProgress) { p.Plot.GPUs[1] = 64 }, "plot.gpus[1]: 64, want 0..63"},
		{"point round 0", func(p *SoakProgress) { p.Plot.Points[0].Round = 0 }, "plot.points[0].round: 0, want more than the point before's 0"},
		{"point round repeated", func(p *SoakProgress) { p.Plot.Points[1].Round = p.Plot.Points[0].Round }, "plot.points[1].round: 1, want more than the point before's 1"},
		{"point at the same time", func(p *SoakProgress) { p.Plot.Points[1].AtMS = p.Plot.Points[0].AtMS }, ""},
		{"first point at 0", func(p *SoakProgress) { p.Plot.Points[0].AtMS = 0 }, ""},
		{"point earlier", func(p *SoakProgress) { p.Plot.Points[2].AtMS = 1999 }, "plot.points[2].at_ms: 1999, want 2000..691200000"},
		{"point negative", func(p *SoakProgress) { p.Plot.Points[0].AtMS = -1 }, "plot.points[0].at_ms: -1, want 0..691200000"},
		{"point past 192 h", func(p *SoakProgress) { p.Plot.Points[len(p.Plot.Points)-1].AtMS = maxSoakMS + 1 }, "plot.points[11].at_ms: 691200001, want 20000..691200000"},
		{"last point at 192 h", func(p *SoakProgress) { p.Plot.Points[len(p.Plot.Points)-1].AtMS = maxSoakMS }, ""},
		{"point bytes", func(p *SoakProgress) { p.Plot.Points[0].Bytes = -1 }, "plot.points[0].bytes: -1, want 0 or more"},
		{"point without bandwidth", func(p *SoakProgress) { p.Plot.Points[0].GBps = nil; p.Plot.Points[0].TempC = nil }, ""},
		{"point rate", func(p *SoakProgress) { p.Plot.Points[0].GBps[1] = -0.5 }, "plot.points[0].gbps[1]: -0.5 GB/s, want 0..10000"},
		{"point temperature", func(p *SoakProgress) { p.Plot.Points[0].TempC[1] = 201 }, "plot.points[0].temp_c[1]: 201, want -50..200"},
		{"point temperature low", func(p *SoakProgress) { p.Plot.Points[0].TempC[0] = -51 }, "plot.points[0].temp_c[0]: -51, want -50..200"},
		{"point temperatures at the bounds", func(p *SoakProgress) { p.Plot.Points[0].TempC = []int{-50, 200} }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := goodProgress()
			tc.edit(p)
			err := validateSoakProgress(p)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Errorf("accepted, want %q", tc.want)
			case strings.Contains(tc.want, "\n"):
				if err.Error() != "invalid soak progress:\n  "+tc.want {
					t.Errorf("error %q, want %q", err, tc.want)
				}
			case err.Error() != "invalid soak progress: "+tc.want:
				t.Errorf("error %q, want %q", err, "invalid soak progress: "+tc.want)
			}
		})
	}
}

// What a progress document decodes to always has its lists (JSON [] rather than
// null for serve's page), and what is too big to send is refused when encoding.
func TestSoakProgressLists(t *testing.T) {
	p, err := DecodeSoakProgress([]byte(`{"schema":1,"state":"skipped","message":"no GPUs"}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pairs == nil || p.GPUs == nil || p.Plot.Pairs == nil || p.Plot.GPUs == nil || p.Plot.Points == nil {
		t.Errorf("a nil list after decoding: %+v", p)
	}
	b, err := EncodeSoakProgress(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"schema":1,"state":"skipped","message":"no GPUs","requested_ms":0,"elapsed_ms":0,"rounds":0,"faulty_rounds":0,"fails":0,"warns":0,"pairs":[],"gpus":[],"plot":{"stride":0,"pairs":[],"gpus":[],"points":[]}}`; string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
	// Exactly at the limit is sent; a byte more is not.
	p.Message = ""
	base, _ := EncodeSoakProgress(p)
	p.Message = strings.Repeat("x", MaxSoakProgressBytes-len(base)-len(`,"message":""`))
	if b, err := EncodeSoakProgress(p); err != nil || len(b) != MaxSoakProgressBytes {
		t.Errorf("a document of exactly %d bytes: %d bytes, %v", MaxSoakProgressBytes, len(b), err)
	}
	p.Message += "x"
	if _, err := EncodeSoakProgress(p); err == nil || err.Error() != "encoding soak progress: 262145 bytes, the limit is 262144" {
		t.Errorf("a document a byte too big: %v", err)
	}
	if _, err := DecodeSoakProgress(make([]byte, MaxSoakProgressBytes+1)); err == nil || !strings.Contains(err.Error(), "262145 bytes, the limit is 262144") {
		t.Errorf("decoding a byte too many: %v", err)
	}
	// A document of exactly the limit is read (white space after it counts).
	good, _ := EncodeSoakProgress(goodProgress())
	padded := append(append([]byte{}, good...), strings.Repeat(" ", MaxSoakProgressBytes-len(good))...)
	if _, err := DecodeSoakProgress(padded); err != nil {
		t.Errorf("a document of exactly %d bytes: %v", MaxSoakProgressBytes, err)
	}
	// Trailing white space is not a second document.
	if _, err := DecodeSoakProgress(append(good, " \n\t"...)); err != nil {
		t.Errorf("a document with a trailing newline: %v", err)
	}
}

// evenly picks n of a list spread over it, the first and last included.
func TestEvenly(t *testing.T) {
	list := []int{10, 11, 12, 13, 14, 15, 16}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{-1, "[]"}, {0, "[]"}, {1, "[10]"}, {2, "[10 16]"}, {3, "[10 13 16]"}, {4, "[10 12 14 16]"}, {6, "[10 11 12 13 14 16]"}, {7, "[10 11 12 13 14 15 16]"}, {9, "[10 11 12 13 14 15 16]"},
	} {
		if got := fmt.Sprint(evenly(list, tc.n)); got != tc.want {
			t.Errorf("evenly(7 items, %d) = %s, want %s", tc.n, got, tc.want)
		}
	}
	if got := evenly(nil, 3); got != nil {
		t.Errorf("evenly(nil, 3) = %v", got)
	}
}

// The plot serve draws, exactly, for a small soak squeezed into 6 points: the first
// and last rounds, half the room for rounds at the largest size (their bandwidth,
// to the hundredth, 0 for a copy that failed), rounds spread over the rest, the
// faulty rounds while room is left, and the stride each point stands for.
func TestNewSoakPlotExact(t *testing.T) {
	var series []SoakRound
	for r := 1; r <= 10; r++ {
		bytes := int64(1 << 20)
		if r%2 == 0 {
			bytes = 1 << 19
		}
		series = append(series, plotRound(r, bytes, 20.456+float64(r), 40+r, 60+r))
	}
	series[4].Copies[1].Error, series[4].Copies[1].Verified = "cuMemcpyAsync: CUDA_ERROR_ILLEGAL_ADDRESS (700)", false // round 5
	series[5].Events = []KEvent{{Kind: KEventXid, Code: 79}}                                                           // round 6
	series[8].GPUs = nil                                                                                               // round 9: no NVML sample
	series[9].GPUs[1].TemperatureC = nil                                                                               // round 10: GPU1 not read
	p := NewSoakPlot(series, 1, 6)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"stride":2,"pairs":[{"src":0,"dst":1},{"src":1,"dst":0}],"gpus":[0,1],"points":[` +
		`{"round":1,"at_ms":0,"bytes":1048576,"gbps":[21.46,22.46],"temp_c":[41,61]},` +
		`{"round":4,"at_ms":6000,"bytes":524288,"temp_c":[44,64]},` +
		`{"round":5,"at_ms":8000,"bytes":1048576,"gbps":[0,26.46],"temp_c":[45,65],"fault":true},` +
		`{"round":6,"at_ms":10000,"bytes":524288,"temp_c":[46,66],"fault":true},` +
		`{"round":9,"at_ms":16000,"bytes":1048576,"gbps":[29.46,30.46]},` +
		`{"round":10,"at_ms":18000,"bytes":524288,"temp_c":[50,0]}]}`
	if string(b) != want {
		t.Errorf("plot\n%s\nwant\n%s", b, want)
	}
	// Every round faulty: the faulty ones fill the room left, and no more.
	bad := append([]SoakRound{}, series...)
	for i := range bad {
		bad[i].Error = "injected"
	}
	if q := NewSoakPlot(bad, 1, 6); len(q.Points) != 6 {
		t.Errorf("every round faulty: %d points, want 6", len(q.Points))
	}
	// A plot of no room, or of nothing, has no points but its lists.
	for _, max := range []int{0, 1} {
		if q := NewSoakPlot(series, 0, max); len(q.Points) != 0 || q.Stride != 1 || q.Pairs == nil {
			t.Errorf("NewSoakPlot(max %d) = %+v, want no points, stride 1", max, q)
		}
	}
	// Room for two: the first and the last.
	if q := NewSoakPlot(series, 3, 2); len(q.Points) != 2 || q.Points[0].Round != 1 || q.Points[1].Round != 10 || q.Stride != 5 {
		t.Errorf("NewSoakPlot(max 2) = %+v, want rounds 1 and 10 at stride 5", q)
	}
	// A soak of more GPUs: pairs in source then destination order.
	var wide []SoakRound
	for r := 1; r <= 2; r++ {
		x := SoakRound{Round: r, AtMS: int64(r) * 1000, Bytes: 1 << 20}
		for _, k := range []PairKey{{2, 0}, {0, 3}, {1, 2}, {0, 2}, {3, 1}} {
			x.Copies = append(x.Copies, SoakCopy{Src: k.Src, Dst: k.Dst, Method: MethodCE, Direction: DirWrite, GBps: float64(10*k.Src + k.Dst), Verified: true})
		}
		wide = append(wide, x)
	}
	q := NewSoakPlot(wide, 1, SoakMaxPoints)
	if got := fmt.Sprint(q.Pairs, q.Points[1].GBps, q.Points[1].TempC == nil); got != "[0->2 0->3 1->2 2->0 3->1] [2 3 12 20 31] true" {
		t.Errorf("pairs, GB/s, no temperatures: %s", got)
	}
}

// The plot's pairs are in source, then destination order whatever order the
// soak's copies (and the map that collects them) come in: 8 GPUs, every pair,
// several times over (each NewSoakPlot collects them in a new map order).
func TestNewSoakPlotPairOrderEightGPUs(t *testing.T) {
	var want []PairKey
	x := SoakRound{Round: 1, AtMS: 1000, Bytes: 1 << 20}
	for s := 7; s >= 0; s-- {
		for d := 7; d >= 0; d-- {
			if s != d {
				x.Copies = append(x.Copies, SoakCopy{Src: s, Dst: d, Method: MethodCE, Direction: DirWrite, GBps: 20, Verified: true})
			}
		}
	}
	for s := 0; s < 8; s++ {
		for d := 0; d < 8; d++ {
			if s != d {
				want = append(want, PairKey{s, d})
			}
		}
	}
	for range 20 {
		if got := NewSoakPlot([]SoakRound{x}, 1, SoakMaxPoints).Pairs; !slices.Equal(got, want) {
			t.Fatalf("pairs %v, want %v", got, want)
		}
	}
}
