package selftest

import (
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
