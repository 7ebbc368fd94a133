package soakplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

var update = flag.Bool("update", false, "rewrite the golden SVG files")

// soak is a 4-GPU soak of n 20-second rounds cycling four sizes: GPU0->GPU1 at half
// its rate from round slowFrom (0: never), GPU3 heating from 60 to 84 °C, a corrupted
// copy in round bad (0: none).
func soak(n, slowFrom, bad int) selftest.SoakPlot {
	const full = 256 << 20
	sizes := []int64{full, full / 4, full / 16, full/2 + 592}
	var series []selftest.SoakRound
	for r := 1; r <= n; r++ {
		rd := selftest.SoakRound{Round: r, AtMS: int64(r-1) * 20000, Bytes: sizes[(r-1)%4]}
		for s := 0; s < 4; s++ {
			for d := 0; d < 4; d++ {
				if s == d {
					continue
				}
				g := 24.0 + float64(s+d)/4
				if s == 0 && d == 1 && slowFrom > 0 && r >= slowFrom {
					g /= 2
				}
				rd.Copies = append(rd.Copies, selftest.SoakCopy{Src: s, Dst: d, Method: selftest.MethodCE, Direction: selftest.DirWrite, GBps: g, Verified: !(r == bad && s == 2 && d == 3)})
			}
		}
		for g := 0; g < 4; g++ {
			t := 55 + g
			if g == 3 {
				t = 60 + 24*r/n
			}
			rd.GPUs = append(rd.GPUs, selftest.SoakGPU{GPU: g, TemperatureC: &t})
		}
		series = append(series, rd)
	}
	return selftest.NewSoakPlot(series, 1, selftest.SoakMaxPoints)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./netboot/soakplot -update rewrites it):\n%s", name, got)
	}
}

// wellFormed decodes the SVG as XML to its end.
func wellFormed(t *testing.T, svg string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
}

func TestPlotGolden(t *testing.T) {
	for _, tc := range []struct {
		name                string
		plot                selftest.SoakPlot
		pairs, temps, fault int // polylines and fault markers
	}{
		{"drift-and-fault", soak(200, 120, 150), 12, 4, 1},
		{"healthy-short", soak(6, 0, 0), 12, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bw, temp := Bandwidth(tc.plot), Temperature(tc.plot)
			for _, svg := range []string{bw, temp} {
				wellFormed(t, svg)
			}
			if n := strings.Count(bw, `<polyline class="pair"`); n != tc.pairs {
				t.Errorf("%d pair lines, want %d", n, tc.pairs)
			}
			if n := strings.Count(temp, `<polyline class="temp"`); n != tc.temps {
				t.Errorf("%d temperature lines, want %d", n, tc.temps)
			}
			if n := strings.Count(bw, `<line class="fault"`); n != tc.fault {
				t.Errorf("%d fault markers, want %d", n, tc.fault)
			}
			if again := Bandwidth(tc.plot) + Temperature(tc.plot); again != bw+temp {
				t.Error("the same plot drew different bytes")
			}
			golden(t, tc.name+".svg.golden", bw+"\n"+temp+"\n")
		})
	}
}

func TestPlotEmpty(t *testing.T) {
	if s := Bandwidth(selftest.NewSoakPlot(nil, 1, selftest.SoakMaxPoints)) + Temperature(selftest.SoakPlot{}); s != "" {
		t.Errorf("an empty plot drew %q", s)
	}
	// A GPU-less soak's NVML answered nothing: no temperature chart, bandwidth still.
	p := soak(4, 0, 0)
	for i := range p.Points {
		p.Points[i].TempC = nil
	}
	if Temperature(p) != "" || Bandwidth(p) == "" {
		t.Error("without temperatures: want only the bandwidth chart")
	}
	if !bytes.Contains([]byte(Bandwidth(p)), []byte(`data-pair="0-&gt;1"`)) {
		t.Error("the pair's name is not escaped in its attribute")
	}
}

func TestElapsed(t *testing.T) {
	for ms, want := range map[int64]string{0: "0", 45000: "45 s", 12*60000 + 5: "12 min", 3*3600000 + 5*60000: "3 h 05", 12 * 3600000: "12 h 00"} {
		if got := Elapsed(ms); got != want {
			t.Errorf("Elapsed(%d) = %q, want %q", ms, got, want)
		}
	}
}
