package selftest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(r *Report)
		want   string // "" = valid
	}{
		{"sample", func(r *Report) {}, ""},
		{"verdict maybe", func(r *Report) { r.Verdict = "maybe" }, `verdict: "maybe", want "pass" or "fail"`},
		{"pass over a fail", func(r *Report) { r.Findings[0].Status = SevFail; r.Verdict = Pass }, "verdict: \"pass\" with a fail finding"},
		{"unknown severity", func(r *Report) { r.Findings[1].Status = "error" }, `findings[1].status: "error"`},
		{"copy from GPU 2000", func(r *Report) { r.Copies[0].Src = 2000 }, "copies[0].src: 2000, want 0..1 (the report has 2 GPUs)"},
		{"pair beyond the GPUs", func(r *Report) { r.Pairs[0].B = 5 }, "pairs[0]: GPUs 0 and 5"},
		{"offset past the copy", func(r *Report) {
			r.Copies[0].Verified, r.Copies[0].Mismatch = false, &Mismatch{Offset: 0x3ffff000, Words: 1024}
		}, "copies[0].mismatch.offset: 0x3ffff000, past the end of the 256MiB copy"},
		{"verified and corrupt", func(r *Report) { r.Copies[0].Mismatch = &Mismatch{Offset: 64, Words: 1} }, "copies[0].verified: true with a mismatch"},
		{"rate beyond physics", func(r *Report) { r.Copies[0].GBps = 1e6 }, "copies[0].gbps: 1e+06 GB/s"},
		{"BAR1 used over total", func(r *Report) { v := int64(64 << 30); r.BAR1[0].UsedAfter = &v }, "bar1[0].used_after"},
		{"several at once", func(r *Report) { r.Verdict = "x"; r.Copies[0].Dst = -1 }, "verdict: \"x\", want \"pass\" or \"fail\"\n  copies[0].dst: -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gpuSample()
			tc.mutate(r)
			err := Validate(r)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("valid report refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := Encode(gpuSample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, body, want string
		notJSON          bool
	}{
		{"empty", "", "empty input", true},
		{"truncated", string(good[:len(good)/2]), "the input ends inside a value", true},
		{"syntax", "{\n  \"schema\": 2,,\n}", "2:16: not JSON: invalid character ','", true},
		{"list", "[1, 2]", "1:2: not a self-test report: want a JSON object, got a list", false},
		{"type", strings.Replace(string(good), `"numa_node": 0`, `"numa_node": "zero"`, 1), "gpus.numa_node: want a whole number, got a string", false},
		{"trailing", string(good) + "{}", "bytes follow the report", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
			if errors.Is(err, ErrNotJSON) != tc.notJSON {
				t.Errorf("errors.Is(ErrNotJSON) = %v, want %v", !tc.notJSON, tc.notJSON)
			}
			if strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "selftest.") {
				t.Errorf("error names Go internals: %v", err)
			}
		})
	}
}

// gpuSample is a two-GPU report that Validate accepts.
func gpuSample() *Report {
	r := sampleReport()
	vram := int64(24 << 30)
	for _, bdf := range []string{"0000:01:00.0", "0000:02:00.0"} {
		r.GPUs = append(r.GPUs, GPU{BDF: bdf, Vendor: "0x10de", Device: "0x2204", BAR1Bytes: 256 << 20, VRAMBytes: &vram,
			Link: Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}})
	}
	r.Pairs = []Pair{{A: 0, B: 1, Topology: TopoPHB, Path: []string{}, ACSOn: []string{}}}
	r.Copies = []Copy{
		{Src: 0, Dst: 1, Method: MethodCE, Direction: DirWrite, Bytes: 256 << 20, GBps: 24.1, Samples: []float64{24, 24.1}, LinkGBps: 31.5, Verified: true},
		{Src: 1, Dst: 0, Method: MethodCE, Direction: DirWrite, Bytes: 256 << 20, GBps: 24.0, Samples: []float64{24}, LinkGBps: 31.5, Verified: true},
	}
	after := int64(5 << 20)
	r.BAR1 = []BAR1Usage{{GPU: 0, Total: 256 << 20, UsedBefore: 5 << 20, UsedAfter: &after}, {GPU: 1, Total: 256 << 20, UsedBefore: 5 << 20}}
	return r
}

// FuzzDecode: whatever Decode accepts is valid, re-encodes to a report that decodes the
// same, and renders at any width without a panic and within a bound (the 34 MB of
// dashes came from an index nobody checked).
func FuzzDecode(f *testing.F) {
	good, _ := Encode(gpuSample())
	vm, _ := Encode(sampleReport())
	f.Add(good, 80)
	f.Add(vm, 40)
	f.Add(bytes.Replace(good, []byte(`"src": 1,`), []byte(`"src": 2000,`), 1), 80)
	f.Add(bytes.Replace(good, []byte(`"verdict": "fail"`), []byte(`"verdict": "maybe"`), 1), 120)
	f.Add([]byte(`{"schema":2,"verdict":"pass","gpus":[{}],"copies":[{"src":0,"dst":0,"mismatch":{"offset":4,"words":1}}]}`), 10)
	f.Add([]byte(`{"schema":2}`), 0)
	f.Add([]byte(`[]`), 80)
	f.Fuzz(func(t *testing.T, b []byte, width int) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		if err := Validate(r); err != nil {
			t.Fatalf("Decode accepted what Validate refuses: %v", err)
		}
		enc, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := Decode(enc)
		if err != nil {
			t.Fatalf("a decoded report does not decode again: %v", err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatal("unstable round trip")
		}
		out := RenderWidth(r, width%400)
		if limit := 64*len(b) + 1<<16; len(out) > limit {
			t.Fatalf("a %d-byte report renders to %d bytes", len(b), len(out))
		}
		_ = Summary(r)
	})
}

// fullSample is gpuSample with every part Validate checks filled in with values at
// the edge of what it accepts.
func fullSample() *Report {
	r := gpuSample()
	r.Findings = append(r.Findings, Finding{ID: "p2p.slow", Status: SevWarn})
	r.CUDA.Devices = []CUDADevice{{Ordinal: 0, BDF: "0000:01:00.0"}, {Ordinal: 1, BDF: "0000:02:00.0"}}
	r.Copies = append(r.Copies,
		Copy{Src: 0, Dst: 0, Method: MethodCE, Direction: DirLocal, GBps: maxGBps, Samples: []float64{0, maxGBps}},
		Copy{Src: 1, Dst: 0, Method: MethodSM, Direction: DirWrite, Bytes: 4096, GBps: 1,
			Mismatch: &Mismatch{Offset: 4092, Words: 1024}}, // the last word; every word
		Copy{Src: 1, Dst: 0, Method: MethodSM, Direction: DirRead, Bytes: 0, Mismatch: &Mismatch{Offset: 1 << 40, Words: 1 << 40}}, // size unknown
	)
	r.Latencies = []Latency{
		{Src: 0, Dst: 0, Bytes: 4, Writes: 100, US: 2, Verified: true},
		{Src: 0, Dst: 1, Bytes: 8, Mismatch: &Mismatch{Offset: 0, Words: 2}},
		{Src: 1, Dst: 0},
	}
	r.HighMem = []HighMem{
		{GPU: 0, Peer: 1, BAR1Bytes: 256 << 20, VRAMBytes: 24 << 30, Verified: true},
		{GPU: 1, Peer: -1, Mismatch: &Mismatch{Offset: 1 << 40, Words: 1}},
	}
	r.PeerMem = []PeerMem{
		{Kind: MemManaged, Owner: 0, Peer: 1, Bytes: 32 << 20, Verified: true},
		{Kind: MemVMM, Owner: 1, Peer: 1},
		{Kind: MemIPC, Owner: 1, Peer: 0, Bytes: 64, Mismatch: &Mismatch{Offset: 60, Words: 16}},
		{Kind: MemCUDAIPC, Owner: 0, Peer: 1},
	}
	r.GPUs[0].P2PMode = P2PModeStatic
	r.GPUs[1].P2PMode = P2PModeNone
	zero := int64(0)
	r.GPUs[1].VRAMBytes = &zero
	r.GPUs[1].BAR1Bytes = 0
	r.GPUs[0].NVML = &NVMLGPU{BAR1Total: 256 << 20, BAR1Used: 256 << 20, FBTotal: 24 << 30}
	r.GPUs[1].NVML = &NVMLGPU{BAR1Used: 5 << 20} // total unknown
	full := int64(256 << 20)
	r.BAR1 = append(r.BAR1, BAR1Usage{GPU: 1, Total: 256 << 20, UsedBefore: 256 << 20, UsedAfter: &full}, BAR1Usage{GPU: 0, UsedBefore: 5 << 20})
	r.NCCL = &NCCL{Ranks: 2, Sizes: []NCCLSize{{Bytes: 1, BusBW: maxGBps, AlgBW: 0}}, BusBWAtMax: 20,
		Transports: []Transport{{From: 0, To: 1}, {From: 1, To: 0}}}
	r.Durations = append(r.Durations, Duration{Phase: PhaseNCCL, MS: 0})
	r.Stall = &Stall{Phase: PhaseNCCL, AfterMS: 0}
	r.Settle()
	return r
}

// Validate's refusals, one at a time, each at the edge of what it accepts: the whole
// message a reader sees (report show, serve's 422), with the key and what is wanted.
func TestValidateEdges(t *testing.T) {
	neg := int64(-1)
	over := int64(256<<20 + 1)
	for _, tc := range []struct {
		name   string
		mutate func(r *Report)
		want   string // the whole error; "" = valid
	}{
		{"full sample", func(r *Report) {}, ""},
		{"verdict pass", func(r *Report) { r.Verdict = Pass }, ""},
		{"empty verdict", func(r *Report) { r.Verdict = "" }, `verdict: "", want "pass" or "fail"`},
		{"fail verdict without a fail finding", func(r *Report) { r.Verdict = Fail }, ""},
		{"finding without id", func(r *Report) { r.Findings[2].ID = "" }, `findings[2].id: empty, want a finding id such as "copy.corrupt"`},
		{"warn finding on a pass", func(r *Report) { r.Findings[0].Status = SevWarn; r.Verdict = Pass }, ""},

		{"64 GPUs", func(r *Report) { r.GPUs = make([]GPU, 64) }, ""},
		{"65 GPUs", func(r *Report) { r.GPUs = make([]GPU, 65) }, "gpus: 65 GPUs, want at most 64"},

		{"pair a = -1", func(r *Report) { r.Pairs[0].A = -1 }, "pairs[0]: GPUs -1 and 1, want 0 <= a < b < 2 (the report has 2 GPUs)"},
		{"pair a = b", func(r *Report) { r.Pairs[0].A = 1 }, "pairs[0]: GPUs 1 and 1, want 0 <= a < b < 2 (the report has 2 GPUs)"},
		{"pair b = n", func(r *Report) { r.Pairs[0].B = 2 }, "pairs[0]: GPUs 0 and 2, want 0 <= a < b < 2 (the report has 2 GPUs)"},

		{"cuda ordinal 63", func(r *Report) { r.CUDA.Devices[1].Ordinal = 63 }, ""},
		{"cuda ordinal 64", func(r *Report) { r.CUDA.Devices[1].Ordinal = 64 }, "cuda.devices[1].ordinal: 64, want 0..63"},
		{"cuda ordinal -1", func(r *Report) { r.CUDA.Devices[0].Ordinal = -1 }, "cuda.devices[0].ordinal: -1, want 0..63"},

		{"copy dst = n", func(r *Report) { r.Copies[1].Dst = 2 }, "copies[1].dst: 2, want 0..1 (the report has 2 GPUs)"},
		// CUDA may list more ordinals than sysfs GPUs: copies are between ordinals.
		{"copy to CUDA's third device", func(r *Report) {
			r.CUDA.Devices = append(r.CUDA.Devices, CUDADevice{Ordinal: 2})
			r.Copies[1].Dst = 2
		}, ""},
		{"copy to a fourth device", func(r *Report) {
			r.CUDA.Devices = append(r.CUDA.Devices, CUDADevice{Ordinal: 2})
			r.Copies[1].Dst = 3
		}, "copies[1].dst: 3, want 0..2 (the report has 3 GPUs)"},
		{"no GPUs known: ordinal 63", func(r *Report) { noGPUs(r); r.Copies = []Copy{{Src: 63, Dst: 0}} }, ""},
		{"no GPUs known: ordinal 64", func(r *Report) { noGPUs(r); r.Copies = []Copy{{Src: 64, Dst: 0}} }, "copies[0].src: 64, want 0..63"},
		{"copy rate NaN", func(r *Report) { r.Copies[0].GBps = math.NaN() }, "copies[0].gbps: NaN GB/s, want 0..10000"},
		{"copy rate negative", func(r *Report) { r.Copies[0].GBps = -0.5 }, "copies[0].gbps: -0.5 GB/s, want 0..10000"},
		{"copy rate over the bound", func(r *Report) { r.Copies[2].GBps = maxGBps * 1.0001 }, "copies[2].gbps: 10001 GB/s, want 0..10000"},
		{"link rate", func(r *Report) { r.Copies[0].LinkGBps = -1 }, "copies[0].link_gbps: -1 GB/s, want 0..10000"},
		{"a sample", func(r *Report) { r.Copies[2].Samples[1] = 2e4 }, "copies[2].samples[1]: 20000 GB/s, want 0..10000"},
		{"copy bytes", func(r *Report) { r.Copies[4].Bytes = -1 }, "copies[4].bytes: -1, want 0 or more"},
		{"offset not a word", func(r *Report) { r.Copies[3].Mismatch.Offset = 4090 }, "copies[3].mismatch.offset: 4090, want a multiple of 4 from 0"},
		{"negative offset", func(r *Report) { r.Copies[3].Mismatch.Offset = -4 }, "copies[3].mismatch.offset: -4, want a multiple of 4 from 0"},
		{"offset at the end", func(r *Report) { r.Copies[3].Mismatch.Offset = 4096 }, "copies[3].mismatch.offset: 0x1000, past the end of the 4096B copy"},
		{"no word wrong", func(r *Report) { r.Copies[3].Mismatch.Words = 0 }, "copies[3].mismatch.words: 0, want 1..1024 (the words in the buffer)"},
		{"more words than the copy", func(r *Report) { r.Copies[3].Mismatch.Words = 1025 }, "copies[3].mismatch.words: 1025, want 1..1024 (the words in the buffer)"},
		{"no word wrong, size unknown", func(r *Report) { r.Copies[4].Mismatch.Words = 0 }, "copies[4].mismatch.words: 0, want 1..1 (the words in the buffer)"},
		{"copy verified and corrupt", func(r *Report) { r.Copies[3].Verified = true }, "copies[3].verified: true with a mismatch, want false: verified means every word matched"},

		{"latency src", func(r *Report) { r.Latencies[2].Src = 2 }, "latencies[2].src: 2, want 0..1 (the report has 2 GPUs)"},
		{"latency dst", func(r *Report) { r.Latencies[2].Dst = -1 }, "latencies[2].dst: -1, want 0..1 (the report has 2 GPUs)"},
		{"latency bytes", func(r *Report) { r.Latencies[2].Bytes = -1 }, "latencies[2]: bytes -1, writes 0, us 0: want 0 or more"},
		{"latency writes", func(r *Report) { r.Latencies[2].Writes = -1 }, "latencies[2]: bytes 0, writes -1, us 0: want 0 or more"},
		{"latency us", func(r *Report) { r.Latencies[2].US = -0.5 }, "latencies[2]: bytes 0, writes 0, us -0.5: want 0 or more"},
		{"latency offset past the write", func(r *Report) { r.Latencies[1].Mismatch.Offset = 8 }, "latencies[1].mismatch.offset: 0x8, past the end of the 8B copy"},
		{"latency words", func(r *Report) { r.Latencies[1].Mismatch.Words = 3 }, "latencies[1].mismatch.words: 3, want 1..2 (the words in the buffer)"},
		{"latency verified and corrupt", func(r *Report) { r.Latencies[1].Verified = true }, "latencies[1].verified: true with a mismatch, want false: verified means every word matched"},

		{"high mem gpu", func(r *Report) { r.HighMem[0].GPU = 2 }, "high_mem[0].gpu: 2, want 0..1 (the report has 2 GPUs)"},
		{"high mem peer", func(r *Report) { r.HighMem[0].Peer = 2 }, "high_mem[0].peer: 2, want 0..1 (the report has 2 GPUs)"},
		{"high mem peer -2", func(r *Report) { r.HighMem[1].Peer = -2 }, "high_mem[1].peer: -2, want 0..1 (the report has 2 GPUs)"},
		{"high mem bar1", func(r *Report) { r.HighMem[0].BAR1Bytes = -1 }, "high_mem[0]: bar1_bytes -1, vram_bytes 25769803776, ballast_mib 0: want 0 or more"},
		{"high mem vram", func(r *Report) { r.HighMem[1].VRAMBytes = -1 }, "high_mem[1]: bar1_bytes 0, vram_bytes -1, ballast_mib 0: want 0 or more"},
		{"high mem ballast", func(r *Report) { r.HighMem[1].BallastMiB = -1 }, "high_mem[1]: bar1_bytes 0, vram_bytes 0, ballast_mib -1: want 0 or more"},
		{"high mem offset", func(r *Report) { r.HighMem[1].Mismatch.Offset = 2 }, "high_mem[1].mismatch.offset: 2, want a multiple of 4 from 0"},
		{"high mem verified and corrupt", func(r *Report) { r.HighMem[1].Verified = true }, "high_mem[1].verified: true with a mismatch, want false: verified means every word matched"},

		{"peer mem owner", func(r *Report) { r.PeerMem[1].Owner = 2 }, "peer_mem[1].owner: 2, want 0..1 (the report has 2 GPUs)"},
		{"peer mem peer", func(r *Report) { r.PeerMem[3].Peer = -1 }, "peer_mem[3].peer: -1, want 0..1 (the report has 2 GPUs)"},
		{"peer mem kind", func(r *Report) { r.PeerMem[1].Kind = "" }, `peer_mem[1].kind: "", want managed, vmm, ipc or cudaipc`},
		{"peer mem bytes", func(r *Report) { r.PeerMem[1].Bytes = -1 }, "peer_mem[1].bytes: -1, want 0 or more"},
		{"peer mem words", func(r *Report) { r.PeerMem[2].Mismatch.Words = 17 }, "peer_mem[2].mismatch.words: 17, want 1..16 (the words in the buffer)"},
		{"peer mem verified and corrupt", func(r *Report) { r.PeerMem[2].Verified = true }, "peer_mem[2].verified: true with a mismatch, want false: verified means every word matched"},

		{"p2p mode", func(r *Report) { r.GPUs[1].P2PMode = "Static" }, `gpus[1].p2p_mode: "Static", want static, dynamic, none or empty`},
		{"p2p mode dynamic", func(r *Report) { r.GPUs[1].P2PMode = P2PModeDynamic }, ""},
		{"negative BAR1", func(r *Report) { r.GPUs[0].BAR1Bytes = -1 }, "gpus[0]: negative BAR1 or VRAM size"},
		{"negative VRAM", func(r *Report) { r.GPUs[1].VRAMBytes = &neg }, "gpus[1]: negative BAR1 or VRAM size"},
		{"NVML BAR1 used over total", func(r *Report) { r.GPUs[0].NVML.BAR1Used++ },
			"gpus[0].nvml: bar1_used 268435457, bar1_total 268435456, fb_total 25769803776: want 0 <= used <= total"},
		{"NVML nothing used", func(r *Report) { r.GPUs[0].NVML.BAR1Used = 0 }, ""},
		{"NVML BAR1 total", func(r *Report) { r.GPUs[1].NVML.BAR1Total = -1 }, "gpus[1].nvml: bar1_used 5242880, bar1_total -1, fb_total 0: want 0 <= used <= total"},
		{"NVML BAR1 used", func(r *Report) { r.GPUs[1].NVML.BAR1Used = -1 }, "gpus[1].nvml: bar1_used -1, bar1_total 0, fb_total 0: want 0 <= used <= total"},
		{"NVML FB total", func(r *Report) { r.GPUs[1].NVML.FBTotal = -1 }, "gpus[1].nvml: bar1_used 5242880, bar1_total 0, fb_total -1: want 0 <= used <= total"},

		{"bar1 gpu", func(r *Report) { r.BAR1[2].GPU = 2 }, "bar1[2].gpu: 2, want 0..1 (the report has 2 GPUs)"},
		{"bar1 gpu, no GPUs", func(r *Report) { noGPUs(r); r.BAR1 = []BAR1Usage{{GPU: 1}} }, "bar1[0].gpu: 1, want 0..0 (the report has 0 GPUs)"},
		{"bar1 used before over total", func(r *Report) { r.BAR1[2].UsedBefore++ }, "bar1[2].used_before: 268435457, want 0..268435456 (total)"},
		{"bar1 used after over total", func(r *Report) { r.BAR1[2].UsedAfter = &over }, "bar1[2].used_after: 268435457, want 0..268435456 (total)"},
		{"bar1 used after negative", func(r *Report) { r.BAR1[3].UsedAfter = &neg }, "bar1[3].used_after: -1, want 0..0 (total)"},
		{"bar1 used before negative", func(r *Report) { r.BAR1[3].UsedBefore = -1 }, "bar1[3].used_before: -1, want 0..0 (total)"},
		{"bar1 nothing used", func(r *Report) { r.BAR1[2].UsedBefore = 0; r.BAR1[2].UsedAfter = new(int64) }, ""},
		{"bar1 total", func(r *Report) { r.BAR1[3].Total = -1 }, "bar1[3].total: -1, want 0 or more"},

		{"nccl 0 ranks", func(r *Report) { r.NCCL.Ranks, r.NCCL.Transports = 0, nil }, ""},
		{"nccl 64 ranks", func(r *Report) { r.NCCL.Ranks = 64 }, ""},
		{"nccl 65 ranks", func(r *Report) { r.NCCL.Ranks = 65 }, "nccl.ranks: 65, want 0..64"},
		{"nccl -1 ranks", func(r *Report) { r.NCCL.Ranks, r.NCCL.Transports = -1, nil }, "nccl.ranks: -1, want 0..64"},
		{"nccl size 0", func(r *Report) { r.NCCL.Sizes[0].Bytes = 0 }, "nccl.sizes[0].bytes: 0, want more than 0"},
		{"nccl busbw", func(r *Report) { r.NCCL.Sizes[0].BusBW = -1 }, "nccl.sizes[0].busbw: -1 GB/s, want 0..10000"},
		{"nccl algbw", func(r *Report) { r.NCCL.Sizes[0].AlgBW = math.NaN() }, "nccl.sizes[0].algbw: NaN GB/s, want 0..10000"},
		{"nccl wrong", func(r *Report) { r.NCCL.Sizes[0].Wrong = -1 }, "nccl.sizes[0].wrong: -1, want 0 or more"},
		{"nccl busbw at max", func(r *Report) { r.NCCL.BusBWAtMax = 1e5 }, "nccl.busbw_at_max: 100000 GB/s, want 0..10000"},
		{"nccl transport from", func(r *Report) { r.NCCL.Transports[1].From = 2 }, "nccl.transports[1].from: 2, want 0..1 (the report has 2 ranks)"},
		{"nccl transport to", func(r *Report) { r.NCCL.Transports[0].To = -1 }, "nccl.transports[0].to: -1, want 0..1 (the report has 2 ranks)"},
		{"nccl transport, no ranks", func(r *Report) { r.NCCL.Ranks = 0; r.NCCL.Transports = []Transport{{From: 0, To: 1}} },
			"nccl.transports[0].to: 1, want 0..0 (the report has 0 ranks)"},

		{"duration", func(r *Report) { r.Durations[1].MS = -1 }, "durations[1].ms: -1, want 0 or more"},
		{"no stall", func(r *Report) { r.Stall = nil }, ""},
		{"stall", func(r *Report) { r.Stall.AfterMS = -1 }, "stall.after_ms: -1, want 0 or more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fullSample()
			tc.mutate(r)
			err := Validate(r)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("valid report refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != "invalid report: "+tc.want):
				t.Errorf("error %v\nwant invalid report: %s", err, tc.want)
			}
		})
	}
}

// noGPUs empties what indexes the report's GPUs, leaving ordinals unbounded but for
// MaxGPUs.
func noGPUs(r *Report) {
	r.GPUs, r.Pairs, r.CUDA.Devices, r.BAR1 = nil, nil, nil, nil
	r.Copies, r.Latencies, r.HighMem, r.PeerMem = nil, nil, nil, nil
}

// A report broken everywhere lists the first 20 problems, one a line, and counts the
// rest, so the message stays a screenful.
func TestValidateListsAtMost20(t *testing.T) {
	for _, tc := range []struct {
		bad  int
		more string
	}{
		{2, ""},
		{20, ""},
		{21, "\n  ... and 1 more"},
		{25, "\n  ... and 5 more"},
	} {
		r := gpuSample()
		r.Durations = nil
		var want []string
		for i := range tc.bad {
			r.Durations = append(r.Durations, Duration{MS: -1})
			if i < 20 {
				want = append(want, fmt.Sprintf("durations[%d].ms: -1, want 0 or more", i))
			}
		}
		err := Validate(r)
		if w := "invalid report:\n  " + strings.Join(want, "\n  ") + tc.more; err == nil || err.Error() != w {
			t.Errorf("%d problems: %v\nwant %s", tc.bad, err, w)
		}
	}
}

// A value of the wrong JSON kind is named by its key, with what the report wants
// there in words (no Go types) and the line and column to look at.
func TestDecodeWrongKinds(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"schema": 2, "verdict": 1}`, "1:27: verdict: want a string, got a number"},
		{`{"schema": 2, "verdict": true}`, "1:30: verdict: want a string, got true or false"},
		{`{"schema": 2,` + "\n" + `"cuda": {"loaded": "yes"}}`, "2:25: cuda.loaded: want true or false, got a string"},
		{`{"gpus": [{"numa_node": 1.5}]}`, "1:28: gpus.numa_node: want a whole number, got number 1.5"},
		{`{"gpus": [{"upstream": [{"acs": {"cap": -1}}]}]}`, "1:43: gpus.upstream.acs.cap: want a whole number from 0, got number -1"},
		{`{"gpus": [{"nvml": {"throttle_reasons": "x"}}]}`, "1:44: gpus.nvml.throttle_reasons: want a whole number from 0, got a string"},
		{`{"copies": [{"gbps": "fast"}]}`, "1:28: copies.gbps: want a number, got a string"},
		{`{"findings": {}}`, "1:15: findings: want a list, got an object"},
		{`{"kernel": []}`, "1:13: kernel: want an object, got a list"},
		{`{"nccl": {"env": 3}}`, "1:19: nccl.env: want an object, got a number"},
		{`{"stall": "x"}`, "1:14: stall: want an object, got a string"},
		{`"report"`, "1:9: not a self-test report: want a JSON object, got a string"},
		{`2`, "1:2: not a self-test report: want a JSON object, got a number"},
	} {
		_, err := Decode([]byte(tc.body))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Decode(%s): %v\nwant %s", tc.body, err, tc.want)
		}
		var pe *PosError
		if !errors.As(err, &pe) || errors.Is(err, ErrNotJSON) {
			t.Errorf("Decode(%s): %v is not a PosError of valid JSON", tc.body, err)
		}
	}
}

func TestLineCol(t *testing.T) {
	b := []byte("ab\ncd\n")
	for _, tc := range []struct {
		off       int64
		line, col int
	}{
		{0, 1, 1},
		{2, 1, 3},
		{3, 2, 1},
		{4, 2, 2},
		{6, 3, 1},
		{99, 3, 1}, // past the end: the end
		{-3, 1, 1},
	} {
		if l, c := lineCol(b, tc.off); l != tc.line || c != tc.col {
			t.Errorf("lineCol(%d) = %d:%d, want %d:%d", tc.off, l, c, tc.line, tc.col)
		}
	}
}
