package driver

// seriesLandmarks holds, per driver version (a recipes/drivers/<version>-p2p.toml),
// per file of NVIDIA's tree, strings that only that version's series puts
// there: TestSeriesAppliesToPinnedTree requires each after applying the series,
// so a series that applies to the wrong place (a generated HAL table's wrong
// slot, a function of the same shape) cannot pass. A few per patch; add the
// entry with the series.
var seriesLandmarks = map[string]map[string][]string{
	"550.163.01": {
		"kernel-open/nvidia/nv-reg.h": {"NV_DEFINE_REG_ENTRY_GLOBAL(__NV_ENABLE_RESIZABLE_BAR, 1);"},
		"kernel-open/nvidia/nv-pci.c": {"#if defined(NV_PCI_RESIZE_RESOURCE_HAS_EXCLUDE_BARS_ARG)"},
		"src/nvidia/generated/g_kern_bus_nvoc.c": {
			"pThis->__kbusIsPcieBar1P2PMappingSupported__ = &kbusIsPcieBar1P2PMappingSupported_GH100;\n    }\n    // default",
			// kbusHasPcieBar1P2PMapping stays unbound on AD102 (0002's header says why).
			"= &kbusHasPcieBar1P2PMapping_GH100;\n    }\n    //\n    // peerboot P2P series: deliberately not bound for AD102",
		},
		"src/nvidia/src/kernel/gpu/bif/kernel_bif.c": {
			"pKernelBif->forceP2PType = NV_REG_STR_RM_FORCE_P2P_TYPE_BAR1P2P;",
			// the 0x11 override follows the effective P2P type
			"(pKernelBif->forceP2PType == NV_REG_STR_RM_FORCE_P2P_TYPE_BAR1P2P) &&\n        (pKernelBif->p2pOverride == BIF_P2P_NOT_OVERRIDEN))",
		},
		"src/nvidia/src/kernel/rmapi/nv_gpu_ops.c": {
			"aperture = GMMU_APERTURE_SYS_NONCOH;", "_nvGpuOpsDynBar1Release(device, hPhysHandle)", "_nvGpuOpsDynBar1DestroyAll(device);",
			"if (!kbusHasBar1P2PConnection(pMappingGpu, pMappingKernelBus,",
			"if ((status != NV_OK) && bar1Peer.bNewWindow)",
		},
		"src/nvidia/src/kernel/gpu/bus/kern_bus.c":      {"return KBUS_BAR1_P2P_MODE_DYNAMIC;", "return kbusHasPcieBar1P2PMapping_GH100(pGpu0, pKernelBus0, pGpu1, pKernelBus1);"},
		"src/nvidia/src/kernel/platform/p2p/p2p_caps.c": {"_kp2pCapsBar1P2PRequired(gpuMask)"},
		// managed memory: a BAR1 pair UVM would reach through the PEER aperture is
		// enabled for external mappings only
		"kernel-open/nvidia-uvm/uvm_va_space.c":                       {"    if (!uvm_gpu_peer_caps(gpu0, gpu1)->bar1_external_mappings_only) {\n        processor_mask_array_set(va_space->can_access, gpu0->id, gpu1->id);"},
		"src/nvidia/interface/nv_uvm_types.h":                         {"    NvBool bar1ExternalMappingsOnly;\n} UvmGpuP2PCapsParams;"},
		"kernel-open/conftest.sh":                                     {"#if IS_ENABLED(CONFIG_DRM_TTM_HELPER)"},
		"src/nvidia/src/kernel/gpu/bus/arch/maxwell/kern_bus_gm107.c": {"peerboot-p2p: bar1-mode gpu=%u pci=%04x:%02x:%02x.0 chip=%s bar1_mib=%llu fb_mib=%llu mode=%s why=%s\\n"},
	},
	// 580.142: the HAL slots moved since 550 (GA102|AD102 mask 0x00100800 from this
	// tree's g_chips2halspec_nvoc.c); kbusHasPcieBar1P2PMapping must stay unbound
	// for them (its GH100 binding is followed directly by the default branch).
	"580.142": {
		"kernel-open/nvidia/nv-reg.h": {"NV_DEFINE_REG_ENTRY_GLOBAL(__NV_ENABLE_RESIZABLE_BAR, 1);"},
		"src/nvidia/generated/g_kern_bus_nvoc.c": {
			"& 0x00100800UL) )) /* ChipHal: GA102 | AD102 */\n    {\n        pThis->__kbusIsPcieBar1P2PMappingSupported__ = &kbusIsPcieBar1P2PMappingSupported_GH100;",
			"& 0x00100800UL) )) /* ChipHal: GA102 | AD102 */\n    {\n        pThis->__kbusGetBar1P2PDmaInfo__ = &kbusGetBar1P2PDmaInfo_GH100;",
			"pThis->__kbusHasPcieBar1P2PMapping__ = &kbusHasPcieBar1P2PMapping_GH100;\n    }\n    // default",
		},
		"src/nvidia/src/kernel/gpu/bif/kernel_bif.c":                 {"pKernelBif->pcieP2PType = NV_REG_STR_RM_PCIEP2P_TYPE_BAR1;", "kbusIsBar1P2PTypeSelected(pGpu))"},
		"src/nvidia/src/kernel/gpu/bus/kern_bus.c":                   {"return IsGA102(pGpu) || IsAD102(pGpu) || IsGB202(pGpu);", "return KBUS_BAR1_P2P_MODE_DYNAMIC;"},
		"src/nvidia/src/kernel/platform/p2p/p2p_caps.c":              {"else if (_kp2pCapsNoMailboxP2P(gpuMask))"},
		"src/nvidia/src/kernel/gpu/bus/arch/pascal/kern_bus_gp100.c": {"return kbusRemoveP2PMappingForBar1P2P_HAL(pGpu0, pKernelBus0, pGpu1, pKernelBus1, attributes);"},
		"src/nvidia/src/kernel/rmapi/nv_gpu_ops.c": {
			"_nvGpuOpsBar1PeerAddrs(pBar1Peer, offset, mappingPageSize,\n                                                   pteCount, physicalAddresses)",
			"_nvGpuOpsBar1PeerAddrs(pBar1Peer, offset, mappingPageSize,\n                                                   physAddrCount, physicalAddresses)",
			"_nvGpuOpsDynBar1Release(device, hPhysHandle)",
			"_nvGpuOpsDynBar1DestroyAll(device);",
			// dynamic windows are mapped at the allocation's page size
			"BUS_MAP_FB_FLAGS_MAP_UNICAST | pageSizeFlag, NULL);",
		},
		"src/nvidia/src/kernel/gpu/bus/arch/hopper/kern_bus_gh100.c":               {"(kbusGetBar1P2PMode(pGpu0, pKernelBus0) == KBUS_BAR1_P2P_MODE_STATIC))"},
		"src/nvidia/src/kernel/gpu/mem_mgr/arch/hopper/virt_mem_allocator_gh100.c": {"bar1PhysAddr - gpumgrGetGpuPhysFbAddr(pPeerGpu),"},
		"src/nvidia/src/kernel/gpu/bus/arch/maxwell/kern_bus_gm107.c": {
			"peerboot-p2p: bar1-mode gpu=%u pci=%04x:%02x:%02x.0 chip=%s bar1_mib=%llu fb_mib=%llu mode=%s why=%s\\n",
			"bStaticBar1Supported  = bPeerbootStaticForced;",
		},
		// managed memory: a BAR1 pair UVM would reach through the PEER aperture is
		// enabled for external mappings only
		"kernel-open/nvidia-uvm/uvm_va_space.c": {"    if (!uvm_parent_gpus_bar1_external_mappings_only(gpu0->parent, gpu1->parent)) {\n        processor_mask_array_set(va_space->can_access, gpu0->id, gpu1->id);"},
		"src/nvidia/interface/nv_uvm_types.h":   {"    NvBool bar1ExternalMappingsOnly;\n} UvmGpuP2PCapsParams;"},
		"kernel-open/conftest.sh":               {"#if IS_ENABLED(CONFIG_DRM_TTM_HELPER)"},
	},
	// 595.45.04: as 580.142, static BAR1 is NVIDIA's generic Turing+ code, so the series
	// binds only the BAR1-P2P slots, for GA102|AD102 (mask 0x00100800), and leaves
	// kbusHasPcieBar1P2PMapping unbound for them; no pci_resize_resource patch.
	"595.45.04": {
		"kernel-open/nvidia/nv-reg.h": {"NV_DEFINE_REG_ENTRY_GLOBAL(__NV_ENABLE_RESIZABLE_BAR, 1);"},
		"src/nvidia/generated/g_kern_bus_nvoc.c": {
			"& 0x00100800UL) )) /* ChipHal: GA102 | AD102 */\n    {\n        pThis->__kbusIsPcieBar1P2PMappingSupported__ = &kbusIsPcieBar1P2PMappingSupported_GH100;",
			"& 0x00100800UL) )) /* ChipHal: GA102 | AD102 */\n    {\n        pThis->__kbusGetBar1P2PDmaInfo__ = &kbusGetBar1P2PDmaInfo_GH100;",
			"pThis->__kbusHasPcieBar1P2PMapping__ = &kbusHasPcieBar1P2PMapping_GH100;\n    }\n    // default",
		},
		"src/nvidia/src/kernel/gpu/bif/kernel_bif.c": {"pKernelBif->pcieP2PType = NV_REG_STR_RM_PCIEP2P_TYPE_BAR1;\n    }\n\n    if (osReadRegistryDword(pGpu, NV_REG_STR_RM_PCIEP2P_TYPE", "kbusIsBar1P2PTypeSelected(pGpu))"},
		"src/nvidia/src/kernel/gpu/bus/kern_bus.c":   {"return IsGA102(pGpu) || IsAD102(pGpu) || IsGB202(pGpu);", "return KBUS_BAR1_P2P_MODE_DYNAMIC;"},
		"src/nvidia/src/kernel/gpu/bus/arch/maxwell/kern_bus_gm107.c": {
			"peerboot-p2p: bar1-mode gpu=%u pci=%04x:%02x:%02x.0 chip=%s bar1_mib=%llu fb_mib=%llu mode=%s why=%s\\n",
			"bStaticBar1Supported  = bPeerbootStaticForced;",
		},
		"src/nvidia/src/kernel/gpu/bus/arch/pascal/kern_bus_gp100.c": {"return kbusRemoveP2PMappingForBar1P2P_HAL(pGpu0, pKernelBus0, pGpu1, pKernelBus1, attributes);"},
		"src/nvidia/src/kernel/platform/p2p/p2p_caps.c":              {"else if (_kp2pCapsBar1P2PRequired(gpuMask))"},
		"src/nvidia/src/kernel/rmapi/nv_gpu_ops.c": {
			"_nvGpuOpsBar1PeerAddrs(pBar1Peer, offset, mappingPageSize,\n                                                   pteCount, physicalAddresses)",
			"_nvGpuOpsBar1PeerAddrs(pBar1Peer, offset, mappingPageSize,\n                                                   physAddrCount, physicalAddresses)",
			"_nvGpuOpsDynBar1Release(device, hPhysHandle)",
			"_nvGpuOpsDynBar1DestroyAll(device);",
			// dynamic windows are mapped at the allocation's page size
			"BUS_MAP_FB_FLAGS_MAP_UNICAST | pageSizeFlag, NULL);",
		},
		"src/nvidia/src/kernel/gpu/bus/arch/hopper/kern_bus_gh100.c":               {"(kbusGetBar1P2PMode(pGpu0, pKernelBus0) == KBUS_BAR1_P2P_MODE_STATIC))"},
		"src/nvidia/src/kernel/gpu/mem_mgr/arch/hopper/virt_mem_allocator_gh100.c": {"bar1Offset = bar1PhysAddr - gpumgrGetGpuPhysFbAddr(pPeerGpu);"},
		// managed memory: a BAR1 pair UVM would reach through the PEER aperture is
		// enabled for external mappings only
		"kernel-open/nvidia-uvm/uvm_va_space.c": {"    if (!uvm_parent_gpus_bar1_external_mappings_only(gpu0->parent, gpu1->parent)) {\n        processor_mask_array_set(va_space->can_access, gpu0->id, gpu1->id);"},
		"src/nvidia/interface/nv_uvm_types.h":   {"    NvBool bar1ExternalMappingsOnly;\n} UvmGpuP2PCapsParams;"},
		"kernel-open/conftest.sh":               {"#if IS_ENABLED(CONFIG_DRM_TTM_HELPER)"},
	},
}
