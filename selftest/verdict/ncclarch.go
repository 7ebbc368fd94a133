package verdict

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// noKernelImage are the CUDA errors NCCL meets when its library has no code the GPU
// can run (no cubin of the GPU's major arch, no PTX to JIT): at init, where NCCL reads
// its kernels' attributes, or at the first launch. cudaErrorNoKernelImageForDevice
// (209) and cudaErrorInvalidDeviceFunction (98) as cudaGetErrorString words them, and
// CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorSymbolNotFound (500), the form a device-linked
// library has shown on an arch it was not built for.
var noKernelImage = []string{
	"no kernel image is available",
	"no binary for gpu",
	"invalid device function",
	"named symbol not found",
	"device kernel image is invalid",
	"cudaerrornokernelimagefordevice",
	"cuda_error_no_binary_for_gpu",
}

// ncclArch names an NCCL that cannot run on the box's GPUs: the all-reduce failed with
// one of noKernelImage's errors. It returns false when the error is something else.
func (j *judge) ncclArch(n *selftest.NCCL) bool {
	low := strings.ToLower(n.Error)
	matched := ""
	for _, s := range noKernelImage {
		if strings.Contains(low, s) {
			matched = s
			break
		}
	}
	if matched == "" {
		return false
	}
	nccl := "NCCL"
	if v := ncclVersionString(n.Version); v != "" {
		nccl += " " + v
	}
	if n.LibraryFile != "" {
		nccl += " (" + n.LibraryFile + ")"
	}
	// Name every GPU arch the box has, newest first matters little: usually one model.
	var gpus []string
	seen := map[string]bool{}
	for _, d := range j.r.CUDA.Devices {
		if d.CC == "" || seen[d.CC] {
			continue
		}
		seen[d.CC] = true
		gpus = append(gpus, fmt.Sprintf("%s (sm_%s)", strings.TrimPrefix(strings.TrimPrefix(d.Name, "NVIDIA "), "GeForce "), strings.ReplaceAll(d.CC, ".", "")))
	}
	on := "this box's GPUs"
	if len(gpus) > 0 {
		on = strings.Join(gpus, ", ")
	}
	driver := ""
	if j.r.NVML.DriverVersion != "" {
		driver = ", driver " + j.r.NVML.DriverVersion
	}
	msg := fmt.Sprintf("%s has no kernels that run on %s%s: its all-reduce failed with %q", nccl, on, driver, matched)
	hint := "lay an NCCL built for this GPU's arch (compiled for its sm_XY, or with PTX the driver can JIT): " +
		"for the RTX 5090 (sm_120) NCCL 2.25.1 or later built with CUDA 12.8 or later; Debian's libnccl2 is built with its own CUDA 12.4 " +
		"and stops at sm_90 whatever its version (docs/userspace.md; `peerboot build` warns when the image's NCCL lacks the platform's arch)"
	j.add(selftest.SevFail, "nccl.arch", "nccl", msg, n.Error, hint)
	return true
}

// ncclVersionString turns ncclGetVersion's code into "2.29.7": NCCL 2.9 on encode
// major*10000 + minor*100 + patch, older ones major*1000 + minor*100 + patch.
func ncclVersionString(code int) string {
	switch {
	case code >= 20900:
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	case code >= 1000:
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	case code > 0:
		return strconv.Itoa(code)
	}
	return ""
}
