package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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
func healthyScenario(t *testing.T, pre *pcie.Result, vram int64) *gpufake.Scenario {
	t.Helper()
	n := len(pre.GPUs)
	s := &gpufake.Scenario{Fake: "healthy patched box"}
	s.NVML = &gpufake.FakeNVML{Init: 0, DriverVersion: "550.163.01", CUDAVersion: 12040}
	for _, g := range pre.GPUs {
		s.NVML.GPUs = append(s.NVML.GPUs, gpufake.FakeNVMLGPU{BDF: g.BDF, Name: "NVIDIA GeForce RTX 4090", BAR1Total: uint64(g.BAR1Bytes), FBTotal: uint64(vram),
			LinkGen: 4, LinkWidth: uint32(g.Link.CurrentWidth), MaxGen: 4, MaxWidth: uint32(g.Link.MaxWidth)})
	}
	for _, p := range pre.Pairs {
		s.NVML.Pairs = append(s.NVML.Pairs, gpufake.FakeNVMLPair{A: pre.GPUs[p.A].BDF, B: pre.GPUs[p.B].BDF, Level: nvmlLevel(t, p.Topology), NVLink: -1})
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

func writeScenario(t *testing.T, s *gpufake.Scenario) string {
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
