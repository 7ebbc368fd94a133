package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// healthyScenario is a FAKE backend script for the box a sysfs fixture describes, as
// a correctly patched driver would answer it: every pair P2P OK with NVML topology
// equal to sysfs', every peer copy verified at 75 % of the path's link rate, the
// above-BAR1 probe verified on every card whose BAR1 is smaller than its memory, and
// NCCL over P2P/direct pointer on every channel. Fault tests mutate one thing.
func healthyScenario(t *testing.T, pre *pcie.Result, vram int64) *fakeScenario {
	t.Helper()
	n := len(pre.GPUs)
	s := &fakeScenario{Fake: "healthy patched box"}
	s.NVML = &nvmlOutput{
		NVML: selftest.NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS"},
			DriverVersion: "550.163.01", CUDAVersion: 12040},
		GPUs: map[string]*selftest.NVMLGPU{},
	}
	for _, g := range pre.GPUs {
		s.NVML.GPUs[g.BDF] = &selftest.NVMLGPU{Name: "NVIDIA GeForce RTX 4090", BAR1Total: g.BAR1Bytes, FBTotal: vram,
			LinkGen: 4, LinkWidth: g.Link.CurrentWidth, MaxLinkGen: 4, MaxLinkWidth: g.Link.MaxWidth}
	}
	for _, p := range pre.Pairs {
		s.NVML.Pairs = append(s.NVML.Pairs, nvmlPair{A: pre.GPUs[p.A].BDF, B: pre.GPUs[p.B].BDF, Topology: p.Topology, Read: "OK", Write: "OK"})
	}
	c := &cuda.Result{
		CUDA: selftest.CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &selftest.Status{Name: "CUDA_SUCCESS"}, DriverVersion: 12040,
			PTX: &selftest.Status{Name: "CUDA_SUCCESS"}},
		CanAccess: make([][]bool, n),
	}
	for i, g := range pre.GPUs {
		c.CUDA.Devices = append(c.CUDA.Devices, selftest.CUDADevice{Ordinal: i, Name: "NVIDIA GeForce RTX 4090", BDF: g.BDF, CC: "8.9", SMs: 128, MemBytes: vram})
		c.CanAccess[i] = make([]bool, n)
		c.Copies = append(c.Copies, fakeCopy(i, i, selftest.MethodCE, selftest.DirLocal, 900, 0))
		for j := range n {
			if i == j {
				continue
			}
			c.CanAccess[i][j] = true
			link := pcie.PathLinkGBps(pre, i, j)
			for _, d := range []string{selftest.DirWrite, selftest.DirRead} {
				c.Copies = append(c.Copies, fakeCopy(i, j, selftest.MethodCE, d, 0.75*link, link))
				c.Copies = append(c.Copies, fakeCopy(i, j, selftest.MethodSM, d, 0.7*link, link))
			}
			if i < j {
				c.Copies = append(c.Copies, fakeCopy(i, j, selftest.MethodCE, selftest.DirBidir, 1.5*link, link))
			}
		}
		if g.BAR1Bytes < vram {
			c.HighMem = append(c.HighMem, selftest.HighMem{GPU: i, Peer: (i + 1) % n, BAR1Bytes: g.BAR1Bytes, VRAMBytes: vram,
				BallastMiB: g.BAR1Bytes >> 20, Verified: true, Guarantee: "FAKE"})
		}
	}
	s.CUDA = c
	s.NCCL = &selftest.NCCL{Library: "libnccl.so.2", Version: 22105, Ranks: n, BusBWAtMax: 20}
	for _, b := range []int64{8, 1 << 20, 1 << 30} {
		s.NCCL.Sizes = append(s.NCCL.Sizes, selftest.NCCLSize{Bytes: b, TimeUS: float64(b) / 15e3, AlgBW: 15, BusBW: 20})
	}
	for r := range n {
		s.NCCL.Transports = append(s.NCCL.Transports, selftest.Transport{Channel: 0, From: r, To: (r + 1) % n, Via: "P2P/direct pointer", P2P: true})
	}
	return s
}

func fakeCopy(src, dst int, method, dir string, gbps, link float64) selftest.Copy {
	return selftest.Copy{Src: src, Dst: dst, Method: method, Direction: dir, Bytes: 256 << 20, GBps: gbps,
		Samples: []float64{gbps, gbps, gbps}, LinkGBps: link, Verified: true}
}

func writeScenario(t *testing.T, s *fakeScenario) string {
	t.Helper()
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "scenario.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// copyOf finds the first copy of a kind, for mutation.
func copyOf(t *testing.T, s *fakeScenario, method, dir string, peer bool) *selftest.Copy {
	t.Helper()
	for i := range s.CUDA.Copies {
		c := &s.CUDA.Copies[i]
		if c.Method == method && c.Direction == dir && (c.Src != c.Dst) == peer {
			return c
		}
	}
	t.Fatalf("no %s %s copy in the scenario", method, dir)
	return nil
}

func (s *fakeScenario) String() string { return fmt.Sprintf("FAKE %q", s.Fake) }
