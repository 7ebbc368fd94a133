package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/kmsg"
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

func findModule(ms []selftest.Module, name string) *selftest.Module {
	for i := range ms {
		if ms[i].Name == name && ms[i].RequiredBy == "" {
			return &ms[i]
		}
	}
	return nil
}

const notAttemptedHint = "the init loads driver.modules and passes the outcomes to p2pcheck with --modules-json; run by hand, pass that file"

func (j *judge) noGPUDriver(m *selftest.Module) {
	switch {
	case m == nil:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia module was not attempted", "", notAttemptedHint)
	case m.Result == selftest.ModENODEV:
		j.add(selftest.SevInfo, "driver.nvidia", "nvidia", "nvidia.ko links against this kernel and found no GPU (ENODEV), as expected without GPUs", moduleOutcome(m), "")
	case m.Result == selftest.ModLoaded:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia.ko loaded, but the platform has no GPUs", moduleOutcome(m), "set platform.gpus in the recipe to the number of GPUs in this box")
	default:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleEvidence(m), moduleHint(m))
	}
}

func (j *judge) gpuDriver(m *selftest.Module) {
	switch {
	case m == nil:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia module was not attempted", "", notAttemptedHint)
	case m.Result == selftest.ModLoaded:
		j.add(selftest.SevInfo, "driver.nvidia", "nvidia", "nvidia.ko loaded", moduleOutcome(m), "")
	case m.Result == selftest.ModENODEV:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia.ko found no GPU it supports (ENODEV)", moduleEvidence(m), "check that this driver version supports the cards' device id and that no other driver (nouveau, vfio-pci) holds them; see kernel_log")
	default:
		j.add(selftest.SevFail, "driver.nvidia", "nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleEvidence(m), moduleHint(m))
	}
}

func moduleOutcome(m *selftest.Module) string {
	s := m.Result
	if m.Error != "" {
		s = m.Error
	}
	if m.Errno != 0 {
		s += fmt.Sprintf(" (errno %d)", m.Errno)
	}
	return s
}

// moduleEvidence is the kernel's last word about a failed load, else the outcome.
func moduleEvidence(m *selftest.Module) string {
	if n := len(m.KernelLog); n > 0 {
		return m.KernelLog[n-1]
	}
	return moduleOutcome(m)
}

// moduleHint turns finit_module's errno (and the kernel's words about it) into a next step.
func moduleHint(m *selftest.Module) string {
	log := strings.Join(m.KernelLog, "\n")
	switch {
	case m.Result == selftest.ModSkipped:
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

func statusText(s *selftest.Status) string {
	return fmt.Sprintf("%s (%d)", s.Name, s.Code)
}

func (j *judge) noGPUCUDA(c *selftest.CUDA) {
	if !j.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		j.add(selftest.SevFail, "cuda.init", "cuInit", "cuInit was not called", "", notCalledHint(selftest.PhaseCUDA))
	case c.CuInit.Code == selftest.CUDAErrorNoDevice:
		j.add(selftest.SevInfo, "cuda.init", "cuInit", "cuInit: CUDA_ERROR_NO_DEVICE, as expected without GPUs", statusText(c.CuInit), "")
	case c.CuInit.Code == selftest.CUDASuccess:
		j.add(selftest.SevFail, "cuda.init", "cuInit", "cuInit succeeded, but the platform has no GPUs", statusText(c.CuInit), "set platform.gpus in the recipe")
	default:
		j.add(selftest.SevFail, "cuda.init", "cuInit", fmt.Sprintf("cuInit: %s (%d), want CUDA_ERROR_NO_DEVICE", c.CuInit.Name, c.CuInit.Code), statusText(c.CuInit), cudaHint(c.CuInit.Code))
	}
}

func (j *judge) gpuCUDA(c *selftest.CUDA) {
	if !j.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		j.add(selftest.SevFail, "cuda.init", "cuInit", "cuInit was not called", "", notCalledHint(selftest.PhaseCUDA))
	case c.CuInit.Code == selftest.CUDASuccess:
		j.add(selftest.SevInfo, "cuda.init", "cuInit", "cuInit: CUDA_SUCCESS", statusText(c.CuInit), "")
	default:
		j.add(selftest.SevFail, "cuda.init", "cuInit", fmt.Sprintf("cuInit: %s (%d), want CUDA_SUCCESS", c.CuInit.Name, c.CuInit.Code), statusText(c.CuInit), cudaHint(c.CuInit.Code))
	}
}

func (j *judge) cudaLoaded(c *selftest.CUDA) bool {
	if c.Loaded {
		return true
	}
	j.add(selftest.SevFail, "cuda.load", "libcuda", fmt.Sprintf("%s did not load: %s", orDefault(c.Library, "libcuda"), c.Error), c.Error, "the image needs libcuda1 of exactly the kernel module's version (userspace.packages) and its dependencies")
	return false
}

// notCalledHint is the next step when a phase's library init was never called: the
// phase child died first (p2pcheck.<phase>) or the report was cut short.
func notCalledHint(phase string) string {
	return "the " + phase + " phase ended before its init call: see the p2pcheck." + phase + " (or p2pcheck.self) finding and the console for its stderr; report it with this JSON"
}

func cudaHint(code int) string {
	switch code {
	case selftest.CUDAErrorNoDevice:
		return "the driver sees no GPU: check nvidia.ko loaded and /dev/nvidia* exist"
	case selftest.CUDAErrorSystemMismatch:
		return "libcuda and nvidia.ko are different versions: pin libcuda1 to driver.version"
	case selftest.CUDAErrorStubLibrary:
		return "a CUDA toolkit stub libcuda was loaded instead of the driver's"
	}
	return "check kernel_log and dmesg for Xid errors; /dev/nvidia-uvm must exist"
}

func (j *judge) noGPUNVML(n *selftest.NVML) {
	if !j.nvmlLoaded(n) {
		return
	}
	switch {
	case n.Init == nil:
		j.add(selftest.SevFail, "nvml.init", "nvmlInit", "nvmlInit_v2 was not called", "", notCalledHint(selftest.PhaseNVML))
	case n.Init.Code == selftest.NVMLSuccess || n.Init.Code == selftest.NVMLDriverNotLoaded:
		j.add(selftest.SevInfo, "nvml.init", "nvmlInit", "nvmlInit_v2: "+n.Init.Name+", acceptable without GPUs", statusText(n.Init), "")
	default:
		j.add(selftest.SevFail, "nvml.init", "nvmlInit", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), statusText(n.Init), nvmlHint(n.Init.Code))
	}
}

// gpuNVML only warns: CUDA is what proves the driver works, and the P2P rules that need
// NVML's answers say so themselves. A version mismatch is version.mismatch's fail.
func (j *judge) gpuNVML(n *selftest.NVML) {
	if !n.Loaded {
		j.add(selftest.SevWarn, "nvml.load", "libnvidia-ml", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), n.Error, "the image needs libnvidia-ml1 of the kernel module's version")
		return
	}
	if n.Init != nil && n.Init.Code != selftest.NVMLSuccess {
		j.add(selftest.SevWarn, "nvml.init", "nvmlInit", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), statusText(n.Init), nvmlHint(n.Init.Code))
	}
}

func (j *judge) nvmlLoaded(n *selftest.NVML) bool {
	if n.Loaded {
		return true
	}
	j.add(selftest.SevFail, "nvml.load", "libnvidia-ml", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), n.Error, "the image needs libnvidia-ml1 of the kernel module's version")
	return false
}

func nvmlHint(code int) string {
	if code == selftest.NVMLLibRMVersionMismat {
		return "libnvidia-ml and nvidia.ko are different versions: pin libnvidia-ml1 to driver.version"
	}
	return "check kernel_log and dmesg"
}

// versions compares what each layer reports with the recipe's driver.version and with
// each other. The libraries' own mismatch codes (cuInit 803, NVML 18) count too; on a
// box without GPUs cuda.init and nvml.init already fail on them.
func (j *judge) versions(gpus bool) {
	r := j.r
	const hint = "libcuda1, libnvidia-ml1, firmware-nvidia-gsp and nvidia.ko must all be driver.version: pin userspace.packages to it and rebuild"
	if gpus {
		if c := r.CUDA.CuInit; c != nil && c.Code == selftest.CUDAErrorSystemMismatch {
			j.add(selftest.SevFail, "version.mismatch", "libcuda", "libcuda and the loaded nvidia.ko are different versions (cuInit "+c.Name+")", statusText(c), hint)
		}
		if n := r.NVML.Init; n != nil && n.Code == selftest.NVMLLibRMVersionMismat {
			j.add(selftest.SevFail, "version.mismatch", "libnvidia-ml", "libnvidia-ml and the loaded nvidia.ko are different versions (nvmlInit "+n.Name+")", statusText(n), hint)
		}
	}
	want := ""
	if j.e != nil {
		want = j.e.DriverVersion
	}
	if want != "" && r.NVML.DriverVersion != "" && r.NVML.DriverVersion != want {
		j.add(selftest.SevFail, "version.mismatch", "nvml", fmt.Sprintf("NVML reports driver %s, recipe driver.version = %s", r.NVML.DriverVersion, want),
			"nvmlSystemGetDriverVersion="+r.NVML.DriverVersion, hint)
	}
	// The files themselves, whether or not anything loaded: each .ko's modinfo version
	// and the version in the libraries' file names (libcuda.so.550.163.01).
	ref, refName := want, "recipe driver.version"
	if ref == "" {
		ref, refName = r.NVML.DriverVersion, "NVML reports driver"
	}
	for _, f := range []struct{ what, file string }{{"libcuda", r.CUDA.LibraryFile}, {"libnvidia-ml", r.NVML.LibraryFile}} {
		if v := selftest.LibraryVersion(f.file); v != "" && ref != "" && v != ref {
			j.add(selftest.SevFail, "version.mismatch", f.what, fmt.Sprintf("%s is %s (version %s), %s %s", f.what, f.file, v, refName, ref), f.what+"="+f.file, hint)
		}
	}
	for _, m := range r.Modules {
		// A loaded module's /sys version is judged below; the same number twice is one fault.
		if m.KoVersion == "" || !strings.HasPrefix(m.Name, "nvidia") || ref == "" || m.KoVersion == ref || m.KoVersion == m.Version {
			continue
		}
		j.add(selftest.SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("%s.ko in the image is version %s (%s), %s %s", m.Name, m.KoVersion, moduleOutcome(&m), refName, ref),
			"modinfo "+orDefault(m.File, m.Name+".ko")+": version="+m.KoVersion, hint)
	}
	for _, m := range r.Modules {
		if m.Version == "" || !strings.HasPrefix(m.Name, "nvidia") {
			continue
		}
		switch {
		case want != "" && m.Version != want:
			j.add(selftest.SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("module %s is version %s, recipe driver.version = %s", m.Name, m.Version, want),
				"/sys/module/"+m.Name+"/version="+m.Version, hint)
		case want == "" && r.NVML.DriverVersion != "" && m.Version != r.NVML.DriverVersion:
			j.add(selftest.SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("module %s is version %s, NVML reports driver %s", m.Name, m.Version, r.NVML.DriverVersion),
				"/sys/module/"+m.Name+"/version="+m.Version, hint)
		}
	}
}

// gpusUp fails each GPU sysfs shows that neither CUDA nor NVML knows while they know
// others: nvidia.ko loaded but did not bring this one up (a card the driver branch does
// not support, such as an RTX 5090 under 550; RmInitAdapter failed; another driver
// holds it). Every later phase runs over the GPUs CUDA knows, so without this such a box
// passes on the cards that work. When neither knows any GPU, cuda.init and the stall
// findings say why.
func (j *judge) gpusUp(nvidia *selftest.Module) {
	r := j.r
	var down []int
	nvml := 0
	for i, g := range r.GPUs {
		if g.NVML != nil {
			nvml++
		} else if r.DeviceOf(i) == nil {
			down = append(down, i)
		}
	}
	if len(down) == 0 || len(down) == len(r.GPUs) {
		return
	}
	for _, i := range down {
		g := &r.GPUs[i]
		ev := fmt.Sprintf("sysfs %s device %s; CUDA lists %d device(s), NVML %d", g.BDF, g.Device, len(r.CUDA.Devices), nvml)
		for _, l := range nvidia.KernelLog {
			if bdfInLine(l, g.BDF) {
				ev += "; " + l
				break
			}
		}
		sev, hint := selftest.SevFail, "check that driver.version supports this card (an RTX 5090 needs 570 or later), that no other driver (vfio-pci, nouveau) holds it, and the kernel log for 'RmInitAdapter failed' or Xid on this GPU"
		if j.e == nil {
			// Run by hand, not by the image (which passes its recipe): a container
			// given some of its host's GPUs sees them all in sysfs.
			sev, hint = selftest.SevWarn, hint+"; run by hand, a container or CUDA_VISIBLE_DEVICES can hide a GPU sysfs shows (with --recipe this fails)"
		}
		j.add(sev, "gpus.down", fmt.Sprintf("GPU%d", i),
			fmt.Sprintf("%s is in sysfs (device %s) but neither CUDA nor NVML knows it: nvidia.ko did not bring it up, and no test ran on it", j.gpuLabel(i), g.Device),
			ev, hint)
	}
}

// bdfInLine says whether a kernel line names the GPU at bdf (sysfs's form), in
// any of the forms the kernel and NVRM print it.
func bdfInLine(line, bdf string) bool {
	return bdf != "" && kmsg.FindBDF(line) == bdf
}

// vramSlackDiv bounds how much less memory than platform.vram a GPU may report (one
// part in vramSlackDiv) before gpus.vram warns: NVML's total moves a little with ECC
// and the driver's reservations, while a 24 GB card among 48 GB ones or OverrideFbSize's
// 30 GiB on a 48 GB card is a third or more below.
const vramSlackDiv = 8

// registryDwords is the running nvidia module's NVreg_RegistryDwords, "" when unread.
func (j *judge) registryDwords() string {
	if m := findModule(j.r.Modules, "nvidia"); m != nil {
		return m.Parameters["NVreg_RegistryDwords"]
	}
	return ""
}

// gpuIdentity checks the model, memory size and NUMA placement against the platform.
func (j *judge) gpuIdentity() {
	if j.e == nil {
		return
	}
	for i, g := range j.r.GPUs {
		if m := j.e.GPUModel; m != "" {
			if name := j.r.GPUName(i); name != "" && !strings.Contains(strings.ToLower(name), strings.ToLower(m)) {
				j.add(selftest.SevWarn, "gpus.model", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s is %q, recipe platform.gpu_model = %q", j.gpuLabel(i), name, m),
					name, "the image was built for other cards: check the recipe's platform against this box")
			}
		}
		if vram, src := j.r.GPUVRAM(i); vram > 0 && vram < j.e.VRAMBytes-j.e.VRAMBytes/vramSlackDiv { // no platform.vram: a bound of 0
			ev := fmt.Sprintf("%s %s, recipe platform.vram %s", src, selftest.HumanBytes(vram), selftest.HumanBytes(j.e.VRAMBytes))
			hint := "the card has less memory than the recipe's platform: a card of another model or memory size (a 24 GB card among 48 GB ones), or a driver setting that hides memory; check the recipe against the box"
			if dw := j.registryDwords(); strings.Contains(dw, "OverrideFbSize") {
				ev += "; NVreg_RegistryDwords=" + dw
				hint = "OverrideFbSize in NVreg_RegistryDwords hides the memory above it (a diagnostic so static BAR1 fits, never for production): remove it from driver.params and use driver.p2p = \"dynamic-bar1\" for cards whose BAR1 is smaller than VRAM"
			}
			j.add(selftest.SevWarn, "gpus.vram", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s has %s of memory (%s), recipe platform.vram = %s", j.gpuLabel(i), selftest.HumanBytes(vram), src, selftest.HumanBytes(j.e.VRAMBytes)),
				ev, hint)
		}
		if i < len(j.e.GPUNUMA) {
			want := j.e.GPUNUMA[i]
			// numa_node -1 is what a one-node box reports; it only contradicts a recipe
			// that places the GPU on another node.
			if g.NUMANode != want && !(g.NUMANode < 0 && want == 0) {
				j.add(selftest.SevWarn, "gpus.numa", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s is on NUMA node %d, recipe platform.gpu_numa says %d", j.gpuLabel(i), g.NUMANode, want),
					fmt.Sprintf("/sys/bus/pci/devices/%s/numa_node=%d", g.BDF, g.NUMANode), "a card in another slot than the recipe expects: fix gpu_numa, or move the card (cross-socket pairs are SYS)")
			}
		}
	}
}
