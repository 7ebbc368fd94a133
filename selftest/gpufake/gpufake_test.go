package gpufake_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nccl"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/verdict"
)

// These tests run selftest/cuda's and selftest/nccl's real host code (fill, timed
// copies, verify, above-BAR1 probe, NCCL size sweep with the wrong-element check)
// over the FAKE driver; only the entry points below the purego func fields differ.

const copyBytes = 64 << 10

func twoGPUs(faults ...gpufake.Fault) gpufake.FakeConfig {
	return gpufake.FakeConfig{
		GPUs:   []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}},
		Faults: faults,
	}
}

func runCUDA(t *testing.T, cfg gpufake.FakeConfig, mod func(*cuda.Options)) (*cuda.Result, *gpufake.FakeBox) {
	t.Helper()
	box := gpufake.New(cfg)
	o := cuda.Options{Library: box.CUDA(), CopyBytes: copyBytes, Samples: 3, Verify: true, SM: true, Bidir: true,
		HighMemForce: true, HighMemFakeBAR1: 1 << 30}
	if mod != nil {
		mod(&o)
	}
	r, err := cuda.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("cuda.Run over the FAKE driver: %v", err)
	}
	return r, box
}

func copyOf(t *testing.T, r *cuda.Result, src, dst int, method, dir string) selftest.Copy {
	t.Helper()
	for _, c := range r.Copies {
		if c.Src == src && c.Dst == dst && c.Method == method && c.Direction == dir {
			return c
		}
	}
	t.Fatalf("no %d->%d %s %s copy in %+v", src, dst, method, dir, r.Copies)
	return selftest.Copy{}
}

func TestEngineHealthy(t *testing.T) {
	r, box := runCUDA(t, twoGPUs(), nil)
	if !strings.Contains(r.CUDA.Library, "FAKE") || len(r.CUDA.Devices) != 2 || !strings.HasPrefix(r.CUDA.Devices[0].Name, "FAKE ") {
		t.Errorf("the report does not say FAKE: %+v", r.CUDA)
	}
	if r.CUDA.Devices[1].BDF != "0000:02:00.0" || r.CUDA.Devices[1].CC != "8.9" || r.CUDA.Devices[1].SMs != 128 {
		t.Errorf("device %+v", r.CUDA.Devices[1])
	}
	// 2 local x {ce, sm} + 2 directions x {ce, sm} x {write, read} + 2 bidir
	if len(r.Copies) != 14 {
		t.Errorf("%d copies, want 14", len(r.Copies))
	}
	want := map[string]float64{"ce local": 900, "sm local": 810, "ce write": 20, "ce read": 20, "sm write": 18, "sm read": 18, "ce bidir": 40}
	for _, c := range r.Copies {
		if c.Error != "" || c.Mismatch != nil || !c.Verified {
			t.Errorf("%d->%d %s %s: error %q mismatch %+v verified %v", c.Src, c.Dst, c.Method, c.Direction, c.Error, c.Mismatch, c.Verified)
		}
		if w := want[c.Method+" "+c.Direction]; c.GBps < 0.999*w || c.GBps > 1.001*w || len(c.Samples) != 3 {
			t.Errorf("%d->%d %s %s: %.3f GB/s %v, want %.0f", c.Src, c.Dst, c.Method, c.Direction, c.GBps, c.Samples, w)
		}
	}
	if len(r.HighMem) != 2 {
		t.Fatalf("high-mem probes %+v", r.HighMem)
	}
	for _, h := range r.HighMem {
		if !h.Verified || h.Error != "" || h.Mismatch != nil || h.Peer != 1-h.GPU || h.BallastMiB != 1024 {
			t.Errorf("high-mem %+v", h)
		}
	}
	if len(r.Notes) != 0 {
		t.Errorf("notes %v (the spin gate timed out?)", r.Notes)
	}
	// 14 copies, each destination checked (bidir: 2), plus the probes' 4.
	if got := box.Launches["pb_verify"]; got != 20 {
		t.Errorf("%d verify launches, want 20", got)
	}
}

func TestEngineFaults(t *testing.T) {
	const words = copyBytes / 4
	for _, tc := range []struct {
		name   string
		faults []gpufake.Fault
		mod    func(*cuda.Options)
		check  func(t *testing.T, r *cuda.Result)
	}{
		{name: "flipped word in peer ce copies", faults: []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 4096}},
			check: func(t *testing.T, r *cuda.Result) {
				for _, dir := range []string{selftest.DirWrite, selftest.DirRead} {
					c := copyOf(t, r, 0, 1, selftest.MethodCE, dir)
					if c.Mismatch == nil || c.Mismatch.Words != 1 || c.Mismatch.Offset != 4096 || c.Mismatch.Got != ^c.Mismatch.Want {
						t.Errorf("0->1 ce %s mismatch %+v, want 1 word at 4096", dir, c.Mismatch)
					}
				}
				if c := copyOf(t, r, 0, 1, selftest.MethodSM, selftest.DirWrite); c.Mismatch != nil {
					t.Errorf("sm copy hit by a ce fault: %+v", c.Mismatch)
				}
				if c := copyOf(t, r, 1, 0, selftest.MethodCE, selftest.DirWrite); c.Mismatch != nil {
					t.Errorf("1->0 hit by a 0->1 fault: %+v", c.Mismatch)
				}
			}},
		{name: "short local copy", faults: []gpufake.Fault{{Kind: gpufake.FaultShort, Copy: "1->1"}},
			check: func(t *testing.T, r *cuda.Result) {
				for _, m := range []string{selftest.MethodCE, selftest.MethodSM} {
					c := copyOf(t, r, 1, 1, m, selftest.DirLocal)
					if c.Mismatch == nil || c.Mismatch.Words != words/2 || c.Mismatch.Offset != copyBytes/2 {
						t.Errorf("1->1 %s mismatch %+v, want %d words from byte %d", m, c.Mismatch, words/2, copyBytes/2)
					}
				}
			}},
		{name: "peer enable fails with 205", faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuCtxEnablePeerAccess", Code: 205}},
			check: func(t *testing.T, r *cuda.Result) {
				c := copyOf(t, r, 0, 1, selftest.MethodCE, selftest.DirWrite)
				if !strings.Contains(c.Error, "CUDA_ERROR_MAP_FAILED") || c.Verified {
					t.Errorf("copy %+v, want CUDA_ERROR_MAP_FAILED", c)
				}
			}},
		{name: "peer writes above a 1 GiB window miss", faults: []gpufake.Fault{{Kind: gpufake.FaultWindow, GPU: 0, Window: 1 << 30}},
			check: func(t *testing.T, r *cuda.Result) {
				for _, h := range r.HighMem {
					if (h.GPU == 0) != (h.Mismatch != nil) {
						t.Errorf("high-mem on GPU %d: mismatch %+v", h.GPU, h.Mismatch)
					}
				}
				for _, c := range r.Copies {
					if c.Mismatch != nil {
						t.Errorf("low buffers hit: %d->%d %s %s", c.Src, c.Dst, c.Method, c.Direction)
					}
				}
			}},
		{name: "inject corruption", mod: func(o *cuda.Options) { o.CorruptOnce = true },
			check: func(t *testing.T, r *cuda.Result) {
				c := copyOf(t, r, 0, 1, selftest.MethodCE, selftest.DirWrite)
				if r.Injected == "" || c.Mismatch == nil || c.Mismatch.Words != 1 {
					t.Errorf("injected %q, first peer copy mismatch %+v", r.Injected, c.Mismatch)
				}
				bad := 0
				for _, c := range r.Copies {
					if c.Mismatch != nil {
						bad++
					}
				}
				if bad != 1 {
					t.Errorf("%d corrupted copies, want 1", bad)
				}
			}},
		{name: "verify off", mod: func(o *cuda.Options) { o.Verify = false }, faults: []gpufake.Fault{{Kind: gpufake.FaultFlip}},
			check: func(t *testing.T, r *cuda.Result) {
				for _, c := range r.Copies {
					if c.Verified || c.Mismatch != nil {
						t.Errorf("verify off, yet %d->%d %s %s verified %v mismatch %+v", c.Src, c.Dst, c.Method, c.Direction, c.Verified, c.Mismatch)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := runCUDA(t, twoGPUs(tc.faults...), tc.mod)
			tc.check(t, r)
		})
	}
}

func TestEngineInitAndPTXCodes(t *testing.T) {
	box := gpufake.New(twoGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuInit", Code: 803}))
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: copyBytes})
	if err == nil || r.CUDA.CuInit == nil || *r.CUDA.CuInit != (selftest.Status{Name: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", Code: 803}) {
		t.Errorf("cuInit 803: err %v, cu_init %+v", err, r.CUDA.CuInit)
	}
	cfg := twoGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuModuleLoadDataEx", Code: 222})
	cfg.PTXLog = "ptxas fatal   : Unsupported .version 7.0; current version is '6.4'"
	box = gpufake.New(cfg)
	r, err = cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: copyBytes})
	if err == nil || r.CUDA.PTX == nil || r.CUDA.PTX.Code != 222 || r.CUDA.PTX.Name != "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" || r.CUDA.PTXLog != cfg.PTXLog {
		t.Errorf("PTX 222: err %v, ptx %+v log %q", err, r.CUDA.PTX, r.CUDA.PTXLog)
	}
	box = gpufake.New(gpufake.FakeConfig{})
	r, err = cuda.Run(context.Background(), cuda.Options{Library: box.CUDA()})
	if err == nil || r.CUDA.CuInit == nil || r.CUDA.CuInit.Code != 100 || r.CUDA.DriverVersion != 12040 {
		t.Errorf("no GPUs: err %v, %+v", err, r.CUDA)
	}
}

// A binding whose signature drifts from the stand-in's fails to bind instead of
// running against a stale emulation.
func TestBindChecksSignature(t *testing.T) {
	lib := gpufake.New(gpufake.FakeConfig{}).CUDA()
	var wrong func(flags uint64) int32
	if err := lib.Bind("cuInit", &wrong); err == nil || !strings.Contains(err.Error(), "FAKE signature") {
		t.Errorf("Bind with the wrong type: %v", err)
	}
	var missing func() int32
	if err := lib.Bind("cuNoSuchCall", &missing); err == nil || !strings.Contains(err.Error(), "dlsym cuNoSuchCall") {
		t.Errorf("Bind of a missing symbol: %v", err)
	}
}

func runNCCL(t *testing.T, cfg gpufake.FakeConfig) *selftest.NCCL {
	t.Helper()
	box := gpufake.New(cfg)
	res, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(),
		MaxBytes: 64 << 10, Iters: 4, LogPath: filepath.Join(t.TempDir(), "nccl.log"), Clock: box.Now})
	if err != nil {
		t.Fatalf("nccl.Run over the FAKE libraries: %v", err)
	}
	return res
}

func fourGPUs(faults ...gpufake.Fault) gpufake.FakeConfig {
	c := gpufake.FakeConfig{Faults: faults}
	for range 4 {
		c.GPUs = append(c.GPUs, gpufake.FakeGPU{MemBytes: 1 << 30})
	}
	return c
}

func TestNCCLHealthy(t *testing.T) {
	res := runNCCL(t, fourGPUs())
	if !strings.Contains(res.Library, "FAKE") || res.Ranks != 4 || res.Version != 22105 {
		t.Errorf("nccl %+v", res)
	}
	if len(res.Sizes) != 14 { // 8 B .. 64 KiB
		t.Errorf("%d sizes", len(res.Sizes))
	}
	for _, s := range res.Sizes {
		// The clock counts whole nanoseconds: below a few KiB an iteration is ~1 ns.
		if s.Wrong != 0 || s.Bytes >= 4096 && (s.BusBW < 19.98 || s.BusBW > 20.02) {
			t.Errorf("%d B: %d wrong, busbw %.3f GB/s (want 20 on the FAKE clock)", s.Bytes, s.Wrong, s.BusBW)
		}
	}
	if len(res.Transports) != 8 {
		t.Fatalf("transports %+v, want 8 parsed from the log", res.Transports)
	}
	for _, tr := range res.Transports {
		if !tr.P2P || tr.Via != "P2P/direct pointer" {
			t.Errorf("transport %+v", tr)
		}
	}
}

func TestNCCLFaults(t *testing.T) {
	res := runNCCL(t, fourGPUs(gpufake.Fault{Kind: gpufake.FaultSum, Rank: 2, Elem: 1, Count: 3}))
	for _, s := range res.Sizes {
		want := min(max(s.Bytes/4-1, 0), 3)
		if s.Wrong != want {
			t.Errorf("%d B: %d wrong, want %d", s.Bytes, s.Wrong, want)
		}
	}
	cfg := fourGPUs()
	cfg.NCCLLog = []string{
		"node7:912:918 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
		"node7:912:918 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via SHM/direct/direct",
		"node7:912:918 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] [send] via NET/Socket/0",
		"node7:912:918 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/direct pointer",
	}
	res = runNCCL(t, cfg)
	got := []string{}
	for _, tr := range res.Transports {
		p := "-"
		if tr.P2P {
			p = "p2p"
		}
		got = append(got, tr.Via+" "+p)
	}
	want := "P2P/CUMEM/read p2p,SHM/direct/direct -,NET/Socket/0 -,P2P/direct pointer p2p"
	if strings.Join(got, ",") != want {
		t.Errorf("transports %v, want %s", got, want)
	}
	box := gpufake.New(fourGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "ncclCommInitAll", Code: 2}))
	res, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(), MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if err == nil || !strings.Contains(res.Error, "ncclCommInitAll(4 GPUs): unhandled system error") {
		t.Errorf("init code 2: err %v, error %q", err, res.Error)
	}
}

// The real NVML probe over the FAKE libnvidia-ml: raw codes in, letters and classes out.
func TestNVMLProbe(t *testing.T) {
	lib := gpufake.NewNVML(gpufake.FakeNVML{DriverVersion: "550.163.01", CUDAVersion: 12040,
		GPUs: []gpufake.FakeNVMLGPU{
			{BDF: "0000:01:00.0", Name: "NVIDIA GeForce RTX 4090", BAR1Total: 32 << 30, FBTotal: 24 << 30, LinkGen: 4, LinkWidth: 16, MaxGen: 4, MaxWidth: 16, Replay: -1, DisplayMode: 1, Display: 1},
			{BDF: "0000:41:00.0", Name: "NVIDIA GeForce RTX 4090", BAR1Total: 32 << 30, FBTotal: 24 << 30, LinkGen: 4, LinkWidth: 8, MaxGen: 4, MaxWidth: 16, Replay: 3},
		},
		Pairs: []gpufake.FakeNVMLPair{{A: "0000:41:00.0", B: "0000:01:00.0", Level: 40, Read: 1, Write: 3, NVLink: -1}},
	})
	r, err := nvml.ProbeWith(context.Background(), lib)
	if err != nil {
		t.Fatal(err)
	}
	if r.NVML.Library != gpufake.NVMLName || r.NVML.DriverVersion != "550.163.01" || r.NVML.Error != "" {
		t.Errorf("nvml %+v", r.NVML)
	}
	p := r.Pairs[[2]string{"0000:01:00.0", "0000:41:00.0"}]
	if p.Topology != selftest.TopoNODE || p.Read != "CNS" || p.Write != "TNS" || p.NVLink != "" {
		t.Errorf("pair %+v", p)
	}
	g0, g1 := r.GPUs["0000:01:00.0"], r.GPUs["0000:41:00.0"]
	if g0 == nil || g1 == nil || g0.ReplayCounter != -1 || g1.ReplayCounter != 3 || g1.LinkWidth != 8 || *g0.DisplayActive != 1 || *g1.DisplayMode != 0 || g0.Name != "FAKE NVIDIA GeForce RTX 4090" {
		t.Errorf("gpus %+v %+v", g0, g1)
	}
	bad := gpufake.NewNVML(gpufake.FakeNVML{Init: 18})
	r, err = nvml.ProbeWith(context.Background(), bad)
	if err == nil || r.NVML.Init == nil || r.NVML.Init.Name != "NVML_ERROR_LIB_RM_VERSION_MISMATCH" {
		t.Errorf("init 18: %v %+v", err, r.NVML.Init)
	}
}

// An NCCL without code for the GPUs' arch, through the real NCCL phase over the FAKE
// libraries: ncclGetLastError's CUDA failure reaches the report, and the verdict names
// it nccl.arch with the versions instead of the generic nccl.error.
func TestNCCLWithoutKernelsForTheArch(t *testing.T) {
	cfg := fourGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "ncclCommInitAll", Code: 1})
	cfg.NCCLVersion = 22907
	cfg.NCCLLastError = "Cuda failure 'no kernel image is available for execution on the device'"
	box := gpufake.New(cfg)
	res, err := nccl.Run(context.Background(), nccl.Options{CUDALibrary: box.CUDA(), NCCLLibrary: box.NCCL(), MaxBytes: 64, LogPath: filepath.Join(t.TempDir(), "l")})
	if err == nil || !strings.Contains(res.Error, "ncclCommInitAll(4 GPUs): unhandled cuda error") || !strings.Contains(res.Error, "no kernel image is available") {
		t.Fatalf("err %v, error %q", err, res.Error)
	}
	r := &selftest.Report{NCCL: res}
	r.CUDA.Devices = []selftest.CUDADevice{{Name: "NVIDIA GeForce RTX 5090", CC: "12.0"}}
	r.NVML.DriverVersion = "595.45.04"
	var ids []string
	for _, f := range verdict.Rules(r, nil) {
		ids = append(ids, f.ID)
		if f.ID == "nccl.arch" && !strings.Contains(f.Message, "NCCL 2.29.7 has no kernels that run on RTX 5090 (sm_120), driver 595.45.04") {
			t.Errorf("nccl.arch: %s", f.Message)
		}
	}
	if !slices.Contains(ids, "nccl.arch") || slices.Contains(ids, "nccl.error") {
		t.Errorf("findings %v: want nccl.arch, not nccl.error", ids)
	}
}

// The real NVML probe's ECC and row-remap reading over the FAKE libnvidia-ml: an
// H200 with ECC on and remapping, a GeForce with ECC off, one with none, and a
// library without the calls.
func TestNVMLProbeECC(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	for _, tt := range []struct {
		name string
		ecc  *gpufake.FakeECC
		want *selftest.ECC
	}{
		{"h200", &gpufake.FakeECC{Mode: 1, Corrected: 4, Uncorrected: 1, Remap: true, RemappedCorrectable: 2, RemapPending: true},
			&selftest.ECC{Mode: selftest.ECCOn, Corrected: u(4), Uncorrected: u(1), RemappedCorrectable: ptr(2), RemappedUncorrectable: ptr(0), RemapPending: ptr(true), RemapFailure: ptr(false)}},
		{"remap-failure", &gpufake.FakeECC{Mode: 1, Remap: true, RemapFailure: true},
			&selftest.ECC{Mode: selftest.ECCOn, Corrected: u(0), Uncorrected: u(0), RemappedCorrectable: ptr(0), RemappedUncorrectable: ptr(0), RemapPending: ptr(false), RemapFailure: ptr(true)}},
		{"rtx-4090-off", &gpufake.FakeECC{Mode: 0}, &selftest.ECC{Mode: selftest.ECCOff}},
		{"rtx-3090-none", &gpufake.FakeECC{Mode: -1}, &selftest.ECC{Mode: selftest.ECCNone}},
		{"no-ecc-calls", nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lib := gpufake.NewNVML(gpufake.FakeNVML{GPUs: []gpufake.FakeNVMLGPU{{BDF: "0000:01:00.0", Replay: -1, ECC: tt.ecc}}})
			r, err := nvml.ProbeWith(context.Background(), lib)
			if err != nil {
				t.Fatal(err)
			}
			got := r.GPUs["0000:01:00.0"].ECC
			if !reflect.DeepEqual(got, tt.want) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(tt.want)
				t.Errorf("ECC %s, want %s", gj, wj)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
