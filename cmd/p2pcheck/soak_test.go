package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

// The soak (--soak, docs/burn-in.md) over the FAKE backend: the scenario's Soak steps
// change raw answers from a round on (a rate, a flipped word, NVML's link width, a
// kernel line) and the real rounds, tracker and findings have to find them, naming the
// pair, the round and the time. Rounds are bounded with --soak-rounds so the tests do
// not depend on how fast this machine runs them; the duration is long.
func TestSoakFAKE(t *testing.T) {
	testguard.Short(t, "FAKE soaks run dozens of phase processes")
	for _, tc := range soakCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, code := runFault(t, tc)
			if r.Soak == nil {
				t.Fatalf("FAKE: no soak in the report; findings %v", all(r))
			}
			t.Logf("FAKE %s: %d rounds, stopped %s %s, stride %d, %d series entries; findings %v", tc.name, r.Soak.Rounds, r.Soak.Stopped, r.Soak.StoppedAt, r.Soak.Stride, len(r.Soak.Series), all(r))
			for _, w := range tc.want {
				if !slices.ContainsFunc(all(r), func(f string) bool { return strings.HasPrefix(f, w+":") }) {
					t.Errorf("FAKE: want finding %q, got %v", w, all(r))
				}
			}
			for _, m := range tc.msg {
				found := false
				for _, f := range r.Findings {
					found = found || strings.Contains(f.Message, m)
				}
				if !found {
					t.Errorf("FAKE: no finding says %q; got %v", m, r.Findings)
				}
			}
			if tc.pass != (r.Verdict == selftest.Pass) || tc.pass != (code == exitPass) {
				t.Errorf("FAKE: verdict %s exit %d, want pass=%v; failing %v", r.Verdict, code, tc.pass, failing(r))
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// soakArgs are every soak case's flags: long duration, bounded rounds, no all-reduce
// unless a case asks (each round would be another process).
func soakArgs(rounds string, more ...string) []string {
	return append([]string{"--soak", "1h", "--soak-rounds", rounds}, more...)
}

func soakCases() []faultCase {
	return []faultCase{
		{
			name: "soak-healthy", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
			args: soakArgs("8"),
			check: func(t *testing.T, r *selftest.Report) {
				s := r.Soak
				if s.Rounds != 8 || s.Stopped != "rounds" || len(s.Series) != 8 || s.Stride != 1 {
					t.Errorf("FAKE: rounds %d stopped %q series %d stride %d, want 8, rounds, 8, 1", s.Rounds, s.Stopped, len(s.Series), s.Stride)
				}
				seeds := map[uint32]bool{}
				sizes := map[int64]bool{}
				for _, rd := range s.Series {
					seeds[rd.Seed], sizes[rd.Bytes] = true, true
					if rd.Error != "" || len(rd.Copies) == 0 || len(rd.GPUs) != 4 {
						t.Errorf("FAKE: round %d: error %q, %d copies, %d NVML samples", rd.Round, rd.Error, len(rd.Copies), len(rd.GPUs))
					}
					for _, c := range rd.Copies {
						if !c.Verified {
							t.Errorf("FAKE: round %d: %+v not verified", rd.Round, c)
						}
					}
					if rd.AllReduce == nil || rd.AllReduce.Wrong != 0 || rd.AllReduce.Sizes < 2 {
						t.Errorf("FAKE: round %d: all-reduce %+v, want a checked sweep", rd.Round, rd.AllReduce)
					}
				}
				if len(seeds) != 8 || len(sizes) < 3 {
					t.Errorf("FAKE: %d seeds and %d sizes over 8 rounds, want a new pattern every round and at least 3 sizes", len(seeds), len(sizes))
				}
				if out := selftest.Render(r); !strings.Contains(out, "Soak (burn-in)\n  8 rounds in ") || !strings.Contains(out, "GPU0->GPU1 ce write") {
					t.Errorf("FAKE: the rendered report has no soak summary:\n%s", out)
				}
				for _, p := range s.Pairs {
					if p.Verified != p.Rounds || p.Rounds == 0 {
						t.Errorf("FAKE: pair %+v: not every round verified", p)
					}
				}
			},
		},
		{
			// GPU0->GPU1 at half its rate from round 13 of 24: every size's last three
			// rounds are slow, its first three are not. Without a recipe there is no
			// floor: a warning.
			name: "soak-drift", layout: pcietest.EPYC4GPU, pass: true,
			args: soakArgs("24", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				slow := clonePairs(s.Box.PairGBps)
				for i := range slow {
					for j := range slow[i] {
						slow[i][j] = 0
					}
				}
				slow[0][1] = s.Box.PairGBps[0][1] / 2
				s.Soak = []gpufake.SoakStep{{Round: 13, PairGBps: slow}}
			},
			want: []string{"warn soak.drift"},
			msg:  []string{"GPU0->GPU1 ce write fell 50 % over the soak"},
			check: func(t *testing.T, r *selftest.Report) {
				for _, f := range r.Findings {
					// GPU1->GPU0 bidir carries GPU0->GPU1 too.
					if f.ID == "soak.drift" && !strings.HasPrefix(f.Subject, "GPU0->GPU1") && f.Subject != "GPU1->GPU0 ce bidir" {
						t.Errorf("FAKE: drift on %s, only GPU0->GPU1 slowed", f.Subject)
					}
				}
				// report show's time series: GPU0->GPU1 at full height, then half; GPU1->GPU0 level.
				out := selftest.Render(r)
				line := func(prefix string) string { // the last: the summary table above has the same names
					last := ""
					for _, l := range strings.Split(out, "\n") {
						if strings.HasPrefix(l, prefix) {
							last = l
						}
					}
					return last
				}
				// Columns are of equal time: on a loaded machine rounds come unevenly and
				// some columns hold none (a blank), so the step is looked for without them.
				if slow, level := line("  GPU0->GPU1 ce write  "), line("  GPU1->GPU0 ce write  "); !strings.Contains(out, "  Over time: rounds 1 to 24") ||
					!strings.Contains(strings.ReplaceAll(slow, " ", ""), "█▄") || strings.Contains(level, "▄") || level == "" {
					t.Errorf("FAKE: report show's series does not show GPU0->GPU1 halving:\n%s\n%s\n%s", slow, level, out)
				}
			},
		},
		{
			// The same under the recipe: 11.8 GB/s at the end is below its 18 GB/s
			// floor, a failure naming the pair (and the drift warning beside it).
			name: "soak-drift-below-floor", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			args: soakArgs("24", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				slow := clonePairs(s.Box.PairGBps)
				for i := range slow {
					for j := range slow[i] {
						slow[i][j] = 0
					}
				}
				slow[0][1] = s.Box.PairGBps[0][1] / 2
				s.Soak = []gpufake.SoakStep{{Round: 13, PairGBps: slow}}
			},
			want: []string{"fail soak.floor", "warn soak.drift"},
			msg:  []string{"GPU0->GPU1 ce write ran 11.8 GB/s at the end of the soak, below the"},
			check: func(t *testing.T, r *selftest.Report) {
				for _, f := range r.Findings {
					if f.ID == "soak.floor" && !strings.HasPrefix(f.Subject, "GPU0->GPU1") && f.Subject != "GPU1->GPU0 ce bidir" {
						t.Errorf("FAKE: floor on %s, only GPU0->GPU1 slowed", f.Subject)
					}
				}
			},
		},
		{
			// One flipped word in GPU2->GPU3's copy in round 5: the soak stops there.
			name: "soak-corrupt-round-5", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			args: soakArgs("12", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				s.Soak = []gpufake.SoakStep{{Round: 5, Faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "2->3", Method: "ce", Offset: 4096}}}}
			},
			want: []string{"fail soak.corrupt"},
			msg:  []string{"delivered wrong data in round 5 (T+0:00:"},
			check: func(t *testing.T, r *selftest.Report) {
				if r.Soak.Rounds != 5 || r.Soak.Stopped != "failure" || !strings.Contains(r.Soak.StoppedAt, "GPU2->GPU3") {
					t.Errorf("FAKE: soak ran %d rounds, stopped %q at %q; want it to stop in round 5 naming GPU2->GPU3", r.Soak.Rounds, r.Soak.Stopped, r.Soak.StoppedAt)
				}
				for _, f := range r.Findings {
					if f.ID == "soak.corrupt" && !strings.Contains(f.Evidence, "1 words wrong") {
						t.Errorf("FAKE: corruption evidence %q, want the one flipped word", f.Evidence)
					}
				}
			},
		},
		{
			// The test hook at a chosen round (what the H200 proof uses).
			name: "soak-inject-round-3", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			args: soakArgs("6", "--no-nccl", "--soak-inject-corruption", "3"),
			want: []string{"fail soak.corrupt"},
			msg:  []string{"in round 3 ("},
		},
		{
			// GPU1's link retrains from x16 to x8 in round 4; the replay counter of GPU2
			// rises from round 2 (a warning alone).
			name: "soak-link-drop", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			args: soakArgs("10", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				narrow := s.NVML.GPUs[1]
				narrow.LinkWidth = 8
				noisy := s.NVML.GPUs[2]
				noisy.Replay = 17
				s.Soak = []gpufake.SoakStep{{Round: 2, NVMLGPUs: []gpufake.FakeNVMLGPU{noisy}}, {Round: 4, NVMLGPUs: []gpufake.FakeNVMLGPU{narrow}}}
			},
			want: []string{"fail soak.link", "warn soak.replay"},
			msg:  []string{"GPU1's PCIe link retrained from Gen4 x16 to Gen4 x8 by round 4", "GPU2's PCIe replay counter rose from 0 to 17, first in round 2"},
			check: func(t *testing.T, r *selftest.Report) {
				if r.Soak.Rounds != 4 || r.Soak.Stopped != "failure" {
					t.Errorf("FAKE: soak ran %d rounds, stopped %q; want a stop in round 4", r.Soak.Rounds, r.Soak.Stopped)
				}
			},
		},
		{
			// GPU3 heats up: 62 °C and no reason, then from round 5 at 91 °C with HW and SW
			// thermal slowdown (and its SM clock down): a warning naming round 5. GPU0
			// sits at its power cap throughout: information only.
			name: "soak-thermal-throttle", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml", pass: true,
			args: soakArgs("8", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, _ *pcie.Result) {
				u32 := func(v uint32) *uint32 { return &v }
				u64 := func(v uint64) *uint64 { return &v }
				for i := range s.NVML.GPUs {
					g := &s.NVML.GPUs[i]
					g.TempC, g.SMClockMHz, g.MemClockMHz, g.PowerMW, g.ThrottleReasons = u32(62), u32(2520), u32(10501), u32(300000), u64(0)
				}
				s.NVML.GPUs[0].ThrottleReasons = u64(0x4)
				hot := s.NVML.GPUs[3]
				hot.TempC, hot.SMClockMHz, hot.ThrottleReasons = u32(91), u32(1410), u64(0x20|0x40)
				s.Soak = []gpufake.SoakStep{{Round: 5, NVMLGPUs: []gpufake.FakeNVMLGPU{hot}}}
			},
			want: []string{"warn soak.throttle", "info soak.power_cap"},
			msg:  []string{"GPU3's clocks were held down (SW thermal slowdown, HW thermal slowdown) in 4 samples, first in round 5", "at 91 °C (hottest sample 91 °C)", "GPU0 ran at its power cap in 8 samples, first in round 1"},
			check: func(t *testing.T, r *selftest.Report) {
				g := r.Soak.Series[len(r.Soak.Series)-1].GPUs[3]
				if g.TemperatureC == nil || *g.TemperatureC != 91 || g.SMClockMHz == nil || *g.SMClockMHz != 1410 || g.PowerMW == nil || *g.PowerMW != 300000 {
					t.Errorf("FAKE: last sample of GPU3 %+v, want 91 °C, 1410 MHz, 300 W", g)
				}
				for _, f := range r.Findings {
					if f.ID == "soak.throttle" && f.Subject != "GPU3" {
						t.Errorf("FAKE: throttling on %s, only GPU3 ran hot", f.Subject)
					}
				}
			},
		},
		{
			// An Xid in round 3: the kernel finding fails it, the soak finding says when.
			name: "soak-xid", layout: pcietest.EPYC4GPU, recipe: "epyc-dynamic.toml",
			args: soakArgs("8", "--no-nccl"),
			mutate: func(t *testing.T, s *gpufake.Scenario, pre *pcie.Result) {
				s.Soak = []gpufake.SoakStep{{Round: 3, Kmsg: []string{"3,900,1,-;NVRM: Xid (PCI:" + pre.GPUs[1].BDF + "): 79, pid=1, GPU has fallen off the bus."}}}
			},
			want: []string{"fail kernel.xid", "fail soak.kernel"},
			msg:  []string{"kernel log xid event in round 3"},
		},
	}
}

func clonePairs(m [][]float64) [][]float64 {
	out := make([][]float64, len(m))
	for i, row := range m {
		out[i] = append([]float64(nil), row...)
	}
	return out
}

// TestSoakSeries: the series never passes its bound, halves itself, and keeps the
// first round, the last and every faulty one.
func TestSoakSeries(t *testing.T) {
	s := &selftest.Soak{}
	for i := 1; i <= 5000; i++ {
		rd := selftest.SoakRound{Round: i, Copies: []selftest.SoakCopy{{Verified: true}}}
		if i == 777 {
			rd.Copies[0].Verified = false
		}
		s.AddRound(rd)
		if len(s.Series) > selftest.SoakMaxSeries {
			t.Fatalf("round %d: %d entries, bound %d", i, len(s.Series), selftest.SoakMaxSeries)
		}
	}
	if s.Series[0].Round != 1 || s.Series[len(s.Series)-1].Round != 5000 {
		t.Errorf("first %d last %d, want 1 and 5000", s.Series[0].Round, s.Series[len(s.Series)-1].Round)
	}
	if !slices.ContainsFunc(s.Series, func(r selftest.SoakRound) bool { return r.Round == 777 }) {
		t.Error("the faulty round 777 was dropped")
	}
	if s.Stride < 5000/selftest.SoakMaxSeries {
		t.Errorf("stride %d for 5000 rounds in %d entries", s.Stride, selftest.SoakMaxSeries)
	}
}

func TestSoakSizes(t *testing.T) {
	for _, tc := range []struct {
		full int64
		want []int64
	}{
		{256 << 20, []int64{256 << 20, 64 << 20, 16 << 20, 128<<20 + 592}},
		{16 << 10, []int64{16 << 10, 4 << 10, 1 << 10, 8<<10 + 592}},
		{16, []int64{16}},
	} {
		if got := soakSizes(tc.full); !slices.Equal(got, tc.want) {
			t.Errorf("soakSizes(%d) = %v, want %v", tc.full, got, tc.want)
		}
	}
}

// TestSoakInterrupt: Ctrl-C (SIGINT) during an unbounded soak ends it after the round
// in flight with a whole report of the rounds so far, judged as usual.
func TestSoakInterrupt(t *testing.T) {
	testguard.Short(t, "a FAKE soak runs phase processes")
	root := filepath.Join(t.TempDir(), "root")
	if err := pcietest.Build(root, pcietest.EPYC4GPU()); err != nil {
		t.Fatal(err)
	}
	pre, err := pcie.Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	kmsgPath := filepath.Join(t.TempDir(), "kmsg")
	if err := os.WriteFile(kmsgPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Bounded both ways, so a lost signal or a reworded progress line fails the test in
	// minutes instead of running the suite into its timeout: a round cap (the soak then
	// stops "rounds", not "interrupted") and a deadline on the process.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--json", "--fake", writeScenario(t, healthyScenario(t, pre, vram48G)), "--root", root, "--kmsg", kmsgPath,
		"--modules-json", modulesFile(t, selftest.ModLoaded, 0), "--copy-size", "16KiB", "--no-nccl", "--soak", "1h", "--soak-rounds", "200")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(errPipe)
	var said []string
	signalled := false
	for sc.Scan() {
		said = append(said, sc.Text())
		if !signalled && strings.Contains(sc.Text(), "soak round 2 at") {
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	werr := cmd.Wait()
	if !signalled {
		t.Fatalf("FAKE: the soak never reached round 2: %v\n%s", werr, strings.Join(said, "\n"))
	}
	if werr != nil {
		t.Fatalf("FAKE: exit %v after Ctrl-C on a healthy box, want 0\n%s", werr, strings.Join(said, "\n"))
	}
	r, err := selftest.Decode(stdout.Bytes())
	if err != nil {
		t.Fatalf("FAKE: no report after Ctrl-C: %v", err)
	}
	if r.Soak == nil || r.Soak.Stopped != "interrupted" || r.Soak.Rounds < 2 || r.Soak.Rounds > 3 || len(r.Soak.Series) != r.Soak.Rounds {
		t.Fatalf("FAKE: soak after Ctrl-C in round 2: %+v", r.Soak)
	}
	if !slices.ContainsFunc(said, func(l string) bool { return strings.Contains(l, "interrupted: soak ends after round") }) {
		t.Errorf("FAKE: the console was not told: %s", strings.Join(said, "\n"))
	}
}
