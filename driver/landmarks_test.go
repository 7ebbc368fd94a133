package driver

// seriesLandmarks holds, per driver version (a recipes/drivers/<version>-p2p.toml),
// per file of NVIDIA's tree, strings that only that version's series puts
// there: TestSeriesAppliesToPinnedTree requires each after applying the series,
// so a series that applies to the wrong place (a generated HAL table's wrong
// slot, a function of the same shape) cannot pass. A few per patch; add the
// entry with the series.
var seriesLandmarks = map[string]map[string][]string{
	"550.163.01": {
		"kernel-open/nvidia/nv-reg.h":                   {"NV_DEFINE_REG_ENTRY_GLOBAL(__NV_ENABLE_RESIZABLE_BAR, 1);"},
		"kernel-open/nvidia/nv-pci.c":                   {"#if defined(NV_PCI_RESIZE_RESOURCE_HAS_EXCLUDE_BARS_ARG)"},
		"src/nvidia/generated/g_kern_bus_nvoc.c":        {"pThis->__kbusIsPcieBar1P2PMappingSupported__ = &kbusIsPcieBar1P2PMappingSupported_GH100;\n    }\n    // default"},
		"src/nvidia/src/kernel/gpu/bif/kernel_bif.c":    {"pKernelBif->forceP2PType = NV_REG_STR_RM_FORCE_P2P_TYPE_BAR1P2P;"},
		"src/nvidia/src/kernel/rmapi/nv_gpu_ops.c":      {"aperture = GMMU_APERTURE_SYS_NONCOH;", "_nvGpuOpsDynBar1Release(device, hPhysHandle)", "_nvGpuOpsDynBar1DestroyAll(device);"},
		"src/nvidia/src/kernel/gpu/bus/kern_bus.c":      {"return KBUS_BAR1_P2P_MODE_DYNAMIC;"},
		"src/nvidia/src/kernel/platform/p2p/p2p_caps.c": {"_kp2pCapsBar1P2PRequired(gpuMask)"},
		"kernel-open/conftest.sh":                       {"#if IS_ENABLED(CONFIG_DRM_TTM_HELPER)"},
	},
}
