package selftest

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/recipe"
)

// Phase names, as durations and deadline_exceeded spell them.
const (
	PhaseModules  = "modules" // the init's module loading
	PhasePrecheck = "precheck"
	PhaseCUDA     = "cuda"
	PhaseNVML     = "nvml"
	PhaseTotal    = "total" // the init's bound on the whole of p2pcheck
)

// Library return codes the verdict rules name.
const (
	CUDASuccess             = 0
	CUDAErrorStubLibrary    = 34
	CUDAErrorNoDevice       = 100
	CUDAErrorSystemMismatch = 803

	NVMLSuccess            = 0
	NVMLDriverNotLoaded    = 9
	NVMLLibRMVersionMismat = 18
)

// Errnos finit_module(2) returns that the rules tell apart (Linux x86-64 values; the
// report carries numbers so a collector on another OS reads them the same).
const (
	errnoENOENT       = 2
	errnoENOEXEC      = 8
	errnoENODEV       = 19
	errnoEBADMSG      = 74
	errnoEKEYREJECTED = 129
)

// Judge applies the rules to r, appends their findings and settles the verdict.
// platform is nil when the recipe is unknown (p2pcheck run by hand without --recipe).
func Judge(r *Report, platform *recipe.Platform) {
	r.Findings = append(r.Findings, Verdict(r, platform)...)
	r.Settle()
}

// Verdict returns the rule findings for a report. The first cut checks that the driver
// stack is wired up end to end:
//
//   - platform.gpus == 0 (a VM or bench box): nvidia.ko must fail with ENODEV (proof that
//     it links against this kernel and only lacks a device), libcuda must load and cuInit
//     say CUDA_ERROR_NO_DEVICE, and NVML must load (its init may report the driver not
//     loaded, which is the truth without a GPU);
//   - platform.gpus > 0: sysfs must show that many NVIDIA GPUs, nvidia.ko must load and
//     cuInit must succeed.
//
// Without a platform the GPU count is not checked and the mode follows what sysfs shows.
func Verdict(r *Report, platform *recipe.Platform) []Finding {
	var fs findings
	want := len(r.GPUs)
	if platform == nil {
		fs.add(SevInfo, "platform", fmt.Sprintf("no recipe: platform unknown, judging as a box with the %d NVIDIA GPU(s) sysfs shows", want), "pass --recipe /etc/peerboot/recipe.toml to check the GPU count")
	} else {
		want = platform.GPUs
	}
	// A phase that stalled has no answers to judge; its deadline finding says it all.
	stalled := r.DeadlineExceeded
	if stalled != "" {
		fs.add(SevFail, "deadline", "self-test stalled in "+r.DeadlineExceeded, "a hang here usually means the driver is waiting on a GPU that stopped answering: check kernel_log and dmesg for Xid or IOMMU faults")
	}
	if platform != nil && stalled != PhasePrecheck && len(r.GPUs) != want {
		fs.add(SevFail, "gpus.count", fmt.Sprintf("found %d NVIDIA GPU(s) in sysfs, recipe platform.gpus = %d", len(r.GPUs), want),
			"a card missing from sysfs is below the driver: seating, riser, slot power, or BIOS 'Above 4G decoding' / resizable BAR settings")
	}
	for _, g := range r.GPUs {
		if g.Link.MaxWidth > 0 && g.Link.CurrentWidth > 0 && g.Link.CurrentWidth < g.Link.MaxWidth {
			fs.add(SevWarn, "pcie.link", fmt.Sprintf("%s trained at x%d of x%d", g.BDF, g.Link.CurrentWidth, g.Link.MaxWidth), "reseat the card or riser; a narrow link caps peer bandwidth")
		}
	}
	nvidia := findModule(r.Modules, "nvidia")
	if want == 0 {
		fs.noGPUDriver(nvidia)
		if stalled != PhaseCUDA {
			fs.noGPUCUDA(&r.CUDA)
		}
		if stalled != PhaseNVML {
			fs.noGPUNVML(&r.NVML)
		}
	} else {
		fs.gpuDriver(nvidia)
		if stalled != PhaseCUDA {
			fs.gpuCUDA(&r.CUDA)
		}
		if stalled != PhaseNVML {
			fs.gpuNVML(&r.NVML)
		}
	}
	for _, m := range r.Modules {
		if m.Name == "nvidia" || m.RequiredBy != "" {
			continue
		}
		if m.Result == ModError {
			fs.add(SevWarn, "driver."+m.Name, fmt.Sprintf("%s did not load: %s", m.Name, m.Error), moduleHint(&m))
		}
	}
	return fs
}

type findings []Finding

func (fs *findings) add(sev, check, msg, hint string) {
	*fs = append(*fs, Finding{Status: sev, ID: check, Message: msg, Hint: hint})
}

func findModule(ms []Module, name string) *Module {
	for i := range ms {
		if ms[i].Name == name && ms[i].RequiredBy == "" {
			return &ms[i]
		}
	}
	return nil
}

const notAttemptedHint = "the init loads driver.modules and passes the outcomes to p2pcheck with --modules-json; run by hand, pass that file"

func (fs *findings) noGPUDriver(m *Module) {
	switch {
	case m == nil:
		fs.add(SevFail, "driver.nvidia", "nvidia module was not attempted", notAttemptedHint)
	case m.Result == ModENODEV:
		fs.add(SevInfo, "driver.nvidia", "nvidia.ko links against this kernel and found no GPU (ENODEV), as expected without GPUs", "")
	case m.Result == ModLoaded:
		fs.add(SevFail, "driver.nvidia", "nvidia.ko loaded, but the platform has no GPUs", "set platform.gpus in the recipe to the number of GPUs in this box")
	default:
		fs.add(SevFail, "driver.nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleHint(m))
	}
}

func (fs *findings) gpuDriver(m *Module) {
	switch {
	case m == nil:
		fs.add(SevFail, "driver.nvidia", "nvidia module was not attempted", notAttemptedHint)
	case m.Result == ModLoaded:
		fs.add(SevInfo, "driver.nvidia", "nvidia.ko loaded", "")
	case m.Result == ModENODEV:
		fs.add(SevFail, "driver.nvidia", "nvidia.ko found no GPU it supports (ENODEV)", "check that this driver version supports the cards' device id and that no other driver (nouveau, vfio-pci) holds them; see kernel_log")
	default:
		fs.add(SevFail, "driver.nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleHint(m))
	}
}

func moduleOutcome(m *Module) string {
	s := m.Result
	if m.Error != "" {
		s = m.Error
	}
	if m.Errno != 0 {
		s += fmt.Sprintf(" (errno %d)", m.Errno)
	}
	return s
}

// moduleHint turns finit_module's errno (and the kernel's words about it) into a next step.
func moduleHint(m *Module) string {
	log := strings.Join(m.KernelLog, "\n")
	switch {
	case m.Result == ModSkipped:
		return "fix the module it depends on first"
	case strings.Contains(log, "Unknown symbol") || (m.Errno == errnoENOENT && m.File != ""):
		return "Unknown symbol: the module was built against another kernel or needs a module that is missing; rebuild the driver stage against this kernel's build tree and check kernel_log"
	case m.Errno == errnoENOENT:
		return "no .ko for it under /lib/modules/<release>: check the rootfs stage installed the driver modules for this kernel release"
	case m.Errno == errnoENOEXEC || strings.Contains(log, "Invalid module format") || strings.Contains(log, "disagrees about version"):
		return "Invalid module format: vermagic or symbol versions differ from the running kernel; rebuild the driver stage against this exact kernel"
	case m.Errno == errnoEKEYREJECTED || m.Errno == errnoEBADMSG || strings.Contains(log, "signature"):
		return "module signature rejected: sign the modules with the key the kernel trusts (sign.module_key), or build without enforced signing"
	case m.Errno == errnoENODEV:
		return "no device for this module"
	}
	return "see kernel_log for the kernel's reason"
}

func (fs *findings) noGPUCUDA(c *CUDA) {
	if !fs.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		fs.add(SevFail, "cuda.init", "cuInit was not called", "")
	case c.CuInit.Code == CUDAErrorNoDevice:
		fs.add(SevInfo, "cuda.init", "cuInit: CUDA_ERROR_NO_DEVICE, as expected without GPUs", "")
	case c.CuInit.Code == CUDASuccess:
		fs.add(SevFail, "cuda.init", "cuInit succeeded, but the platform has no GPUs", "set platform.gpus in the recipe")
	default:
		fs.add(SevFail, "cuda.init", fmt.Sprintf("cuInit: %s (%d), want CUDA_ERROR_NO_DEVICE", c.CuInit.Name, c.CuInit.Code), cudaHint(c.CuInit.Code))
	}
}

func (fs *findings) gpuCUDA(c *CUDA) {
	if !fs.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		fs.add(SevFail, "cuda.init", "cuInit was not called", "")
	case c.CuInit.Code == CUDASuccess:
		fs.add(SevInfo, "cuda.init", "cuInit: CUDA_SUCCESS", "")
	default:
		fs.add(SevFail, "cuda.init", fmt.Sprintf("cuInit: %s (%d), want CUDA_SUCCESS", c.CuInit.Name, c.CuInit.Code), cudaHint(c.CuInit.Code))
	}
}

func (fs *findings) cudaLoaded(c *CUDA) bool {
	if c.Loaded {
		return true
	}
	fs.add(SevFail, "cuda.load", fmt.Sprintf("%s did not load: %s", orDefault(c.Library, "libcuda"), c.Error), "the image needs libcuda1 of exactly the kernel module's version (userspace.packages) and its dependencies")
	return false
}

func cudaHint(code int) string {
	switch code {
	case CUDAErrorNoDevice:
		return "the driver sees no GPU: check nvidia.ko loaded and /dev/nvidia* exist"
	case CUDAErrorSystemMismatch:
		return "libcuda and nvidia.ko are different versions: pin libcuda1 to driver.version"
	case CUDAErrorStubLibrary:
		return "a CUDA toolkit stub libcuda was loaded instead of the driver's"
	}
	return "check kernel_log and dmesg for Xid errors; /dev/nvidia-uvm must exist"
}

func (fs *findings) noGPUNVML(n *NVML) {
	if !fs.nvmlLoaded(n) {
		return
	}
	switch {
	case n.Init == nil:
		fs.add(SevFail, "nvml.init", "nvmlInit_v2 was not called", "")
	case n.Init.Code == NVMLSuccess || n.Init.Code == NVMLDriverNotLoaded:
		fs.add(SevInfo, "nvml.init", "nvmlInit_v2: "+n.Init.Name+", acceptable without GPUs", "")
	default:
		fs.add(SevFail, "nvml.init", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), nvmlHint(n.Init.Code))
	}
}

// gpuNVML only warns in this first cut: NVML is needed for the topology checks to come,
// but CUDA is what proves the driver works today.
func (fs *findings) gpuNVML(n *NVML) {
	if !n.Loaded {
		fs.add(SevWarn, "nvml.load", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), "the image needs libnvidia-ml1 of the kernel module's version")
		return
	}
	if n.Init != nil && n.Init.Code != NVMLSuccess {
		fs.add(SevWarn, "nvml.init", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), nvmlHint(n.Init.Code))
	}
}

func (fs *findings) nvmlLoaded(n *NVML) bool {
	if n.Loaded {
		return true
	}
	fs.add(SevFail, "nvml.load", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), "the image needs libnvidia-ml1 of the kernel module's version")
	return false
}

func nvmlHint(code int) string {
	if code == NVMLLibRMVersionMismat {
		return "libnvidia-ml and nvidia.ko are different versions: pin libnvidia-ml1 to driver.version"
	}
	return "check kernel_log and dmesg"
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
