package verdict

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/peerboot/peerboot/selftest"
)

// soakReport is a healthy 2-GPU report with a soak of rounds rounds, 7.5 min apart,
// sizes cycling as p2pcheck's do: GPU0->GPU1's copies run at half rate from round
// 40, GPU1 heats up to 91 °C, and (when xidAt > 0) an Xid in round xidAt stops it.
func soakReport(rounds, xidAt int) *selftest.Report {
	r := healthyReport(2)
	sizes := []int64{256 << 20, 64 << 20, 16 << 20, 128<<20 + 592}
	rate := []float64{1, 0.9, 0.7, 0.95}
	s := &selftest.Soak{RequestedMS: int64(rounds) * 450000, Stopped: "duration"}
	for n := 1; n <= rounds; n++ {
		i := (n - 1) % len(sizes)
		x := selftest.SoakRound{Round: n, AtMS: int64(n-1) * 450000, Bytes: sizes[i], Seed: uint32(n), Events: []selftest.KEvent{}}
		for _, c := range []struct {
			src, dst          int
			method, direction string
			gbps              float64
		}{
			{0, 0, selftest.MethodCE, selftest.DirLocal, 850}, {1, 1, selftest.MethodCE, selftest.DirLocal, 848},
			{0, 1, selftest.MethodCE, selftest.DirRead, 23.0}, {0, 1, selftest.MethodCE, selftest.DirWrite, 24.1},
			{1, 0, selftest.MethodCE, selftest.DirWrite, 24.3}, {1, 0, selftest.MethodSM, selftest.DirWrite, 22.2},
		} {
			g := c.gbps * rate[i]
			if c.src == 0 && c.dst == 1 && n >= 40 {
				g /= 2
			}
			x.Copies = append(x.Copies, selftest.SoakCopy{Src: c.src, Dst: c.dst, Method: c.method, Direction: c.direction, GBps: g, Verified: true})
		}
		x.AllReduce = &selftest.SoakAllReduce{BusBWAtMax: 20.5 - float64(n%3)*0.1, Sizes: 4}
		for g := 0; g < 2; g++ {
			temp, power := min(45+n/2*(g+1), 91), 300000+1000*(n%5)
			x.GPUs = append(x.GPUs, selftest.SoakGPU{GPU: g, LinkGen: 4, LinkWidth: 16, TemperatureC: &temp, PowerMW: &power})
		}
		if n == xidAt {
			x.Events = []selftest.KEvent{{Kind: selftest.KEventXid, BDF: testBDFs[1], Code: 79, Line: "NVRM: Xid (PCI:0000:42:00): 79, GPU has fallen off the bus."}}
			s.Stopped, s.StoppedAt = "failure", fmt.Sprintf("round %d, kernel event", n)
		}
		s.AddRound(x)
		s.Rounds, s.ElapsedMS = n, int64(n)*450000
		if n == xidAt {
			break
		}
	}
	r.Soak = s
	return r
}

// report show draws the soak's time series: a line per pair, the all-reduce, each
// GPU's temperature and power, the rounds with a fault, and the time axis; it fits
// the width, including a long soak whose series was downsampled.
func TestRenderSoakSeries(t *testing.T) {
	for _, tt := range []struct {
		name          string
		rounds, xidAt int
		width         int
	}{
		{"soak-xid-2", 64, 52, 80},
		{"soak-long-2", 1000, 0, 80},
		{"soak-long-2-wide", 1000, 0, 160},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := soakReport(tt.rounds, tt.xidAt)
			got := selftest.RenderWidth(r, tt.width)
			if selftest.RenderWidth(r, tt.width) != got {
				t.Fatal("RenderWidth is not deterministic")
			}
			i := strings.Index(got, "  Over time: ")
			if i < 0 {
				t.Fatalf("no time series:\n%s", got)
			}
			series := got[i:]
			series = series[:strings.Index(series, "\n\n")+1]
			for n, line := range strings.Split(strings.TrimSuffix(series, "\n"), "\n") {
				if w := utf8.RuneCountInString(line); w > tt.width {
					t.Errorf("line %d is %d columns, more than %d: %q", n+1, w, tt.width, line)
				}
			}
			for _, want := range []string{"GPU0->GPU1 ce write", "GPU1->GPU0 ce write", "GPU0 local ce  ", "all-reduce busbw", "GPU1 °C", "GPU0 power", "faults"} {
				if !strings.Contains(series, want) {
					t.Errorf("series lacks %q", want)
				}
			}
			if strings.Contains(series, "ce read") || strings.Contains(series, "sm write") {
				t.Errorf("a pair has more than its one line (ce write):\n%s", series)
			}
			golden(t, "render-"+tt.name, series)
		})
	}
}
