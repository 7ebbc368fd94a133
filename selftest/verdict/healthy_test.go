package verdict

import (
	"fmt"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// Schema-2 reports of healthy boxes, shaped like Platform B (EPYC, RTX 4090 48G with
// 32 GiB BAR1, dynamic-BAR1 driver): GPU0/GPU1 hang off root complex pci0000:00 and
// GPU2/GPU3 off pci0000:40, so pairs within a complex are PHB and across are NODE.
// Tests mutate copies of them.

const (
	testDriver = "550.163.01"
	testVRAM   = 49140 << 20
	testBAR1   = 32 << 30
)

// GPUs 4-7 (for the 8-GPU layouts) hang off two more root complexes the same way.
var testBDFs = []string{"0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0", "0000:81:00.0", "0000:82:00.0", "0000:c1:00.0", "0000:c2:00.0"}
var testPorts = []string{"0000:00:01.1", "0000:00:01.2", "0000:40:01.1", "0000:40:01.2", "0000:80:01.1", "0000:80:01.2", "0000:c0:01.1", "0000:c0:01.2"}

func testRootBus(i int) string {
	return []string{"pci0000:00", "pci0000:40", "pci0000:80", "pci0000:c0"}[i/2]
}

func gen4x16() selftest.Link {
	return selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}
}

// healthyReport is an n-GPU (n ≤ 8) box that passes every rule.
func healthyReport(n int) *selftest.Report {
	r := selftest.New()
	r.Recipe = selftest.RecipeRef{Name: "epyc-4gpu", Digest: "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"}
	r.Kernel = selftest.Kernel{Release: "6.12.9-peerboot", Cmdline: "console=ttyS0,115200 panic=-1 iommu=pt"}
	r.Modules = []selftest.Module{
		{Name: "nvidia", File: "updates/nvidia.ko", Params: "NVreg_EnableResizableBar=1", Result: selftest.ModLoaded, KernelLog: []string{}, Version: testDriver},
		{Name: "nvidia-uvm", File: "updates/nvidia-uvm.ko", Result: selftest.ModLoaded},
	}
	vram := int64(testVRAM)
	for i := 0; i < n; i++ {
		r.GPUs = append(r.GPUs, selftest.GPU{
			BDF: testBDFs[i], Vendor: "0x10de", Device: "0x2684", Class: "0x030000", NUMANode: 0,
			Link: gen4x16(), BAR1Bytes: testBAR1, VRAMBytes: &vram,
			Upstream:   []selftest.Bridge{{BDF: testPorts[i], Link: gen4x16(), ACS: &selftest.ACS{Cap: 0x5f, Ctrl: 0x01}}},
			RootBus:    testRootBus(i),
			IOMMUGroup: 10 + i,
			NVML: &selftest.NVMLGPU{Name: "NVIDIA GeForce RTX 4090", BAR1Total: testBAR1, BAR1Used: 2 << 20, FBTotal: testVRAM,
				LinkGen: 4, LinkWidth: 16, MaxLinkGen: 4, MaxLinkWidth: 16},
			CUDA: &selftest.CUDADevice{Ordinal: i, Name: "NVIDIA GeForce RTX 4090", BDF: testBDFs[i], CC: "8.9", SMs: 128, MemBytes: testVRAM},
		})
		r.CUDA.Devices = append(r.CUDA.Devices, *r.GPUs[i].CUDA)
		after := int64(2 << 20)
		r.BAR1 = append(r.BAR1, selftest.BAR1Usage{GPU: i, Total: testBAR1, UsedBefore: 2 << 20, UsedAfter: &after})
	}
	yes := true
	for a := 0; a < n; a++ {
		for b := a + 1; b < n; b++ {
			topo := selftest.TopoNODE
			if testRootBus(a) == testRootBus(b) {
				topo = selftest.TopoPHB
			}
			r.Pairs = append(r.Pairs, selftest.Pair{A: a, B: b, Topology: topo, Path: []string{testPorts[a], testPorts[b]}, ACSOn: []string{},
				NVMLTopology: topo, P2PRead: "OK", P2PWrite: "OK", CanAccessPeer: &yes})
		}
	}
	r.IOMMU = selftest.IOMMU{Active: true, Units: []string{"ivhd0"}, Mode: "passthrough", Cmdline: []string{"iommu=pt"}}
	for i := 0; i < n; i++ {
		r.IOMMU.GroupTypes = append(r.IOMMU.GroupTypes, "identity")
	}
	r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &selftest.Status{Name: "CUDA_SUCCESS"}, DriverVersion: 12040,
		Devices: r.CUDA.Devices, PTX: &selftest.Status{Name: "CUDA_SUCCESS"}}
	r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS"}, DriverVersion: testDriver, CUDAVersion: 12040}

	const size = 256 << 20
	cp := func(src, dst int, method, dir string, gbps, link float64) selftest.Copy {
		return selftest.Copy{Src: src, Dst: dst, Method: method, Direction: dir, Bytes: size, GBps: gbps,
			Samples: []float64{gbps - 0.1, gbps, gbps + 0.1}, LinkGBps: link, Verified: true}
	}
	for i := 0; i < n; i++ {
		r.Copies = append(r.Copies, cp(i, i, selftest.MethodCE, selftest.DirLocal, 812.5+float64(i), 0))
	}
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			if a == b {
				continue
			}
			// A small spread per pair, so a matrix shows which cell is which.
			d := float64(a*n+b) / 10
			r.Copies = append(r.Copies,
				cp(a, b, selftest.MethodCE, selftest.DirWrite, 24.1-d/10, 31.5),
				cp(a, b, selftest.MethodCE, selftest.DirRead, 23.4-d/10, 31.5),
				cp(a, b, selftest.MethodSM, selftest.DirWrite, 22.8-d/10, 31.5))
			if a < b {
				r.Copies = append(r.Copies, cp(a, b, selftest.MethodCE, selftest.DirBidir, 48.2-d/10, 31.5))
			}
		}
	}
	for i := 0; i < n; i++ {
		r.HighMem = append(r.HighMem, selftest.HighMem{GPU: i, Peer: (i + 1) % n, BAR1Bytes: testBAR1, VRAMBytes: testVRAM, BallastMiB: 33792,
			BufferVA: fmt.Sprintf("0x7f%02x00000000", i), Verified: true, Guarantee: "virtual placement only"})
	}
	nc := &selftest.NCCL{Library: "libnccl.so.2", Version: 22803, Ranks: n,
		Env: map[string]string{"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "INFO", "NCCL_LOCAL_REGISTER": "0", "NCCL_GRAPH_REGISTER": "0"},
		Sizes: []selftest.NCCLSize{
			{Bytes: 1 << 20, TimeUS: 61.2, AlgBW: 17.13, BusBW: 17.13 * float64(2*(n-1)) / float64(n)},
			{Bytes: 32 << 20, TimeUS: 1871.4, AlgBW: 17.93, BusBW: 17.93 * float64(2*(n-1)) / float64(n)},
			{Bytes: 1 << 30, TimeUS: 74898.3, AlgBW: 14.34, BusBW: 14.34 * float64(2*(n-1)) / float64(n)},
		},
		LogFile: "/run/peerboot/nccl.log"}
	nc.BusBWAtMax = nc.Sizes[2].BusBW
	for ch := 0; ch < 2; ch++ {
		for i := 0; i < n; i++ {
			nc.Transports = append(nc.Transports, selftest.Transport{Channel: ch, From: i, To: (i + 1) % n, Via: "P2P/direct pointer", P2P: true})
		}
	}
	r.NCCL = nc
	r.Durations = []selftest.Duration{{Phase: selftest.PhaseModules, MS: 2210}, {Phase: selftest.PhasePrecheck, MS: 180}, {Phase: selftest.PhaseNVML, MS: 950}, {Phase: selftest.PhaseCUDA, MS: 14200}, {Phase: selftest.PhaseNCCL, MS: 9800}}
	r.StartedAt = "2026-11-29T12:00:00Z"
	r.Tool = "p2pcheck test"
	return r
}

// healthyRecipe is the recipe healthyReport's box was built from.
func healthyRecipe(n int) *recipe.Recipe {
	numa := make([]int, n)
	return &recipe.Recipe{
		Name: "epyc-4gpu",
		Platform: recipe.Platform{CPUVendor: "amd", Sockets: 1, GPUs: n, GPUModel: "RTX 4090", VRAM: testVRAM, BAR1: testBAR1,
			NUMANodes: 1, GPUNUMA: numa},
		Driver: recipe.Driver{Version: testDriver, P2P: P2PDynamicBAR1,
			Params: map[string]map[string]string{"nvidia": {"NVreg_EnableResizableBar": "1"}}},
		Selftest: recipe.Selftest{Verify: true, CopySize: 256 << 20, NCCLMin: 1 << 20, NCCLMax: 1 << 30, MinBusbwGBps: 12, RequireP2P: true,
			Thresholds: map[string]recipe.Threshold{
				selftest.TopoPIX:  {UnidirGBps: 20, BidirGBps: 40},
				selftest.TopoPHB:  {UnidirGBps: 18, BidirGBps: 32},
				selftest.TopoNODE: {UnidirGBps: 18, BidirGBps: 32},
				selftest.TopoSYS:  {UnidirGBps: 15, BidirGBps: 25},
			}},
		Env: map[string]string{"NCCL_P2P_LEVEL": "SYS", "NCCL_DEBUG": "INFO", "NCCL_LOCAL_REGISTER": "0", "NCCL_GRAPH_REGISTER": "0"},
	}
}

// findCopy returns the copy src->dst of method and direction.
func findCopy(r *selftest.Report, src, dst int, method, dir string) *selftest.Copy {
	for k := range r.Copies {
		c := &r.Copies[k]
		if c.Src == src && c.Dst == dst && c.Method == method && c.Direction == dir {
			return c
		}
	}
	panic(fmt.Sprintf("no copy %d->%d %s %s", src, dst, method, dir))
}
