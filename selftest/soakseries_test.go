package selftest

import (
	"fmt"
	"strings"
	"testing"
)

// The series view's edges: nothing to draw for fewer than two rounds; rows only for
// what the rounds measured; a copy that failed is a gap, not a zero; a fault marked.
func TestRenderSoakSeriesEdges(t *testing.T) {
	round := func(n int, at int64, gbps float64) SoakRound {
		x := SoakRound{Round: n, AtMS: at, Bytes: 1 << 20, Copies: []SoakCopy{{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: gbps, Verified: true}}}
		if gbps == 0 {
			x.Copies[0].Error, x.Copies[0].Verified = "cuMemcpyAsync: CUDA_ERROR_LAUNCH_FAILED (719)", false
		}
		return x
	}
	for _, tt := range []struct {
		name   string
		soak   *Soak
		want   []string // lines (or parts) the view must have
		absent []string
	}{
		{"no soak", nil, nil, []string{"Over time"}},
		{"one round", &Soak{Series: []SoakRound{round(1, 0, 20)}}, nil, []string{"Over time"}},
		{"two rounds, same instant", &Soak{Series: []SoakRound{round(1, 0, 20), round(2, 0, 10)}},
			[]string{"  GPU0->GPU1 ce write  ▄         20.0→10.0 GB/s, min 10.0\n", "  faults               .       \n"}, []string{"°C", "all-reduce"}},
		{"a failed copy is a gap and a fault", &Soak{Series: []SoakRound{round(1, 0, 20), round(2, 1000, 0), round(3, 2000, 20)}},
			[]string{"  GPU0->GPU1 ce write  █      █  20.0→20.0 GB/s, min 20.0\n", "  faults               .   !  .\n"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			renderSoakSeries(&b, &Report{Soak: tt.soak}, 80)
			got := b.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.absent {
				if strings.Contains(got, w) {
					t.Errorf("has %q:\n%s", w, got)
				}
			}
		})
	}
}

// AddRound keeps the series spread evenly over the whole soak: an 8-hour soak at
// 1.5 s a round (19200 rounds) keeps about as many entries in its first half as in
// its second, every entry but the faulty ones and the latest on the stride, the
// first and latest rounds and every faulty one, within the bound.
func TestAddRoundSpread(t *testing.T) {
	for _, tt := range []struct {
		rounds int
		faulty []int
	}{
		{10, nil},
		{257, nil},
		{1000, []int{3, 777}},
		{19200, []int{2, 9999, 19199}},
		{5000, func() []int { // more faulty rounds than the bound holds
			var f []int
			for i := 2; i < 400; i++ {
				f = append(f, i)
			}
			return f
		}()},
	} {
		t.Run(fmt.Sprint(tt.rounds), func(t *testing.T) {
			bad := map[int]bool{}
			for _, f := range tt.faulty {
				bad[f] = true
			}
			s := &Soak{}
			for n := 1; n <= tt.rounds; n++ {
				x := SoakRound{Round: n}
				if bad[n] {
					x.Error = "injected"
				}
				s.AddRound(x)
				if len(s.Series) > SoakMaxSeries {
					t.Fatalf("round %d: %d entries", n, len(s.Series))
				}
			}
			e := s.Series
			if e[0].Round != 1 || e[len(e)-1].Round != tt.rounds {
				t.Errorf("first %d, last %d", e[0].Round, e[len(e)-1].Round)
			}
			firstHalf, faulty := 0, 0
			for i, x := range e {
				if x.Round <= tt.rounds/2 {
					firstHalf++
				}
				if x.Faulty() {
					faulty++
				} else if i < len(e)-1 && (x.Round-1)%s.Stride != 0 {
					t.Errorf("round %d off the stride %d", x.Round, s.Stride)
				}
			}
			if len(tt.faulty) < SoakMaxSeries && faulty != len(tt.faulty) {
				t.Errorf("%d faulty rounds kept, want %d", faulty, len(tt.faulty))
			}
			if healthy := len(e) - faulty; len(tt.faulty) < 10 && (firstHalf*10 < healthy*4 || firstHalf*10 > healthy*6+10) {
				t.Errorf("%d of %d entries in the first half of %d rounds (stride %d): not spread evenly", firstHalf, len(e), tt.rounds, s.Stride)
			}
		})
	}
}

// The series' clock and labels: T+h:mm:ss from the soak's start, hours past a day
// kept whole; a label clipped to its column by runes, not bytes.
func TestSoakClockAndClip(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want string
	}{
		{0, "T+0:00:00"}, {999, "T+0:00:00"}, {1000, "T+0:00:01"}, {59999, "T+0:00:59"}, {60000, "T+0:01:00"},
		{3599000, "T+0:59:59"}, {3600000, "T+1:00:00"}, {8*3600000 + 61000, "T+8:01:01"}, {30 * 3600000, "T+30:00:00"},
	} {
		if got := soakClock(tc.ms); got != tc.want {
			t.Errorf("soakClock(%d) = %q, want %q", tc.ms, got, tc.want)
		}
	}
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"GPU0 °C", 7, "GPU0 °C"}, {"GPU0 °C", 6, "GPU0 °"}, {"GPU0 °C", 8, "GPU0 °C"}, {"", 3, ""}, {"abc", 0, ""},
	} {
		if got := clip(tc.s, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// Figures of zero are no figures: a copy timed at 0 GB/s without an error and an
// all-reduce of 0 GB/s are gaps in their lines, not the lowest level; a GPU that
// read 0 °C in every round draws an empty line (its highest is 0) with its figures.
func TestRenderSoakSeriesZeros(t *testing.T) {
	zero, warm := 0, 50
	var s Soak
	for n := 1; n <= 3; n++ {
		x := SoakRound{Round: n, AtMS: int64(n-1) * 1000, Bytes: 1 << 20,
			Copies:    []SoakCopy{{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, GBps: 20, Verified: true}},
			AllReduce: &SoakAllReduce{BusBWAtMax: 10, Sizes: 4},
			GPUs:      []SoakGPU{{GPU: 0, TemperatureC: &zero}, {GPU: 1, TemperatureC: &warm}}}
		if n == 2 {
			x.Copies[0].GBps = 0
			x.AllReduce.BusBWAtMax = 0
		}
		s.Series = append(s.Series, x)
	}
	var b strings.Builder
	renderSoakSeries(&b, &Report{Soak: &s}, 80)
	got := b.String()
	for _, want := range []string{
		"  GPU0->GPU1 ce write  █      █  20.0→20.0 GB/s, min 20.0\n",
		"  all-reduce busbw     █      █  10.0→10.0 GB/s, min 10.0\n",
		"  GPU0 °C                        0→0 °C, max 0\n",
		"  GPU1 °C              █   █  █  50→50 °C, max 50\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
}

// A pair's line is its copy-engine write, whatever else the rounds copied between
// the two or with a third GPU, and in whatever order; the time axis runs from the
// first kept round, which need not start at T+0 (a series whose first round was
// dropped, or a soak that started late).
func TestRenderSoakSeriesPicksTheCEWrite(t *testing.T) {
	var s Soak
	for n, gbps := range []float64{20, 10, 20} {
		c := func(src, dst int, method, dir string, g float64) SoakCopy {
			return SoakCopy{Src: src, Dst: dst, Method: method, Direction: dir, GBps: g, Verified: true}
		}
		s.Series = append(s.Series, SoakRound{Round: n + 5, AtMS: 60000 + int64(n)*1000, Bytes: 1 << 20, Copies: []SoakCopy{
			c(0, 2, MethodCE, DirWrite, 5+float64(n)), c(2, 1, MethodCE, DirWrite, 7-float64(n)),
			c(0, 1, MethodCE, DirWrite, gbps), c(0, 1, MethodCE, DirRead, 40-float64(n)), c(0, 1, MethodSM, DirWrite, 30+float64(n)),
		}})
	}
	var b strings.Builder
	renderSoakSeries(&b, &Report{Soak: &s}, 80)
	got := b.String()
	for _, want := range []string{
		"rounds 5 to 7, T+0:01:00 to T+0:01:02 (3 of them kept in the\n",
		"  GPU0->GPU2 ce write  ▆   ▇  █  5.0→7.0 GB/s, min 5.0\n",
		"  GPU2->GPU1 ce write  █   ▇  ▆  7.0→5.0 GB/s, min 5.0\n",
		"  GPU0->GPU1 ce write  █   ▄  █  20.0→20.0 GB/s, min 10.0\n",
		"  faults               .   .  .\n",
		"                       T+0:01:00 T+0:01:02\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
}
