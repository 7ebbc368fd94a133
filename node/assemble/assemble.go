// Package assemble puts the node's self-test report together, for both programs that
// make one on the node: p2pcheck, which folds each phase child's answer into its
// report, and the init, which makes the report itself when p2pcheck could not (a
// crash, a timeout, a panic of the init). Both start from Base, so a report says the
// same of the kernel and the recipe whoever wrote it.
package assemble

import (
	"strings"
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// Base is the report before any phase: when it started, the kernel, and the recipe
// when the image's could be loaded (nil otherwise).
func Base(start time.Time, kernel selftest.Kernel, rc *recipe.Resolved) *selftest.Report {
	r := selftest.New()
	r.StartedAt = start.UTC().Format(time.RFC3339)
	r.Kernel = kernel
	if rc != nil {
		r.Recipe = selftest.RecipeRef{Name: rc.Name, Digest: rc.Digest, DriverVersion: rc.Recipe.Driver.Version}
	}
	return r
}

// NVMLPair is one GPU pair as NVML sees it, keyed by BDFs (JSON has no array keys).
type NVMLPair struct {
	A        string `json:"a"`
	B        string `json:"b"`
	Topology string `json:"topology"`
	Read     string `json:"read"`
	Write    string `json:"write"`
	NVLink   string `json:"nvlink,omitempty"`
}

// NVMLOutput is the NVML phase's answer.
type NVMLOutput struct {
	NVML  selftest.NVML                `json:"nvml"`
	GPUs  map[string]*selftest.NVMLGPU `json:"gpus"` // by BDF
	Pairs []NVMLPair                   `json:"pairs"`
}

// PhaseOutput is what a p2pcheck phase child prints on stdout; exactly one part is set.
type PhaseOutput struct {
	Precheck *pcie.Result   `json:"precheck,omitempty"`
	NVML     *NVMLOutput    `json:"nvml,omitempty"`
	CUDA     *cuda.Result   `json:"cuda,omitempty"`
	NCCL     *selftest.NCCL `json:"nccl,omitempty"`
	Error    string         `json:"error,omitempty"`
}

// Merge folds one phase's answer into the report. GPUs are matched by BDF, the one
// name sysfs, NVML and CUDA share.
func Merge(r *selftest.Report, out *PhaseOutput) {
	byBDF := map[string]int{}
	for i, g := range r.GPUs {
		byBDF[strings.ToLower(g.BDF)] = i
	}
	pairOf := func(a, b int) *selftest.Pair {
		if a > b {
			a, b = b, a
		}
		for i := range r.Pairs {
			if r.Pairs[i].A == a && r.Pairs[i].B == b {
				return &r.Pairs[i]
			}
		}
		return nil
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
		for _, np := range out.NVML.Pairs {
			a, oka := byBDF[strings.ToLower(np.A)]
			b, okb := byBDF[strings.ToLower(np.B)]
			if p := pairOf(a, b); oka && okb && p != nil {
				p.NVMLTopology, p.P2PRead, p.P2PWrite, p.P2PNVLink = np.Topology, np.Read, np.Write, np.NVLink
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
				if p := pairOf(ga, gb); oka && okb && p != nil {
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
	}
}
