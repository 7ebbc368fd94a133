package verdict

import (
	"fmt"
	"slices"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// p2pModes judges the BAR1 P2P mode the patched driver logged for each GPU
// (driver/patches/README.md, "The mode line"): a static GPU and a dynamic GPU never
// talk BAR1 P2P to each other, so such a pair fails; a GPU the driver gave no BAR1
// P2P (mode none) fails where the recipe wants P2P and warns without a recipe, naming
// the driver's reason: the line is the one finding that says why the GPU's peer copies
// fail.
func (j *judge) p2pModes() {
	r := j.r
	j.modeLinesMissing()
	for i, g := range r.GPUs {
		if g.P2PMode == selftest.P2PModeNone && (j.p2pWanted() || j.e == nil) && len(r.GPUs) > 1 {
			j.add(j.p2pSeverity(), "p2p.mode_none", fmt.Sprintf("GPU%d", i),
				fmt.Sprintf("%s: the driver set up no BAR1 P2P (mode none, %s)", j.gpuLabel(i), orDefault(field(g.P2PModeLine, "why"), "no reason given")),
				g.P2PModeLine, j.noneHint(field(g.P2PModeLine, "why")))
		}
	}
	for a := range r.GPUs {
		for b := a + 1; b < len(r.GPUs); b++ {
			ma, mb := r.GPUs[a].P2PMode, r.GPUs[b].P2PMode
			if ma == "" || mb == "" || ma == mb || ma == selftest.P2PModeNone || mb == selftest.P2PModeNone {
				continue
			}
			j.add(selftest.SevFail, "p2p.mode_mixed", pairSubject(a, b),
				fmt.Sprintf("%s is in %s BAR1 mode and %s in %s: a static and a dynamic GPU never talk BAR1 P2P", j.gpuLabel(a), ma, j.gpuLabel(b), mb),
				r.GPUs[a].P2PModeLine+" | "+r.GPUs[b].P2PModeLine,
				"the driver decides the mode per GPU from its BAR1 and memory sizes (driver/patches/README.md's decision table): give the box cards of one model with the same BAR1 (BIOS Resizable BAR on for every slot), or keep these two out of one job")
		}
	}
}

// modeLinesMissing fails a box whose image carries peerboot's P2P series when a GPU of
// a chip the series covers, which the driver answered for (NVML or CUDA knows it, so
// RM set up its BAR1), has no mode line: the series' nvidia.ko writes one for every
// such GPU, so a GPU without one runs another driver, a stock nvidia.ko (a distribution
// or DKMS package over the image's, another image), or the kernel log lost the line.
// One finding for the box: a wrong driver is one fault, however many GPUs show it.
func (j *judge) modeLinesMissing() {
	if j.e == nil || len(j.e.ModeLineChips) == 0 {
		return
	}
	r := j.r
	var missing []string
	logged := 0
	for i, g := range r.GPUs {
		if g.P2PMode != "" {
			logged++
			continue
		}
		if (g.NVML != nil || g.CUDA != nil) && slices.Contains(j.e.ModeLineChips, r.P2PChip(i)) {
			missing = append(missing, j.gpuLabel(i)+" "+r.P2PChip(i))
		}
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("no peerboot-p2p mode line for %s: the image's nvidia.ko (driver %s with peerboot's P2P series, driver.p2p = %s) logs one for every %s GPU when it sets up BAR1, so the driver that ran is not the image's",
		strings.Join(missing, ", "), j.e.DriverVersion, j.e.P2P, strings.Join(j.e.ModeLineChips, "/"))
	hint := "a stock (unpatched) nvidia driver has no BAR1 P2P: boot the image built from this recipe (peerboot build; check the stick or PXE server holds that build), and that nothing loaded another nvidia.ko first (a distribution or DKMS nvidia package on a disk the box booted, a module loaded before the init's); the evidence names the version that ran"
	if logged > 0 {
		msg = fmt.Sprintf("no peerboot-p2p mode line for %s, though %d other GPU(s) have one: the image's nvidia.ko (driver %s with peerboot's P2P series) logs one for every %s GPU when it sets up BAR1",
			strings.Join(missing, ", "), logged, j.e.DriverVersion, strings.Join(j.e.ModeLineChips, "/"))
		hint = "one driver served every GPU, so the kernel log most likely lost these lines (a full ring buffer): look for 'peerboot-p2p: bar1-mode' in dmesg, reboot and run the self-test again; if they stay missing, report it with this JSON"
	}
	j.add(selftest.SevFail, "p2p.mode_missing", "nvidia", msg, j.loadedDriver(), hint)
}

// loadedDriver says which nvidia.ko ran, from what the report has: its modinfo version
// and file, the running module's sysfs version, NVML's driver version.
func (j *judge) loadedDriver() string {
	var parts []string
	if m := findModule(j.r.Modules, "nvidia"); m != nil {
		if m.KoVersion != "" {
			parts = append(parts, "modinfo "+orDefault(m.File, "nvidia.ko")+": version="+m.KoVersion)
		} else if m.File != "" {
			parts = append(parts, "nvidia.ko file "+m.File)
		}
		if m.Version != "" {
			parts = append(parts, "/sys/module/nvidia/version="+m.Version)
		}
	}
	if v := j.r.NVML.DriverVersion; v != "" {
		parts = append(parts, "NVML driver "+v)
	}
	parts = append(parts, "recipe driver.version="+j.e.DriverVersion)
	return strings.Join(parts, "; ")
}

func (j *judge) noneHint(why string) string {
	switch why {
	case "small-bar1":
		return "BAR1 is below 1 GiB: turn on Resizable BAR (and Above 4G decoding) in the BIOS for this slot"
	case "type-off", "regkey-off":
		return "a registry key turned BAR1 P2P off: check NVreg_RegistryDwords in modules[].parameters and the recipe's driver parameters"
	case "bar1-below-fb":
		if j.p2pMode() == P2PDynamicBAR1 {
			// The image's driver has dynamic BAR1: a driver without it ran instead.
			return "the recipe already says driver.p2p = \"dynamic-bar1\", but the nvidia.ko that ran has no dynamic BAR1 (the series' 0003-rm-dynamic-bar1-p2p.patch): boot the image built from this recipe, check driver.patches lists that patch, and that no other nvidia.ko (a static-BAR1 build, a distribution or DKMS package) loaded first"
		}
		return "BAR1 cannot hold the memory and the driver has no dynamic BAR1: use driver.p2p = \"dynamic-bar1\""
	}
	return "see the driver's line in kernel_log and driver/patches/README.md's decision table"
}

// field returns the value of key=value in a mode line, "" when absent.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// peerMem judges the peermem phase: wrong data or a fault after data moved fails; a
// form the driver declined at setup warns (managed memory, which NCCL does not use) or
// fails (VMM, exported handles and legacy IPC handles between peers, NCCL's P2P/CUMEM
// and P2P/IPC paths, when the recipe wants P2P).
func (j *judge) peerMem() {
	for _, m := range j.r.PeerMem {
		a, b := j.r.GPUIndex(m.Owner), j.r.GPUIndex(m.Peer)
		name := fmt.Sprintf("%s memory of GPU%d used by GPU%d", m.Kind, a, b)
		subject := fmt.Sprintf("GPU%d->GPU%d %s", a, b, m.Kind)
		if m.Owner == m.Peer {
			name = fmt.Sprintf("%s memory of GPU%d (local form)", m.Kind, a)
			subject = fmt.Sprintf("GPU%d %s", a, m.Kind)
		}
		ev := fmt.Sprintf("kind=%s owner=%d peer=%d bytes=%d step=%s calls=%s", m.Kind, m.Owner, m.Peer, m.Bytes, orDefault(m.Step, "-"), strings.Join(m.Calls, "; "))
		switch {
		case m.Mismatch != nil:
			mm := m.Mismatch
			hint := "the " + m.Step + " through this path landed in the wrong place: " + j.mappingAdvice()
			if j.isInjectedMem(m) {
				hint = "this is the word --inject-corruption inverted on purpose: the data check works; run without the flag for a verdict"
			}
			j.add(selftest.SevFail, "peermem.corrupt", subject,
				fmt.Sprintf("%s: %d word(s) wrong in the %s, first at byte %#x (want 0x%08x, got 0x%08x)", name, mm.Words, m.Step, mm.Offset, mm.Want, mm.Got),
				ev+fmt.Sprintf(" offset=%d want=0x%08x got=0x%08x words=%d", mm.Offset, mm.Want, mm.Got, mm.Words), hint)
		case m.Error != "":
			j.add(selftest.SevFail, "peermem.error", subject, fmt.Sprintf("%s failed in the %s: %s", name, orDefault(m.Step, "check"), m.Error), ev+" error="+m.Error,
				j.copyErrorHint(m.Error)+memHint(m.Kind))
		case m.Refused != "":
			sev := selftest.SevWarn
			if m.Kind != selftest.MemManaged && m.Owner != m.Peer && j.p2pWanted() {
				sev = selftest.SevFail
			}
			j.add(sev, "peermem.refused", subject, fmt.Sprintf("%s: the driver declined it: %s", name, m.Refused), ev+" refused="+m.Refused, refusedHint(m.Kind))
		case !m.Verified:
			j.add(selftest.SevWarn, "peermem.unverified", subject, name+": not verified", ev, "a p2pcheck bug: report it with this JSON")
		}
	}
}

func memHint(kind string) string {
	if kind == selftest.MemManaged {
		return "; managed memory reaches the peer through UVM's own mapping (nvidia-uvm), not cuCtxEnablePeerAccess: an Xid 31 (MMU fault) here is the issue-27 managed-memory path"
	}
	return ""
}

func refusedHint(kind string) string {
	switch kind {
	case selftest.MemManaged:
		return "programs that share cudaMallocManaged memory between these GPUs will get an error instead of data (no corruption): keep managed buffers on one GPU, or check nvidia-uvm is loaded (modules) and the driver's managed-memory path"
	case selftest.MemVMM:
		return "NCCL between processes (P2P/CUMEM, its default) maps peer memory this way: expect it to fall back to SHM or fail; check the driver's peer mapping of cuMemMap'd memory"
	case selftest.MemCUDAIPC:
		return "programs that share GPU memory between processes with cudaIpcOpenMemHandle (torch.multiprocessing, NCCL's P2P/IPC) will fail on this pair: check the driver's peer mapping of another process's cuMemAlloc memory"
	}
	return "a second process importing this GPU's memory (NCCL P2P/CUMEM, CUDA IPC) will be refused: check the driver's export of cuMemCreate memory as a file descriptor"
}

// isInjectedMem says whether m is the check --inject-corruption=<kind> corrupted.
func (j *judge) isInjectedMem(m selftest.PeerMem) bool {
	msg := j.injectedMessage()
	return msg != "" && strings.Contains(msg, fmt.Sprintf("in the %s check GPU %d -> GPU %d,", m.Kind, m.Owner, m.Peer))
}
