package verdict

import "github.com/peerboot/peerboot/selftest"

// Reports as a real boot would produce them; tests mutate copies.

func vmReport() *selftest.Report {
	r := selftest.New()
	r.Recipe = selftest.RecipeRef{Name: "default", Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	r.Kernel = selftest.Kernel{Release: "6.1.0-peerboot", Cmdline: "console=ttyS0,115200 panic=-1"}
	r.Modules = []selftest.Module{
		{Name: "nvidia", File: "updates/nvidia.ko", Params: "", Result: selftest.ModENODEV, Errno: 19, Error: "no such device",
			KernelLog: []string{"NVRM: No NVIDIA GPU found."}},
		{Name: "nvidia-uvm", Result: selftest.ModSkipped, Error: "nvidia not loaded"},
	}
	r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Loaded: true, CuInit: &selftest.Status{Name: "CUDA_ERROR_NO_DEVICE", Code: 100}, DriverVersion: 12020}
	r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Loaded: true, Init: &selftest.Status{Name: "NVML_ERROR_DRIVER_NOT_LOADED", Code: 9}}
	r.Durations = []selftest.Duration{{Phase: "precheck", MS: 3}, {Phase: "cuda", MS: 41}, {Phase: "nvml", MS: 7}}
	r.StartedAt = "2025-06-01T12:00:00Z"
	return r
}

func gpuReport(n int) *selftest.Report {
	r := vmReport()
	r.Recipe.Name = "epyc-4gpu"
	for i := 0; i < n; i++ {
		r.GPUs = append(r.GPUs, selftest.GPU{
			BDF: "0000:0" + string(rune('1'+i)) + ":00.0", Vendor: "0x10de", Device: "0x2684", Class: "0x030000",
			Link:      selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16},
			BAR1Bytes: 32 << 30,
		})
	}
	r.Modules = []selftest.Module{{Name: "nvidia", Params: "NVreg_EnableResizableBar=1", Result: selftest.ModLoaded, KernelLog: []string{}},
		{Name: "nvidia-uvm", Result: selftest.ModLoaded}}
	r.CUDA.CuInit = &selftest.Status{Name: "CUDA_SUCCESS", Code: 0}
	r.NVML.Init = &selftest.Status{Name: "NVML_SUCCESS", Code: 0}
	r.NVML.DriverVersion = "550.163.01"
	return r
}
