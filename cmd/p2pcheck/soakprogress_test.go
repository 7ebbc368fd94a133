package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

func readProgress(t *testing.T, path string) *selftest.SoakProgress {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := selftest.DecodeSoakProgress(b)
	if err != nil {
		t.Fatalf("the progress p2pcheck wrote does not decode: %v\n%s", err, b)
	}
	return p
}

// TestProgressWriterRate: the file is written after the first round, then not again
// until progressEvery has passed, and always at the end.
func TestProgressWriterRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "progress.json")
	now := time.Unix(1e9, 0)
	w := newProgressWriter(path, io.Discard)
	w.now = func() time.Time { return now }
	r := &selftest.Report{Findings: []selftest.Finding{{Status: selftest.SevWarn, ID: "x"}}}
	s := &selftest.Soak{RequestedMS: 3600000, Stride: 1}
	tr := newSoakTracker()
	for _, step := range []struct {
		after  time.Duration
		rounds int // the file's rounds after this round
	}{{0, 1}, {5 * time.Second, 1}, {4 * time.Second, 1}, {2 * time.Second, 4}, {3 * time.Second, 4}} {
		now = now.Add(step.after)
		rd := selftest.SoakRound{Round: s.Rounds + 1, AtMS: int64(s.Rounds) * 1000}
		s.Rounds = rd.Round
		s.AddRound(rd)
		tr.round(&rd)
		w.round(r, s, tr, &rd)
		if p := readProgress(t, path); p.Rounds != step.rounds || p.State != selftest.SoakRunning || p.Warns != 1 {
			t.Errorf("after round %d: progress says %d rounds, %s, %d warns; want %d, running, 1", rd.Round, p.Rounds, p.State, p.Warns, step.rounds)
		}
	}
	s.Stopped = "interrupted"
	w.end(r, s, tr)
	if p := readProgress(t, path); p.Rounds != 5 || p.State != selftest.SoakStopped || p.Message != "stopped: interrupted" || len(p.Plot.Points) != 5 {
		t.Errorf("at the end: %+v, want 5 rounds, stopped, its message and 5 points", p)
	}
	// A file that cannot be written is said once; the soak goes on.
	var stderr strings.Builder
	bad := newProgressWriter(filepath.Join(t.TempDir(), "missing", "p.json"), &stderr)
	bad.end(r, s, tr)
	bad.end(r, s, tr)
	if n := strings.Count(stderr.String(), "--soak-progress:"); n != 1 {
		t.Errorf("an unwritable progress file was reported %d times: %q", n, stderr.String())
	}
}

// TestProgressManyGPUs: a 20-GPU box (380 ordered pairs, every round at one size so
// every point carries every pair) still gets a progress document within its bound,
// with fewer points; 8 GPUs keep them all.
func TestProgressManyGPUs(t *testing.T) {
	for _, tc := range []struct {
		gpus      int
		maxPoints int
		minPoints int
	}{{8, selftest.SoakMaxPoints, selftest.SoakMaxPoints}, {20, selftest.SoakMaxPoints / 2, 16}} {
		path := filepath.Join(t.TempDir(), "progress.json")
		w := newProgressWriter(path, io.Discard)
		s := &selftest.Soak{RequestedMS: 8 * 3600000, Stride: 1}
		tr := newSoakTracker()
		r := &selftest.Report{}
		for round := 1; round <= 600; round++ {
			rd := selftest.SoakRound{Round: round, AtMS: int64(round) * 48000, Bytes: 256 << 20}
			for a := 0; a < tc.gpus; a++ {
				temp := 60 + a
				rd.GPUs = append(rd.GPUs, selftest.SoakGPU{GPU: a, LinkGen: 4, LinkWidth: 16, ReplayCounter: 0, TemperatureC: &temp})
				for b := 0; b < tc.gpus; b++ {
					if a != b {
						rd.Copies = append(rd.Copies, selftest.SoakCopy{Src: a, Dst: b, Method: selftest.MethodCE, Direction: selftest.DirWrite, GBps: 21.123 + float64(a*b)/7, Verified: true})
					}
				}
			}
			s.Rounds = round
			s.AddRound(rd)
			tr.round(&rd)
		}
		s.Stopped = "duration"
		w.end(r, s, tr)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%d GPUs: no progress written: %v", tc.gpus, err)
		}
		p := readProgress(t, path)
		if n := len(p.Plot.Points); n > tc.maxPoints || n < tc.minPoints || len(p.Plot.Pairs) != tc.gpus*(tc.gpus-1) {
			t.Errorf("%d GPUs: %d points of %d pairs, want %d..%d points of %d", tc.gpus, n, len(p.Plot.Pairs), tc.minPoints, tc.maxPoints, tc.gpus*(tc.gpus-1))
		}
		t.Logf("%d GPUs, 600 rounds: %d bytes, %d points", tc.gpus, len(b), len(p.Plot.Points))
	}
}

// TestSoakProgressFAKE runs FAKE soaks with --soak-progress: the file p2pcheck leaves
// is the soak's last state, with the plot's series, sensors and pairs.
func TestSoakProgressFAKE(t *testing.T) {
	testguard.Short(t, "FAKE soaks run dozens of phase processes")
	u32 := func(v uint32) *uint32 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		fc    faultCase
		check func(t *testing.T, p *selftest.SoakProgress)
	}{
		{
			fc: faultCase{name: "progress-hot", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
				args: soakArgs("8", "--no-nccl"),
				mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
					for i := range s.NVML.GPUs {
						g := &s.NVML.GPUs[i]
						g.TempC, g.SMClockMHz, g.MemClockMHz, g.PowerMW, g.ThrottleReasons = u32(62), u32(2520), u32(10501), u32(300000), u64(0)
					}
					hot := s.NVML.GPUs[3]
					hot.TempC, hot.ThrottleReasons = u32(91), u64(0x40)
					s.Soak = []gpufake.SoakStep{{Round: 5, NVMLGPUs: []gpufake.FakeNVMLGPU{hot}}}
				}},
			check: func(t *testing.T, p *selftest.SoakProgress) {
				if p.State != selftest.SoakFinished || p.Rounds != 8 || p.FaultyRounds != 0 || p.Warns < 1 || p.RequestedMS != 3600000 {
					t.Errorf("FAKE: state %s, %d rounds, %d faulty, %d warns, requested %d ms; want finished, 8, 0, the throttle warning, 1 h", p.State, p.Rounds, p.FaultyRounds, p.Warns, p.RequestedMS)
				}
				if len(p.Plot.Points) != 8 || len(p.Plot.GPUs) != 4 || len(p.Plot.Pairs) != 12 {
					t.Fatalf("FAKE: plot of %d points, %d GPUs, %d pairs; want 8, 4, 12", len(p.Plot.Points), len(p.Plot.GPUs), len(p.Plot.Pairs))
				}
				if first, last := p.Plot.Points[0], p.Plot.Points[7]; first.TempC[3] != 62 || last.TempC[3] != 91 || first.GBps == nil {
					t.Errorf("FAKE: GPU3 at %d then %d °C, first point's bandwidth %v; want 62, 91 and figures", first.TempC[3], last.TempC[3], first.GBps)
				}
				if len(p.GPUs) != 4 || p.GPUs[3].TemperatureC == nil || *p.GPUs[3].TemperatureC != 91 {
					t.Errorf("FAKE: GPUs now %+v, want GPU3 at 91 °C", p.GPUs)
				}
				if len(p.Pairs) != 12 || p.Pairs[0].StartGBps <= 0 || p.Pairs[0].NowGBps <= 0 {
					t.Errorf("FAKE: pairs %+v, want 12 with figures", p.Pairs)
				}
			},
		},
		{
			fc: faultCase{name: "progress-corrupt", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
				args: soakArgs("12", "--no-nccl"),
				mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
					s.Soak = []gpufake.SoakStep{{Round: 5, Faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "2->3", Method: "ce", Offset: 4096}}}}
				}},
			check: func(t *testing.T, p *selftest.SoakProgress) {
				if p.State != selftest.SoakFailed || p.Rounds != 5 || p.FaultyRounds != 1 || p.Fails < 1 ||
					!strings.HasPrefix(p.FirstFault, "round 5 at T+0:00:") || !strings.Contains(p.FirstFault, "GPU2->GPU3") {
					t.Errorf("FAKE: state %s, %d rounds, %d faulty, %d fails, first fault %q; want failed in round 5 naming GPU2->GPU3", p.State, p.Rounds, p.FaultyRounds, p.Fails, p.FirstFault)
				}
				if !p.Plot.Points[len(p.Plot.Points)-1].Fault {
					t.Errorf("FAKE: the last point (round 5) is not marked as a fault")
				}
			},
		},
	} {
		t.Run(tc.fc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "progress.json")
			tc.fc.args = append(tc.fc.args, "--soak-progress", path)
			r, _ := runFault(t, tc.fc)
			if r.Soak == nil {
				t.Fatalf("FAKE: no soak; findings %v", all(r))
			}
			tc.check(t, readProgress(t, path))
		})
	}
}
