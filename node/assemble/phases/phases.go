// Package phases is what p2pcheck's phase children answer (Output, one part set) and
// how the parent folds each answer into its report (Merge).
package phases

import (
	"strings"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// Pair is one GPU pair as NVML sees it, keyed by BDFs (JSON has no array keys).
type Pair struct {
	A        string `json:"a"`
	B        string `json:"b"`
	Topology string `json:"topology"`
	Read     string `json:"read"`
	Write    string `json:"write"`
	NVLink   string `json:"nvlink,omitempty"`
}

// NVML is the NVML phase's answer.
type NVML struct {
	NVML  selftest.NVML                `json:"nvml"`
	GPUs  map[string]*selftest.NVMLGPU `json:"gpus"` // by BDF
	Pairs []Pair                       `json:"pairs"`
}

// Output is what a p2pcheck phase child prints on stdout; exactly one part is set.
type Output struct {
	Precheck *pcie.Result    `json:"precheck,omitempty"`
	NVML     *NVML           `json:"nvml,omitempty"`
	CUDA     *cuda.Result    `json:"cuda,omitempty"`
	NCCL     *selftest.NCCL  `json:"nccl,omitempty"`
	BAR1     *NVML           `json:"bar1,omitempty"` // NVML again after the copies, for BAR1
	PeerMem  *cuda.MemResult `json:"peermem,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// Merge folds one phase's answer into the report. GPUs are matched by BDF, the one
// name sysfs, NVML and CUDA share.
func Merge(r *selftest.Report, out *Output) {
	byBDF := map[string]int{}
	for i, g := range r.GPUs {
		byBDF[strings.ToLower(g.BDF)] = i
	}
	switch {
	case out.Precheck != nil:
		r.GPUs = out.Precheck.GPUs
		r.Pairs = out.Precheck.Pairs
		r.IOMMU = out.Precheck.IOMMU
		if r.GPUs == nil {
			r.GPUs = []selftest.GPU{}
		}
		if r.Pairs == nil {
			r.Pairs = []selftest.Pair{}
		}
	case out.NVML != nil:
		r.NVML = out.NVML.NVML
		for bdf, g := range out.NVML.GPUs {
			if i, ok := byBDF[strings.ToLower(bdf)]; ok && g != nil {
				r.GPUs[i].NVML = g
				if g.FBTotal > 0 {
					v := g.FBTotal
					r.GPUs[i].VRAMBytes = &v
				}
			}
		}
		// The BAR1 budget before any CUDA context opens, in GPU order.
		r.BAR1 = []selftest.BAR1Usage{}
		for i, g := range r.GPUs {
			if n := g.NVML; n != nil && n.BAR1Total > 0 {
				r.BAR1 = append(r.BAR1, selftest.BAR1Usage{GPU: i, Total: n.BAR1Total, UsedBefore: n.BAR1Used})
			}
		}
		for _, np := range out.NVML.Pairs {
			a, oka := byBDF[strings.ToLower(np.A)]
			b, okb := byBDF[strings.ToLower(np.B)]
			if p := r.PairOf(a, b); oka && okb && p != nil {
				p.NVMLTopology, p.P2PRead, p.P2PWrite, p.P2PNVLink = np.Topology, np.Read, np.Write, np.NVLink
			}
		}
	case out.BAR1 != nil:
		// After the copies: each GPU's used figure beside the one from before.
		for k := range r.BAR1 {
			u := &r.BAR1[k]
			bdf := strings.ToLower(r.GPUs[u.GPU].BDF)
			for b, g := range out.BAR1.GPUs {
				if strings.ToLower(b) == bdf && g != nil && g.BAR1Total > 0 {
					used := g.BAR1Used
					u.UsedAfter = &used
				}
			}
		}
	case out.CUDA != nil:
		c := out.CUDA
		r.CUDA = c.CUDA
		if r.CUDA.Devices == nil {
			r.CUDA.Devices = []selftest.CUDADevice{}
		}
		ordinalGPU := map[int]int{}
		for _, d := range c.CUDA.Devices {
			if i, ok := byBDF[strings.ToLower(d.BDF)]; ok {
				dev := d
				r.GPUs[i].CUDA = &dev
				ordinalGPU[d.Ordinal] = i
			}
		}
		for a := range c.CanAccess {
			for b := range c.CanAccess[a] {
				if a >= b || b >= len(c.CanAccess) {
					continue
				}
				ga, oka := ordinalGPU[a]
				gb, okb := ordinalGPU[b]
				if p := r.PairOf(ga, gb); oka && okb && p != nil {
					both := c.CanAccess[a][b] && c.CanAccess[b][a]
					p.CanAccessPeer = &both
				}
			}
		}
		r.Copies = append(r.Copies, c.Copies...)
		r.HighMem = append(r.HighMem, c.HighMem...)
		r.Latencies = append(r.Latencies, c.Latencies...)
		if c.Injected != "" {
			r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): "+c.Injected, "this run must fail with copy.corrupt; without the flag it is a real fault")
		}
		for _, n := range c.Notes {
			r.Add(selftest.SevInfo, "cuda.note", n, "")
		}
	case out.NCCL != nil:
		r.NCCL = out.NCCL
	case out.PeerMem != nil:
		r.PeerMem = append(r.PeerMem, out.PeerMem.Checks...)
		if out.PeerMem.Injected != "" {
			r.Add(selftest.SevInfo, "test.injected", "corruption injected on purpose (--inject-corruption): "+out.PeerMem.Injected, "this run must fail with peermem.corrupt; without the flag it is a real fault")
		}
	}
}
