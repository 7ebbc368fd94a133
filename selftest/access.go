package selftest

import (
	"fmt"
	"strings"
)

// Report accessors: how the verdict rules, the console view and the report diff name
// GPUs and pairs and pick the best figure a report holds. A function of the report alone.

// MSDuration renders milliseconds for messages: "450ms", "2.2s".
func MSDuration(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%dms", ms)
	}
	return fmt.Sprintf("%.1fs", float64(ms)/1000)
}

// HumanBytes renders a byte count in the largest binary unit that divides it: "32GiB",
// "?" when unknown (0 or less).
func HumanBytes(n int64) string {
	switch {
	case n <= 0:
		return "?"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

// GPULabel names GPU index i: "GPU1 (0000:02:00.0)".
func (r *Report) GPULabel(i int) string {
	if i >= 0 && i < len(r.GPUs) {
		return fmt.Sprintf("GPU%d (%s)", i, r.GPUs[i].BDF)
	}
	return fmt.Sprintf("GPU%d", i)
}

// GPUIndex maps a CUDA ordinal (or an NCCL rank of a communicator over every device) to
// an index into Report.GPUs: through the ordinal's bus id when CUDA listed it, else
// the same number, since p2pcheck orders CUDA devices by bus id as sysfs does.
func (r *Report) GPUIndex(ord int) int {
	for _, d := range r.CUDA.Devices {
		if d.Ordinal == ord && d.BDF != "" {
			for i, g := range r.GPUs {
				if strings.EqualFold(g.BDF, d.BDF) {
					return i
				}
			}
		}
	}
	return ord
}

// DeviceOf is what CUDA said about GPU index i, nil if nothing.
func (r *Report) DeviceOf(i int) *CUDADevice {
	if i < 0 || i >= len(r.GPUs) {
		return nil
	}
	g := &r.GPUs[i]
	if g.CUDA != nil {
		return g.CUDA
	}
	for k := range r.CUDA.Devices {
		if strings.EqualFold(r.CUDA.Devices[k].BDF, g.BDF) {
			return &r.CUDA.Devices[k]
		}
	}
	return nil
}

// GPUName is the marketing name NVML or CUDA gave GPU i, "" if neither.
func (r *Report) GPUName(i int) string {
	g := &r.GPUs[i]
	if g.NVML != nil && g.NVML.Name != "" {
		return g.NVML.Name
	}
	if d := r.DeviceOf(i); d != nil {
		return d.Name
	}
	return ""
}

// GPUVRAM is GPU i's memory and where the figure came from: NVML's framebuffer total,
// the driver-reported size, else CUDA's total; 0 and "" when the report does not say.
func (r *Report) GPUVRAM(i int) (int64, string) {
	g := &r.GPUs[i]
	switch {
	case g.NVML != nil && g.NVML.FBTotal > 0:
		return g.NVML.FBTotal, "NVML"
	case g.VRAMBytes != nil && *g.VRAMBytes > 0:
		return *g.VRAMBytes, "driver"
	}
	if d := r.DeviceOf(i); d != nil && d.MemBytes > 0 {
		return d.MemBytes, "CUDA"
	}
	return 0, ""
}

// GPUBAR1 is GPU i's BAR1 size from sysfs, else from NVML.
func (r *Report) GPUBAR1(i int) int64 {
	g := &r.GPUs[i]
	if g.BAR1Bytes > 0 {
		return g.BAR1Bytes
	}
	if g.NVML != nil {
		return g.NVML.BAR1Total
	}
	return 0
}

// PairOf returns the pair of GPU indexes a and b (either order), nil if none.
func (r *Report) PairOf(a, b int) *Pair {
	if a > b {
		a, b = b, a
	}
	for k := range r.Pairs {
		if r.Pairs[k].A == a && r.Pairs[k].B == b {
			return &r.Pairs[k]
		}
	}
	return nil
}

// PairTopology is the pair's class from sysfs, else NVML's, "" if unknown.
func (r *Report) PairTopology(a, b int) string {
	p := r.PairOf(a, b)
	if p == nil {
		return ""
	}
	return orDefault(p.Topology, p.NVMLTopology)
}

// Bits names the redirect bits that are on: "RR+CR".
func (a *ACS) Bits() string {
	var s []string
	if a.RequestRedirect {
		s = append(s, "RR")
	}
	if a.CompletionRedirect {
		s = append(s, "CR")
	}
	if a.EgressControl {
		s = append(s, "EC")
	}
	return strings.Join(s, "+")
}

// CopySubject names a copy: "GPU0->GPU1 ce write" (GPU indexes).
func CopySubject(r *Report, c *Copy) string {
	return fmt.Sprintf("GPU%d->GPU%d %s %s", r.GPUIndex(c.Src), r.GPUIndex(c.Dst), c.Method, c.Direction)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
