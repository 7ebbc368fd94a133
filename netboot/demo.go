package netboot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/verdict"
)

// Fixture reports: what the two GPU recipes' nodes report, made up but shaped like a
// real boot (the topology of the platform, RTX 4090 copy rates, an NCCL sweep). The
// demo seeds its throwaway database with them and the tests draw pages from them.

// DemoPlatform selects a fixture.
type DemoPlatform int

const (
	// Xeon8GPU is recipes/xeon-8gpu.toml: 2 sockets, 4 GPUs behind two PCIe switches each.
	Xeon8GPU DemoPlatform = iota
	// Epyc4GPU is recipes/epyc-4gpu.toml: one socket, a root port per GPU.
	Epyc4GPU
)

// DemoReport makes a fixture report: the measurements a boot of the platform takes,
// judged by the self-test's own rules (selftest/verdict) against what the platform's
// recipe promises (demoExpect), so its findings are the ones a real boot would get.
// boot varies the measurements slightly; broken corrupts the copy-engine write from
// GPU 5 to GPU 6 (8-GPU only), which fails the verdict.
func DemoReport(p DemoPlatform, boot int, broken bool) *selftest.Report {
	r := demoMeasured(p, boot, broken)
	verdict.Judge(r, demoExpect(p))
	return r
}

// demoDriver is the driver the demo nodes run.
const demoDriver = "550.163.01"

// demoExpect is what recipes/xeon-8gpu.toml and recipes/epyc-4gpu.toml promise (the
// demo test checks it against the files): RTX 4090 48G with 32 GiB BAR1, the
// dynamic-BAR1 driver, P2P required, Gen4 thresholds by topology class.
func demoExpect(p DemoPlatform) *verdict.Expect {
	n, numaNodes, busbw := 8, []int{0, 0, 0, 0, 1, 1, 1, 1}, 10.0
	if p == Epyc4GPU {
		n, numaNodes, busbw = 4, []int{0, 0, 0, 0}, 12.0
	}
	th := verdict.Threshold{UnidirGBps: 18, BidirGBps: 32, MaxLatencyUS: 5}
	return &verdict.Expect{
		GPUs: n, GPUModel: "RTX 4090", VRAMBytes: 49140 << 20, BAR1Bytes: 32 << 30, GPUNUMA: numaNodes,
		DriverVersion: demoDriver, P2P: verdict.P2PDynamicBAR1,
		DriverParams: map[string]map[string]string{"nvidia": {"NVreg_EnableResizableBar": "1"}},
		RequireP2P:   true, MinBusBWGBps: busbw,
		Thresholds: map[string]verdict.Threshold{
			selftest.TopoPIX: th, selftest.TopoPXB: th, selftest.TopoPHB: th, selftest.TopoNODE: th,
			selftest.TopoSYS: {UnidirGBps: 15, BidirGBps: 25, MaxLatencyUS: 6},
		},
	}
}

// demoMeasured is what p2pcheck measures on the demo box, before any rule runs.
func demoMeasured(p DemoPlatform, boot int, broken bool) *selftest.Report {
	r := selftest.New()
	n, recipe := 8, "xeon-8gpu"
	if p == Epyc4GPU {
		n, recipe = 4, "epyc-4gpu"
	}
	r.Recipe = selftest.RecipeRef{Name: recipe, Digest: "sha256:" + hexOf(recipe), DriverVersion: demoDriver}
	r.Kernel = selftest.Kernel{Release: "6.12.57-peerboot", Cmdline: "console=ttyS0,115200 panic=-1 iommu=pt pci=realloc"}
	r.StartedAt = time.Date(2026, 11, 20, 8, boot, 0, 0, time.UTC).Format(time.RFC3339)
	r.Tool = "p2pcheck demo"
	r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS"}, DriverVersion: demoDriver, CUDAVersion: 12040}
	r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &selftest.Status{Name: "CUDA_SUCCESS"}, DriverVersion: 12040,
		PTX: &selftest.Status{Name: "CUDA_SUCCESS"}}
	r.Modules = []selftest.Module{{Name: "nvidia", Result: selftest.ModLoaded, Params: "NVreg_EnableResizableBar=1", KernelLog: []string{}, Version: demoDriver}}
	const vramBytes, bar1Bytes = int64(49140 << 20), int64(32 << 30)
	vram := vramBytes
	for i := 0; i < n; i++ {
		bus := 0x01 + i*0x10
		if p == Xeon8GPU && i >= 4 {
			bus = 0x81 + (i-4)*0x10
		}
		bdf := fmt.Sprintf("0000:%02x:00.0", bus)
		r.GPUs = append(r.GPUs, selftest.GPU{
			BDF: bdf, Vendor: "0x10de", Device: "0x2684", Class: "0x030000",
			NUMANode: numa(p, i), BAR1Bytes: bar1Bytes, VRAMBytes: &vram, IOMMUGroup: 20 + i,
			// The patched driver's own line: BAR1 (32 GiB) below VRAM (48 GiB) takes the
			// dynamic windows, as on the seeds' boxes.
			P2PMode:     selftest.P2PModeDynamic,
			P2PModeLine: fmt.Sprintf("NVRM: peerboot-p2p: bar1-mode gpu=%d pci=%s chip=AD102 bar1_mib=%d fb_mib=%d mode=dynamic why=bar1-below-fb", i, bdf, bar1Bytes>>20, vramBytes>>20),
			Link:        selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16},
			NVML: &selftest.NVMLGPU{Name: "NVIDIA GeForce RTX 4090", BAR1Total: bar1Bytes, BAR1Used: 2 << 20, FBTotal: vramBytes,
				LinkGen: 4, LinkWidth: 16, MaxLinkGen: 4, MaxLinkWidth: 16},
		})
		r.CUDA.Devices = append(r.CUDA.Devices, selftest.CUDADevice{Ordinal: i, Name: "NVIDIA GeForce RTX 4090", BDF: bdf, CC: "8.9", SMs: 128, MemBytes: vramBytes})
		after := int64(2 << 20)
		r.BAR1 = append(r.BAR1, selftest.BAR1Usage{GPU: i, Total: bar1Bytes, UsedBefore: 2 << 20, UsedAfter: &after})
	}
	yes := true
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			t := topo(p, a, b)
			r.Pairs = append(r.Pairs, selftest.Pair{A: a, B: b, Topology: t, NVMLTopology: t, P2PRead: "OK", P2PWrite: "OK", CanAccessPeer: &yes, Path: []string{}, ACSOn: []string{}})
		}
	}
	// BAR1 (32 GiB) is below VRAM (48 GiB): p2pcheck places a buffer above the BAR1 size
	// on every GPU and copies into and out of it from a peer.
	for i := 0; i < n; i++ {
		r.HighMem = append(r.HighMem, selftest.HighMem{GPU: i, Peer: (i + 1) % n, BAR1Bytes: bar1Bytes, VRAMBytes: vramBytes,
			BallastMiB: 33792, BufferVA: fmt.Sprintf("0x7f%02x00000000", i), Verified: true,
			Guarantee: "virtual placement only: the driver may back the buffer anywhere in VRAM"})
	}
	const copyBytes = 256 << 20
	for s := 0; s < n; s++ {
		r.Copies = append(r.Copies, selftest.Copy{Src: s, Dst: s, Method: selftest.MethodCE, Direction: selftest.DirLocal, Bytes: copyBytes,
			GBps: round1(905 + jitter(boot, s, s)*20), Samples: []float64{}, Verified: true})
		for d := 0; d < n; d++ {
			if s == d {
				continue
			}
			g := rate(topo(p, min(s, d), max(s, d))) * (1 + 0.03*jitter(boot, s, d))
			c := selftest.Copy{Src: s, Dst: d, Method: selftest.MethodCE, Direction: selftest.DirWrite, Bytes: copyBytes,
				GBps: round1(g), Samples: []float64{round1(g * 0.99), round1(g), round1(g * 1.01)}, LinkGBps: 31.5, Verified: true}
			if broken && s == 5 && d == 6 {
				// The last 4 KiB page of the destination came back zero: the shape of a
				// peer write that went through a stale mapping.
				c.Verified = false
				c.Mismatch = &selftest.Mismatch{Offset: copyBytes - 4096, Want: 0x5a5a0000, Got: 0, Words: 1024}
			}
			r.Copies = append(r.Copies, c)
		}
	}
	nccl := &selftest.NCCL{Library: "libnccl.so.2", Version: 22304, Ranks: n, Env: map[string]string{"NCCL_P2P_LEVEL": "SYS"}}
	peak := 21.0
	if p == Epyc4GPU {
		peak = 23.5
	}
	for b := int64(1 << 20); b <= 1<<30; b <<= 1 {
		// A saturating curve: small messages are latency-bound.
		bw := round2(peak * (1 - math.Exp(-float64(b)/float64(24<<20))) * (1 + 0.01*jitter(boot, int(b>>20), 0)))
		nccl.Sizes = append(nccl.Sizes, selftest.NCCLSize{Bytes: b, TimeUS: round1(float64(b) / (bw * 1e9 * float64(n) / float64(2*(n-1))) * 1e6), AlgBW: round2(bw * float64(n) / float64(2*(n-1))), BusBW: bw})
		for i := 0; i < n; i++ {
			if b == 1<<20 {
				nccl.Transports = append(nccl.Transports, selftest.Transport{From: i, To: (i + 1) % n, Via: "P2P/direct pointer", P2P: true})
			}
		}
	}
	nccl.BusBWAtMax = nccl.Sizes[len(nccl.Sizes)-1].BusBW
	r.NCCL = nccl
	r.Durations = []selftest.Duration{{Phase: selftest.PhaseModules, MS: 2210}, {Phase: selftest.PhasePrecheck, MS: 180},
		{Phase: selftest.PhaseNVML, MS: 950}, {Phase: selftest.PhaseCUDA, MS: 14200 + int64(n)*900}, {Phase: selftest.PhaseNCCL, MS: 9800}}
	return r
}

func numa(p DemoPlatform, i int) int {
	if p == Xeon8GPU && i >= 4 {
		return 1
	}
	return 0
}

func topo(p DemoPlatform, a, b int) string {
	if p == Epyc4GPU {
		if a/2 == b/2 {
			return selftest.TopoPHB
		}
		return selftest.TopoNODE
	}
	switch {
	case a/4 != b/4:
		return selftest.TopoSYS
	case a/2 == b/2:
		return selftest.TopoPIX
	default:
		return selftest.TopoNODE
	}
}

func rate(t string) float64 {
	switch t {
	case selftest.TopoPIX:
		return 25.8
	case selftest.TopoPXB, selftest.TopoPHB:
		return 24.9
	case selftest.TopoNODE:
		return 22.4
	}
	return 15.7
}

// jitter is a fixed pseudo-random number in [-1, 1] per (boot, a, b).
func jitter(boot, a, b int) float64 {
	h := sha256.Sum256([]byte(fmt.Sprint(boot, a, b)))
	return float64(int(h[0])-128) / 128
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
func round2(v float64) float64 { return math.Round(v*100) / 100 }

func hexOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// SeedDemo stores fixture histories for two made-up nodes: an 8-GPU node whose latest
// boot fails after a passing one, and a 4-GPU node that passes twice.
func SeedDemo(ctx context.Context, st fleetdb.Store, now time.Time) error {
	nodes := []struct {
		id, host, serial string
		p                DemoPlatform
		broken           []bool
	}{
		{"02:00:00:00:08:01", "demo-xeon-8gpu", "DEMO8GPU01", Xeon8GPU, []bool{false, true}},
		{"02:00:00:00:04:01", "demo-epyc-4gpu", "DEMO4GPU01", Epyc4GPU, []bool{false, false}},
	}
	if err := seedBurnIn(ctx, st, now); err != nil {
		return err
	}
	for _, n := range nodes {
		for i, broken := range n.broken {
			at := now.Add(time.Duration(i-len(n.broken)) * time.Hour)
			if err := st.RecordBoot(ctx, fleetdb.Boot{NodeID: n.id, MAC: n.id, Hostname: n.host, Serial: n.serial, Recipe: "demo", Build: "demo", Remote: "demo", At: at}); err != nil {
				return err
			}
			body, err := selftest.Encode(DemoReport(n.p, i, broken))
			if err != nil {
				return err
			}
			// The demo goes through the validation every report POSTed to serve passes.
			rep, err := selftest.Decode(body)
			if err != nil {
				return fmt.Errorf("demo report for %s: %w", n.id, err)
			}
			sum := sha256.Sum256(body)
			sr := &fleetdb.StoredReport{NodeID: n.id, ReceivedAt: at.Add(5 * time.Minute), Recipe: rep.Recipe.Name, Build: "demo",
				Verdict: rep.Verdict, SHA256: hex.EncodeToString(sum[:]), Remote: "demo", Body: body}
			fleetdb.Summarize(sr, rep)
			_, err = st.AddReport(ctx, sr)
			if err != nil && err != fleetdb.ErrDuplicate {
				return err
			}
		}
	}
	return nil
}

// DemoBurnIn is serve --demo's third node: a 4-GPU box three hours into a
// 12-hour burn-in, with no report yet.
const DemoBurnIn = "02:00:00:00:04:02"

func seedBurnIn(ctx context.Context, st fleetdb.Store, now time.Time) error {
	const rounds = 360 // 3 h of 30-second rounds
	if err := st.RecordBoot(ctx, fleetdb.Boot{NodeID: DemoBurnIn, MAC: DemoBurnIn, Hostname: "demo-4090-48g-burnin", Serial: "DEMO4090B1",
		Recipe: "demo", Build: "demo", Remote: "demo", At: now.Add(-3 * time.Hour)}); err != nil {
		return err
	}
	body, err := DemoSoakProgress(selftest.SoakRunning, rounds, 0)
	if err != nil {
		return err
	}
	// Through the parser every progress POSTed to serve passes.
	p, err := selftest.DecodeSoakProgress(body)
	if err != nil {
		return fmt.Errorf("demo burn-in progress: %w", err)
	}
	return st.SetProgress(ctx, fleetdb.Progress{NodeID: DemoBurnIn, ReceivedAt: now.Add(-time.Minute), Recipe: "demo", Build: "demo", Remote: "demo",
		State: p.State, ElapsedMS: p.ElapsedMS, RequestedMS: p.RequestedMS, Rounds: p.Rounds, Faulty: p.FaultyRounds, FirstFault: firstFault(p), Body: body})
}

// DemoSoakSeries is n 30-second rounds of a 4-GPU soak cycling four sizes, every GPU at
// 60 °C rising to 80, GPU0->GPU1 at half its rate from round slowFrom (0: never) and
// a corrupted GPU2->GPU3 copy in round bad (0: none).
func DemoSoakSeries(n, slowFrom, bad int) []selftest.SoakRound {
	const full = 256 << 20
	sizes := []int64{full, full / 4, full / 16, full/2 + 592}
	var out []selftest.SoakRound
	for r := 1; r <= n; r++ {
		rd := selftest.SoakRound{Round: r, AtMS: int64(r-1) * 30000, Bytes: sizes[(r-1)%4], Seed: uint32(r)*0x01000193 | 1, Events: []selftest.KEvent{}}
		for s := 0; s < 4; s++ {
			for d := 0; d < 4; d++ {
				g := 25.0 - float64((s+d)%3)
				if s == d {
					g = 900
				}
				if s == 0 && d == 1 && slowFrom > 0 && r >= slowFrom {
					g /= 2
				}
				c := selftest.SoakCopy{Src: s, Dst: d, Method: selftest.MethodCE, Direction: selftest.DirWrite, GBps: g, Verified: true}
				if r == bad && s == 2 && d == 3 {
					c.Verified, c.Mismatch = false, &selftest.Mismatch{Offset: 4096, Got: 1, Want: 2, Words: 1}
				}
				rd.Copies = append(rd.Copies, c)
			}
		}
		for g := 0; g < 4; g++ {
			t, sm, mem, mw, thr := 60+20*r/n+g, 2520, 10501, 290000+1000*g, uint64(0)
			rd.GPUs = append(rd.GPUs, selftest.SoakGPU{GPU: g, LinkGen: 4, LinkWidth: 16, ReplayCounter: 0, TemperatureC: &t, SMClockMHz: &sm, MemClockMHz: &mem, PowerMW: &mw, ThrottleReasons: &thr})
		}
		out = append(out, rd)
	}
	return out
}

// DemoSoakProgress is a progress document as p2pcheck writes it, n rounds into a
// 12 h soak, GPU0->GPU1 at half its rate for the last third, round bad's
// GPU2->GPU3 copy corrupted (0: none): serve --demo's node burning in, and the
// tests'.
func DemoSoakProgress(state string, n, bad int) ([]byte, error) {
	series := DemoSoakSeries(n, n*2/3+1, bad)
	p := &selftest.SoakProgress{Schema: selftest.SoakProgressSchema, State: state, RequestedMS: 12 * 3600000, ElapsedMS: int64(n) * 30000, Rounds: n,
		Pairs: []selftest.SoakPairNow{}, GPUs: series[n-1].GPUs, Plot: selftest.NewSoakPlot(series, 1, selftest.SoakMaxPoints)}
	// Each pair's first and latest figure at the largest size, as p2pcheck's tracker has them.
	var first, last []float64
	for _, pt := range p.Plot.Points {
		if pt.GBps != nil {
			if first == nil {
				first = pt.GBps
			}
			last = pt.GBps
		}
	}
	for j, k := range p.Plot.Pairs {
		p.Pairs = append(p.Pairs, selftest.SoakPairNow{Src: k.Src, Dst: k.Dst, Bytes: 256 << 20, StartGBps: first[j], NowGBps: last[j]})
	}
	if bad > 0 {
		at := time.Duration(bad-1) * 30 * time.Second
		p.FaultyRounds, p.FirstFault = 1, fmt.Sprintf("round %d at T+%d:%02d:%02d: GPU2->GPU3 ce write of 256 MiB: word at byte 4096 was 0x00000001, want 0x00000002 (1 words wrong)",
			bad, int(at.Hours()), int(at.Minutes())%60, int(at.Seconds())%60)
	}
	return selftest.EncodeSoakProgress(p)
}
