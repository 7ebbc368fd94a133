package recipe

import (
	"fmt"
	"strconv"
	"strings"

	"pault.ag/go/debian/version"

	"github.com/peerboot/peerboot/apt"
)

// The userspace compatibility rule (docs/userspace.md): the driver branch must be at
// least the CUDA runtime's minimum driver, and NCCL must carry kernels that can run on
// every GPU of the platform. A recipe only states package relations, so at load time
// the rule is checked on what the recipe guarantees (the driver version it names, the
// lowest NCCL version its relation admits); the build checks the NCCL library it
// actually lays down (nccl.CheckArches on libnccl.so.2's fatbin).

// GPUArch is what the rule needs to know about the chip of a platform.gpu_model.
type GPUArch struct {
	Chip    string // e.g. "GB202", as GPUChip names it
	SM      int    // compute capability as major*10+minor: 120 for sm_120
	MinNCCL string // first NCCL release with kernels for SM; "" when any NCCL still built has them
}

// chipArches: compute capabilities from NVIDIA's CUDA GPUs table
// (developer.nvidia.com/cuda-gpus). NCCL 2.25.1's release notes add Blackwell (sm_100,
// sm_120) kernels; older NCCL cannot run there, since its collective kernels are
// device-linked cubins with no PTX to JIT from (docs/userspace.md). Which driver
// branch a chip needs is gpuDriver's (GB202 from 570).
var chipArches = map[string]GPUArch{
	"GA102": {Chip: "GA102", SM: 86},
	"AD102": {Chip: "AD102", SM: 89},
	"GB202": {Chip: "GB202", SM: 120, MinNCCL: "2.25.1"},
}

// LookupGPU is the architecture of a platform.gpu_model ("RTX 4090 48G" is an AD102,
// sm_89); ok is false for a model GPUChip does not know, which the rule then leaves
// unchecked.
func LookupGPU(model string) (GPUArch, bool) {
	g, ok := chipArches[GPUChip(model)]
	return g, ok
}

// runtimeMinDriver is the lowest driver branch each CUDA runtime major runs on, with
// minor-version compatibility: NCCL and the self-test load libcudart.so.N, which needs
// at least this libcuda. From the CUDA toolkit release notes' table of minimum driver
// versions for minor version compatibility (>= 450.80.02 for 11.x, >= 525.60.13 for
// 12.x, >= 580 for 13.x); the branch is what a recipe's driver.version shows.
var runtimeMinDriver = map[string]struct {
	cuda   string
	branch int
}{
	"libcudart11.0": {"11.x", 450},
	"libcudart12":   {"12.x", 525},
	"libcudart13":   {"13.x", 580},
}

// DriverBranch is the major number of an NVIDIA driver version ("595.45.04" -> 595).
func DriverBranch(v string) (int, bool) {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	return n, err == nil && n > 0
}

// MinVersion is the lowest version a package relation admits, and whether it has a
// lower bound at all ("libnccl2" and "libnccl2 <= 2.30" have none).
func MinVersion(r apt.Request) (string, bool) {
	switch {
	case r.Version == "":
		return "", false
	case r.Op == "" || r.Op == "=" || r.Op == ">=" || r.Op == ">>":
		return r.Version, true
	}
	return "", false
}

// AtLeast says whether Debian version v is upstream release min or later; the
// Debian revision and packaging suffixes do not count ("2.25.1-1" and "2.25.1~rc"
// both meet "2.25.1": a tilde sorts before the release, so compare with "min~").
func AtLeast(v, min string) bool {
	a, err1 := version.Parse(v)
	b, err2 := version.Parse(min + "~")
	if err1 != nil || err2 != nil {
		return false
	}
	return version.Compare(a, b) >= 0
}

// compat checks the rule on what the recipe states.
func (c *checker) compat(r *Recipe) {
	branch, haveBranch := DriverBranch(r.Driver.Version)
	for i, p := range r.Userspace.Packages {
		req, err := apt.ParseRequest(p)
		if err != nil {
			continue // userspace() reports it
		}
		if rt, ok := runtimeMinDriver[req.Name]; ok && haveBranch && branch < rt.branch {
			c.add(fmt.Sprintf("userspace.packages[%d]", i),
				"%s is the CUDA %s runtime, which needs driver %d or later; driver.version is %s: take a newer driver or an older runtime",
				req.Name, rt.cuda, rt.branch, r.Driver.Version)
		}
	}
	if r.Platform.GPUs == 0 {
		return
	}
	g, ok := LookupGPU(r.Platform.GPUModel)
	if !ok {
		return
	}
	if g.MinNCCL == "" {
		return
	}
	for i, p := range r.Userspace.Packages {
		req, err := apt.ParseRequest(p)
		if err != nil || req.Name != "libnccl2" {
			continue
		}
		key := fmt.Sprintf("userspace.packages[%d]", i)
		min, bounded := MinVersion(req)
		switch {
		case !bounded:
			c.add(key, "the platform's %s (%s, sm_%d) needs NCCL %s or later (older NCCL has no kernels for sm_%d and fails with \"no kernel image is available\"); %q does not rule older ones out: write \"libnccl2 >= %s\"",
				r.Platform.GPUModel, g.Chip, g.SM, g.MinNCCL, g.SM, p, g.MinNCCL)
		case !AtLeast(min, g.MinNCCL):
			c.add(key, "the platform's %s (%s, sm_%d) needs NCCL %s or later (older NCCL has no kernels for sm_%d and fails with \"no kernel image is available\"), got %q",
				r.Platform.GPUModel, g.Chip, g.SM, g.MinNCCL, g.SM, p)
		}
	}
}
