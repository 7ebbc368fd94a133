package phases

import (
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// The phases name GPUs three ways (sysfs BDF, NVML's upper-case BDF, CUDA ordinal);
// Merge puts each answer on the GPU and pair it belongs to, whatever the order.
func TestMerge(t *testing.T) {
	r := selftest.New()
	Merge(r, &Output{Precheck: &pcie.Result{
		GPUs:  []selftest.GPU{{BDF: "0000:01:00.0"}, {BDF: "0000:41:00.0"}},
		Pairs: []selftest.Pair{{A: 0, B: 1}},
	}})
	Merge(r, &Output{NVML: &NVML{
		GPUs:  map[string]*selftest.NVMLGPU{"00000000:41:00.0": {FBTotal: 1}, "0000:41:00.0": {FBTotal: 24 << 30}},
		Pairs: []Pair{{A: "0000:41:00.0", B: "0000:01:00.0", Topology: "PHB", Read: "OK", Write: "OK"}},
	}})
	Merge(r, &Output{CUDA: &cuda.Result{
		CUDA:      selftest.CUDA{Devices: []selftest.CUDADevice{{Ordinal: 0, BDF: "0000:41:00.0"}, {Ordinal: 1, BDF: "0000:01:00.0"}}},
		CanAccess: [][]bool{{false, true}, {true, false}},
	}})
	if g := r.GPUs[1]; g.NVML == nil || g.VRAMBytes == nil || *g.VRAMBytes != 24<<30 || g.CUDA == nil || g.CUDA.Ordinal != 0 {
		t.Errorf("GPU 0000:41:00.0: %+v", g)
	}
	if r.GPUs[0].NVML != nil || r.GPUs[0].CUDA == nil || r.GPUs[0].CUDA.Ordinal != 1 {
		t.Errorf("GPU 0000:01:00.0: %+v", r.GPUs[0])
	}
	if p := r.Pairs[0]; p.NVMLTopology != "PHB" || p.P2PRead != "OK" || p.CanAccessPeer == nil || !*p.CanAccessPeer {
		t.Errorf("pair %+v", p)
	}
	// One direction refused: the pair cannot access its peer.
	Merge(r, &Output{CUDA: &cuda.Result{
		CUDA:      selftest.CUDA{Devices: []selftest.CUDADevice{{Ordinal: 0, BDF: "0000:41:00.0"}, {Ordinal: 1, BDF: "0000:01:00.0"}}},
		CanAccess: [][]bool{{false, true}, {false, false}},
	}})
	if p := r.Pairs[0]; p.CanAccessPeer == nil || *p.CanAccessPeer {
		t.Errorf("one-way access: pair %+v", p)
	}
}
