package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// healthyScenario is a FAKE backend script for the box a sysfs fixture describes, as
// a correctly patched driver would answer it, in raw values only: NVML returns
// NVML_SUCCESS, P2P status 0 (OK) both ways and the topology level matching sysfs'
// path for every pair; the FAKE CUDA driver has every GPU at the sysfs address, peer
// access between all of them and copy rates of 75 % of each path's link; the FAKE
// libnccl logs "via P2P/direct pointer" for a ring over every rank. Fault tests
// change one raw thing.
func healthyScenario(t *testing.T, pre *pcie.Result, vram int64) *fakeScenario {
	t.Helper()
	n := len(pre.GPUs)
	s := &fakeScenario{Fake: "healthy patched box"}
	s.NVML = &fakeNVML{Init: 0, DriverVersion: "550.163.01", CUDAVersion: 12040, GPUs: map[string]*selftest.NVMLGPU{}}
	for _, g := range pre.GPUs {
		s.NVML.GPUs[g.BDF] = &selftest.NVMLGPU{Name: "NVIDIA GeForce RTX 4090", BAR1Total: g.BAR1Bytes, FBTotal: vram,
			LinkGen: 4, LinkWidth: g.Link.CurrentWidth, MaxLinkGen: 4, MaxLinkWidth: g.Link.MaxWidth}
	}
	for _, p := range pre.Pairs {
		s.NVML.Pairs = append(s.NVML.Pairs, fakeNVMLPair{A: pre.GPUs[p.A].BDF, B: pre.GPUs[p.B].BDF, Level: nvmlLevel(t, p.Topology), NVLink: -1})
	}
	box := &gpufake.FakeConfig{DriverVersion: 12040, LocalGBps: 900, SMFactor: 0.95, PairGBps: make([][]float64, n)}
	for i, g := range pre.GPUs {
		box.GPUs = append(box.GPUs, gpufake.FakeGPU{Name: "NVIDIA GeForce RTX 4090", BDF: g.BDF, CC: "8.9", SMs: 128, MemBytes: vram})
		box.PairGBps[i] = make([]float64, n)
		for j := range n {
			if i != j {
				box.PairGBps[i][j] = 0.75 * pcie.PathLinkGBps(pre, i, j)
			}
		}
	}
	s.Box = box
	return s
}

// nvmlLevel is the nvmlGpuTopologyLevel_t NVML answers for a sysfs topology class.
func nvmlLevel(t *testing.T, class string) int {
	t.Helper()
	for _, l := range []int{10, 20, 30, 40, 50} {
		if nvml.TopologyClass(l) == class {
			return l
		}
	}
	t.Fatalf("no NVML level for topology %q", class)
	return -1
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

func (s *fakeScenario) String() string { return fmt.Sprintf("FAKE %q", s.Fake) }
