package selftest

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/recipe"
)

// Phase names, as durations and deadline_exceeded spell them (PhaseNCCL is in schema.go).
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

// overrateFactor bounds a measured peer copy from above: more than 5% over the link's
// theoretical rate means the copies are not going where the test thinks they go.
const overrateFactor = 1.05

// Expect is what the recipe promises about the box and the image: the verdict rules
// judge a report against it. The zero value of a field means "not stated", and the
// rule that needs it is skipped or softened.
type Expect struct {
	GPUs      int    // platform.gpus
	GPUModel  string // platform.gpu_model, matched as a substring of the NVML/CUDA name
	VRAMBytes int64  // platform.vram, per GPU
	BAR1Bytes int64  // platform.bar1, per GPU
	GPUNUMA   []int  // platform.gpu_numa, by GPU index

	DriverVersion string                       // driver.version
	P2P           string                       // driver.p2p: off, static-bar1, dynamic-bar1; "" unknown
	DriverParams  map[string]map[string]string // driver.params

	RequireP2P   bool                        // selftest.require_p2p
	NoVerify     bool                        // selftest.verify = false: copies are not checked
	MinBusBWGBps float64                     // selftest.min_busbw_gbps; 0: not checked
	Thresholds   map[string]recipe.Threshold // selftest.thresholds, by topology class
	Env          map[string]string           // the recipe's env (NCCL_* and others)
}

// ExpectFrom collects what the verdict rules need from a resolved recipe.
func ExpectFrom(rc *recipe.Recipe) *Expect {
	if rc == nil {
		return nil
	}
	e := expectPlatform(&rc.Platform)
	e.DriverVersion = rc.Driver.Version
	e.P2P = rc.Driver.P2P
	e.DriverParams = rc.Driver.Params
	e.RequireP2P = rc.Selftest.RequireP2P
	e.NoVerify = !rc.Selftest.Verify
	e.MinBusBWGBps = rc.Selftest.MinBusbwGBps
	e.Thresholds = rc.Selftest.Thresholds
	e.Env = rc.Env
	return e
}

// expectPlatform is an Expect that knows only the hardware (the first-cut Judge).
func expectPlatform(p *recipe.Platform) *Expect {
	if p == nil {
		return nil
	}
	return &Expect{GPUs: p.GPUs, GPUModel: p.GPUModel, VRAMBytes: int64(p.VRAM), BAR1Bytes: int64(p.BAR1), GPUNUMA: p.GPUNUMA}
}

// Judge applies the rules to r with only the recipe's platform known, appends their
// findings and settles the verdict. platform is nil when the recipe is unknown.
// Callers that have the whole recipe use JudgeWith(r, ExpectFrom(rc)).
func Judge(r *Report, platform *recipe.Platform) {
	JudgeWith(r, expectPlatform(platform))
}

// JudgeWith applies the rules to r against e (nil: recipe unknown), appends their
// findings and settles the verdict.
func JudgeWith(r *Report, e *Expect) {
	r.Findings = append(r.Findings, Rules(r, e)...)
	r.Settle()
}

// Verdict returns the rule findings for a report judged against a platform only.
func Verdict(r *Report, platform *recipe.Platform) []Finding {
	return Rules(r, expectPlatform(platform))
}

// Rules returns the findings for a report; docs/selftest-findings.md lists every ID.
// The driver-stack rules come first:
//
//   - platform.gpus == 0 (a VM or bench box): nvidia.ko must fail with ENODEV (proof that
//     it links against this kernel and only lacks a device), libcuda must load and cuInit
//     say CUDA_ERROR_NO_DEVICE, and NVML must load (its init may report the driver not
//     loaded, which is the truth without a GPU);
//   - platform.gpus > 0: sysfs must show that many NVIDIA GPUs, nvidia.ko must load and
//     cuInit must succeed.
//
// Without a recipe the GPU count is not checked and the mode follows what sysfs shows.
// Then the P2P rules judge what the later phases measured: BAR1 against VRAM, link
// training, ACS, NVML and CUDA peer status, the copies, the above-BAR1 probe, NCCL and
// the kernel log.
func Rules(r *Report, e *Expect) []Finding {
	j := &judge{r: r, e: e}
	want := len(r.GPUs)
	if e == nil {
		j.add(SevInfo, "platform", "recipe", fmt.Sprintf("no recipe: platform unknown, judging as a box with the %d NVIDIA GPU(s) sysfs shows", want), "", "pass --recipe /etc/peerboot/recipe.toml to check the GPU count")
	} else {
		want = e.GPUs
	}
	stalled := r.DeadlineExceeded
	if r.Stall != nil && r.Stall.Phase != "" {
		stalled = r.Stall.Phase
	}
	// A phase that stalled has no answers to judge; its deadline finding says it all.
	if stalled != "" {
		j.deadline(stalled)
	}
	if e != nil && stalled != PhasePrecheck && len(r.GPUs) != want {
		j.add(SevFail, "gpus.count", "gpus", fmt.Sprintf("found %d NVIDIA GPU(s) in sysfs, recipe platform.gpus = %d", len(r.GPUs), want), fmt.Sprintf("sysfs %d, recipe %d", len(r.GPUs), want),
			"a card missing from sysfs is below the driver: seating, riser, slot power, or BIOS 'Above 4G decoding' / resizable BAR settings")
	}
	j.links()
	nvidia := findModule(r.Modules, "nvidia")
	if want == 0 {
		j.noGPUDriver(nvidia)
		if stalled != PhaseCUDA {
			j.noGPUCUDA(&r.CUDA)
		}
		if stalled != PhaseNVML {
			j.noGPUNVML(&r.NVML)
		}
	} else {
		j.gpuDriver(nvidia)
		if stalled != PhaseCUDA {
			j.gpuCUDA(&r.CUDA)
		}
		if stalled != PhaseNVML {
			j.gpuNVML(&r.NVML)
		}
	}
	for _, m := range r.Modules {
		if m.Name == "nvidia" || m.RequiredBy != "" {
			continue
		}
		if m.Result == ModError {
			j.add(SevWarn, "driver."+m.Name, m.Name, fmt.Sprintf("%s did not load: %s", m.Name, m.Error), moduleOutcome(&m), moduleHint(&m))
		}
	}
	j.versions(want > 0)
	j.gpuIdentity()
	j.bar1()
	j.display()
	j.replays()
	j.iommu()
	j.acs()
	j.p2pStatus()
	j.ptx()
	j.copies()
	j.latencies()
	j.injected()
	j.highMem()
	j.nccl()
	j.kernelEvents()
	return j.fs
}

// judge carries the report, the expectation and the findings so far.
type judge struct {
	r  *Report
	e  *Expect
	fs []Finding
}

func (j *judge) add(sev, id, subject, msg, evidence, hint string) {
	j.fs = append(j.fs, Finding{ID: id, Status: sev, Subject: subject, Message: msg, Evidence: evidence, Hint: hint})
}

// p2pMode is driver.p2p, "" when the recipe is unknown or does not say.
func (j *judge) p2pMode() string {
	if j.e == nil {
		return ""
	}
	return j.e.P2P
}

// p2pWanted says whether the recipe expects working P2P: a patched driver or
// require_p2p. Unknown (no recipe) is not "wanted", but not "off" either.
func (j *judge) p2pWanted() bool {
	if j.e == nil {
		return false
	}
	return j.e.RequireP2P || j.e.P2P == recipe.P2PStaticBAR1 || j.e.P2P == recipe.P2PDynamicBAR1
}

// p2pSeverity is how bad missing P2P is: fail when the recipe wants it, info when the
// recipe says the driver is stock (off), warn when nobody said.
func (j *judge) p2pSeverity() string {
	switch {
	case j.p2pWanted():
		return SevFail
	case j.e != nil && j.e.P2P == recipe.P2POff:
		return SevInfo
	}
	return SevWarn
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

func (j *judge) noGPUDriver(m *Module) {
	switch {
	case m == nil:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia module was not attempted", "", notAttemptedHint)
	case m.Result == ModENODEV:
		j.add(SevInfo, "driver.nvidia", "nvidia", "nvidia.ko links against this kernel and found no GPU (ENODEV), as expected without GPUs", moduleOutcome(m), "")
	case m.Result == ModLoaded:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia.ko loaded, but the platform has no GPUs", moduleOutcome(m), "set platform.gpus in the recipe to the number of GPUs in this box")
	default:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleEvidence(m), moduleHint(m))
	}
}

func (j *judge) gpuDriver(m *Module) {
	switch {
	case m == nil:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia module was not attempted", "", notAttemptedHint)
	case m.Result == ModLoaded:
		j.add(SevInfo, "driver.nvidia", "nvidia", "nvidia.ko loaded", moduleOutcome(m), "")
	case m.Result == ModENODEV:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia.ko found no GPU it supports (ENODEV)", moduleEvidence(m), "check that this driver version supports the cards' device id and that no other driver (nouveau, vfio-pci) holds them; see kernel_log")
	default:
		j.add(SevFail, "driver.nvidia", "nvidia", "nvidia.ko did not load: "+moduleOutcome(m), moduleEvidence(m), moduleHint(m))
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

// moduleEvidence is the kernel's last word about a failed load, else the outcome.
func moduleEvidence(m *Module) string {
	if n := len(m.KernelLog); n > 0 {
		return m.KernelLog[n-1]
	}
	return moduleOutcome(m)
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

func statusText(s *Status) string {
	return fmt.Sprintf("%s (%d)", s.Name, s.Code)
}

func (j *judge) noGPUCUDA(c *CUDA) {
	if !j.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		j.add(SevFail, "cuda.init", "cuInit", "cuInit was not called", "", "")
	case c.CuInit.Code == CUDAErrorNoDevice:
		j.add(SevInfo, "cuda.init", "cuInit", "cuInit: CUDA_ERROR_NO_DEVICE, as expected without GPUs", statusText(c.CuInit), "")
	case c.CuInit.Code == CUDASuccess:
		j.add(SevFail, "cuda.init", "cuInit", "cuInit succeeded, but the platform has no GPUs", statusText(c.CuInit), "set platform.gpus in the recipe")
	default:
		j.add(SevFail, "cuda.init", "cuInit", fmt.Sprintf("cuInit: %s (%d), want CUDA_ERROR_NO_DEVICE", c.CuInit.Name, c.CuInit.Code), statusText(c.CuInit), cudaHint(c.CuInit.Code))
	}
}

func (j *judge) gpuCUDA(c *CUDA) {
	if !j.cudaLoaded(c) {
		return
	}
	switch {
	case c.CuInit == nil:
		j.add(SevFail, "cuda.init", "cuInit", "cuInit was not called", "", "")
	case c.CuInit.Code == CUDASuccess:
		j.add(SevInfo, "cuda.init", "cuInit", "cuInit: CUDA_SUCCESS", statusText(c.CuInit), "")
	default:
		j.add(SevFail, "cuda.init", "cuInit", fmt.Sprintf("cuInit: %s (%d), want CUDA_SUCCESS", c.CuInit.Name, c.CuInit.Code), statusText(c.CuInit), cudaHint(c.CuInit.Code))
	}
}

func (j *judge) cudaLoaded(c *CUDA) bool {
	if c.Loaded {
		return true
	}
	j.add(SevFail, "cuda.load", "libcuda", fmt.Sprintf("%s did not load: %s", orDefault(c.Library, "libcuda"), c.Error), c.Error, "the image needs libcuda1 of exactly the kernel module's version (userspace.packages) and its dependencies")
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

func (j *judge) noGPUNVML(n *NVML) {
	if !j.nvmlLoaded(n) {
		return
	}
	switch {
	case n.Init == nil:
		j.add(SevFail, "nvml.init", "nvmlInit", "nvmlInit_v2 was not called", "", "")
	case n.Init.Code == NVMLSuccess || n.Init.Code == NVMLDriverNotLoaded:
		j.add(SevInfo, "nvml.init", "nvmlInit", "nvmlInit_v2: "+n.Init.Name+", acceptable without GPUs", statusText(n.Init), "")
	default:
		j.add(SevFail, "nvml.init", "nvmlInit", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), statusText(n.Init), nvmlHint(n.Init.Code))
	}
}

// gpuNVML only warns: CUDA is what proves the driver works, and the P2P rules that need
// NVML's answers say so themselves. A version mismatch is version.mismatch's fail.
func (j *judge) gpuNVML(n *NVML) {
	if !n.Loaded {
		j.add(SevWarn, "nvml.load", "libnvidia-ml", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), n.Error, "the image needs libnvidia-ml1 of the kernel module's version")
		return
	}
	if n.Init != nil && n.Init.Code != NVMLSuccess {
		j.add(SevWarn, "nvml.init", "nvmlInit", fmt.Sprintf("nvmlInit_v2: %s (%d)", n.Init.Name, n.Init.Code), statusText(n.Init), nvmlHint(n.Init.Code))
	}
}

func (j *judge) nvmlLoaded(n *NVML) bool {
	if n.Loaded {
		return true
	}
	j.add(SevFail, "nvml.load", "libnvidia-ml", fmt.Sprintf("%s did not load: %s", orDefault(n.Library, "libnvidia-ml"), n.Error), n.Error, "the image needs libnvidia-ml1 of the kernel module's version")
	return false
}

func nvmlHint(code int) string {
	if code == NVMLLibRMVersionMismat {
		return "libnvidia-ml and nvidia.ko are different versions: pin libnvidia-ml1 to driver.version"
	}
	return "check kernel_log and dmesg"
}

// nvlinked reports whether NVML says GPUs a and b talk P2P over NVLink.
func nvlinked(r *Report, a, b int) bool {
	if a > b {
		a, b = b, a
	}
	for _, p := range r.Pairs {
		if p.A == a && p.B == b {
			return p.P2PNVLink == "OK"
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// deadline reports the phase that was abandoned at its deadline, with the likeliest
// cause: NCCL (or CUDA peer setup) on a card whose BAR1 cannot hold its VRAM, under a
// driver that only knows static BAR1, hangs rather than failing.
func (j *judge) deadline(phase string) {
	r := j.r
	msg := "self-test stalled in " + phase
	ev := "deadline_exceeded=" + phase
	if r.Stall != nil {
		ev = fmt.Sprintf("phase=%s after_ms=%d", phase, r.Stall.AfterMS)
		if r.Stall.AfterMS > 0 {
			msg += " after " + msDuration(r.Stall.AfterMS)
		}
		if r.Stall.Cause != "" {
			msg += ": " + r.Stall.Cause
			ev += " cause=" + r.Stall.Cause
		}
	}
	hint := "a hang here usually means the driver is waiting on a GPU that stopped answering: check kernel_log and dmesg for Xid or IOMMU faults"
	if phase == PhaseNCCL || phase == PhaseCUDA {
		mode := j.p2pMode()
		if mode == recipe.P2PStaticBAR1 || mode == "" {
			for i := range r.GPUs {
				bar1, vram, src := j.bar1VRAM(i)
				if bar1 > 0 && vram > bar1 {
					msg += "; likely cause: NCCL init on a card whose BAR1 is smaller than VRAM with a static-BAR1 driver"
					ev += fmt.Sprintf("; %s BAR1 %s < VRAM %s (%s), driver.p2p=%s", j.gpuLabel(i), humanBytes(bar1), humanBytes(vram), src, orDefault(mode, "unknown"))
					hint = "NCCL init on a card whose BAR1 is smaller than VRAM with a static-BAR1 driver: use the dynamic-BAR1 branch (driver.p2p = \"dynamic-bar1\")"
					break
				}
			}
		}
	}
	j.add(SevFail, "deadline", phase, msg, ev, hint)
}

func msDuration(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%dms", ms)
	}
	return fmt.Sprintf("%.1fs", float64(ms)/1000)
}

// gpuLabel names GPU index i: "GPU1 (0000:02:00.0)".
func (j *judge) gpuLabel(i int) string { return gpuLabel(j.r, i) }

func gpuLabel(r *Report, i int) string {
	if i >= 0 && i < len(r.GPUs) {
		return fmt.Sprintf("GPU%d (%s)", i, r.GPUs[i].BDF)
	}
	return fmt.Sprintf("GPU%d", i)
}

// ordIndex maps a CUDA ordinal (or an NCCL rank of a communicator over every device) to
// an index into Report.GPUs: through the ordinal's bus id when CUDA listed it, else
// the same number, since p2pcheck orders CUDA devices by bus id as sysfs does.
func ordIndex(r *Report, ord int) int {
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

// cudaDevice is what CUDA said about GPU index i, nil if nothing.
func cudaDevice(r *Report, i int) *CUDADevice {
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

// gpuName is the marketing name NVML or CUDA gave GPU i, "" if neither.
func gpuName(r *Report, i int) string {
	g := &r.GPUs[i]
	if g.NVML != nil && g.NVML.Name != "" {
		return g.NVML.Name
	}
	if d := cudaDevice(r, i); d != nil {
		return d.Name
	}
	return ""
}

// gpuVRAM is GPU i's memory and where the figure came from: NVML's framebuffer total,
// the driver-reported size, CUDA's total, else the recipe's platform.vram.
func gpuVRAM(r *Report, e *Expect, i int) (int64, string) {
	g := &r.GPUs[i]
	switch {
	case g.NVML != nil && g.NVML.FBTotal > 0:
		return g.NVML.FBTotal, "NVML"
	case g.VRAMBytes != nil && *g.VRAMBytes > 0:
		return *g.VRAMBytes, "driver"
	}
	if d := cudaDevice(r, i); d != nil && d.MemBytes > 0 {
		return d.MemBytes, "CUDA"
	}
	if e != nil && e.VRAMBytes > 0 {
		return e.VRAMBytes, "recipe"
	}
	return 0, ""
}

// gpuBAR1 is GPU i's BAR1 size from sysfs, else from NVML.
func gpuBAR1(r *Report, i int) int64 {
	g := &r.GPUs[i]
	if g.BAR1Bytes > 0 {
		return g.BAR1Bytes
	}
	if g.NVML != nil {
		return g.NVML.BAR1Total
	}
	return 0
}

func (j *judge) bar1VRAM(i int) (bar1, vram int64, src string) {
	vram, src = gpuVRAM(j.r, j.e, i)
	return gpuBAR1(j.r, i), vram, src
}

// pairOf returns the pair of GPU indexes a and b (either order), nil if none.
func pairOf(r *Report, a, b int) *Pair {
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

// pairTopology is the pair's class from sysfs, else NVML's, "" if unknown.
func pairTopology(r *Report, a, b int) string {
	p := pairOf(r, a, b)
	if p == nil {
		return ""
	}
	return orDefault(p.Topology, p.NVMLTopology)
}

// versions compares what each layer reports with the recipe's driver.version and with
// each other. The libraries' own mismatch codes (cuInit 803, NVML 18) count too; on a
// box without GPUs cuda.init and nvml.init already fail on them.
func (j *judge) versions(gpus bool) {
	r := j.r
	const hint = "libcuda1, libnvidia-ml1, firmware-nvidia-gsp and nvidia.ko must all be driver.version: pin userspace.packages to it and rebuild"
	if gpus {
		if c := r.CUDA.CuInit; c != nil && c.Code == CUDAErrorSystemMismatch {
			j.add(SevFail, "version.mismatch", "libcuda", "libcuda and the loaded nvidia.ko are different versions (cuInit "+c.Name+")", statusText(c), hint)
		}
		if n := r.NVML.Init; n != nil && n.Code == NVMLLibRMVersionMismat {
			j.add(SevFail, "version.mismatch", "libnvidia-ml", "libnvidia-ml and the loaded nvidia.ko are different versions (nvmlInit "+n.Name+")", statusText(n), hint)
		}
	}
	want := ""
	if j.e != nil {
		want = j.e.DriverVersion
	}
	if want != "" && r.NVML.DriverVersion != "" && r.NVML.DriverVersion != want {
		j.add(SevFail, "version.mismatch", "nvml", fmt.Sprintf("NVML reports driver %s, recipe driver.version = %s", r.NVML.DriverVersion, want),
			"nvmlSystemGetDriverVersion="+r.NVML.DriverVersion, hint)
	}
	// The files themselves, whether or not anything loaded: each .ko's modinfo version
	// and the version in the libraries' file names (libcuda.so.550.163.01).
	ref, refName := want, "recipe driver.version"
	if ref == "" {
		ref, refName = r.NVML.DriverVersion, "NVML reports driver"
	}
	for _, f := range []struct{ what, file string }{{"libcuda", r.CUDA.LibraryFile}, {"libnvidia-ml", r.NVML.LibraryFile}} {
		if v := LibraryVersion(f.file); v != "" && ref != "" && v != ref {
			j.add(SevFail, "version.mismatch", f.what, fmt.Sprintf("%s is %s (version %s), %s %s", f.what, f.file, v, refName, ref), f.what+"="+f.file, hint)
		}
	}
	for _, m := range r.Modules {
		// A loaded module's /sys version is judged below; the same number twice is one fault.
		if m.KoVersion == "" || !strings.HasPrefix(m.Name, "nvidia") || ref == "" || m.KoVersion == ref || m.KoVersion == m.Version {
			continue
		}
		j.add(SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("%s.ko in the image is version %s (%s), %s %s", m.Name, m.KoVersion, moduleOutcome(&m), refName, ref),
			"modinfo "+orDefault(m.File, m.Name+".ko")+": version="+m.KoVersion, hint)
	}
	for _, m := range r.Modules {
		if m.Version == "" || !strings.HasPrefix(m.Name, "nvidia") {
			continue
		}
		switch {
		case want != "" && m.Version != want:
			j.add(SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("module %s is version %s, recipe driver.version = %s", m.Name, m.Version, want),
				"/sys/module/"+m.Name+"/version="+m.Version, hint)
		case want == "" && r.NVML.DriverVersion != "" && m.Version != r.NVML.DriverVersion:
			j.add(SevFail, "version.mismatch", "module "+m.Name, fmt.Sprintf("module %s is version %s, NVML reports driver %s", m.Name, m.Version, r.NVML.DriverVersion),
				"/sys/module/"+m.Name+"/version="+m.Version, hint)
		}
	}
}

// gpuIdentity checks the model and NUMA placement against the platform.
func (j *judge) gpuIdentity() {
	if j.e == nil {
		return
	}
	for i, g := range j.r.GPUs {
		if m := j.e.GPUModel; m != "" {
			if name := gpuName(j.r, i); name != "" && !strings.Contains(strings.ToLower(name), strings.ToLower(m)) {
				j.add(SevWarn, "gpus.model", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s is %q, recipe platform.gpu_model = %q", j.gpuLabel(i), name, m),
					name, "the image was built for other cards: check the recipe's platform against this box")
			}
		}
		if i < len(j.e.GPUNUMA) {
			want := j.e.GPUNUMA[i]
			// numa_node -1 is what a one-node box reports; it only contradicts a recipe
			// that places the GPU on another node.
			if g.NUMANode != want && !(g.NUMANode < 0 && want == 0) {
				j.add(SevWarn, "gpus.numa", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s is on NUMA node %d, recipe platform.gpu_numa says %d", j.gpuLabel(i), g.NUMANode, want),
					fmt.Sprintf("/sys/bus/pci/devices/%s/numa_node=%d", g.BDF, g.NUMANode), "a card in another slot than the recipe expects: fix gpu_numa, or move the card (cross-socket pairs are SYS)")
			}
		}
	}
}

// bar1 checks each GPU's BAR1 aperture: resizable BAR must have grown it to the recipe's
// size, and a BAR1 smaller than VRAM needs the dynamic-BAR1 driver.
func (j *judge) bar1() {
	mode := j.p2pMode()
	for i, g := range j.r.GPUs {
		bar1, vram, src := j.bar1VRAM(i)
		if bar1 <= 0 {
			continue
		}
		subject := fmt.Sprintf("GPU%d", i)
		ev := fmt.Sprintf("%s resource1 %s", g.BDF, humanBytes(bar1))
		if j.e != nil && j.e.BAR1Bytes > 0 && bar1 < j.e.BAR1Bytes {
			hint := "enable 'Above 4G decoding' and 'Re-Size BAR support' in the BIOS and load nvidia with NVreg_EnableResizableBar=1"
			if j.e.DriverParams["nvidia"]["NVreg_EnableResizableBar"] != "1" {
				hint = "the recipe does not set driver.params.nvidia.NVreg_EnableResizableBar = \"1\": set it, and enable 'Above 4G decoding' and 'Re-Size BAR support' in the BIOS"
				ev += ", driver.params.nvidia.NVreg_EnableResizableBar unset"
			}
			j.add(SevFail, "bar1.size", subject, fmt.Sprintf("%s BAR1 is %s, recipe platform.bar1 = %s: resizable BAR is not enabled", j.gpuLabel(i), humanBytes(bar1), humanBytes(j.e.BAR1Bytes)),
				ev, hint)
			continue
		}
		if vram <= 0 || bar1 >= vram || mode == recipe.P2PDynamicBAR1 {
			continue
		}
		msg := fmt.Sprintf("%s BAR1 %s < VRAM %s (%s): static BAR1 cannot map all of VRAM; the dynamic-BAR1 branch is required", j.gpuLabel(i), humanBytes(bar1), humanBytes(vram), src)
		ev += fmt.Sprintf(", VRAM %s (%s), driver.p2p=%s", humanBytes(vram), src, orDefault(mode, "unknown"))
		hint := "build with a dynamic-BAR1 driver branch and set driver.p2p = \"dynamic-bar1\""
		switch mode {
		case recipe.P2PStaticBAR1:
			j.add(SevFail, "bar1.size", subject, msg, ev, hint)
		case recipe.P2POff:
			if j.e.RequireP2P {
				j.add(SevFail, "bar1.size", subject, msg, ev, hint)
			} else {
				j.add(SevInfo, "bar1.size", subject, fmt.Sprintf("%s BAR1 %s < VRAM %s (%s); P2P is off in this image, so it does not matter", j.gpuLabel(i), humanBytes(bar1), humanBytes(vram), src), ev, "")
			}
		default:
			if j.highMemVerified(i) {
				j.add(SevInfo, "bar1.size", subject, fmt.Sprintf("%s BAR1 %s < VRAM %s (%s); the above-BAR1 probe passed, so the driver maps peers beyond BAR1", j.gpuLabel(i), humanBytes(bar1), humanBytes(vram), src), ev, "")
				continue
			}
			j.add(SevWarn, "bar1.size", subject, msg, ev, hint)
		}
	}
}

// highMemVerified says whether the above-BAR1 probe on GPU index i passed.
func (j *judge) highMemVerified(i int) bool {
	for _, h := range j.r.HighMem {
		if ordIndex(j.r, h.GPU) == i && h.Verified && h.Error == "" && h.Mismatch == nil && h.Peer >= 0 {
			return true
		}
	}
	return false
}

// linkSpeed parses sysfs' "16.0 GT/s PCIe" (0 if unparsable).
func linkSpeed(s string) float64 {
	var v float64
	if _, err := fmt.Sscanf(s, "%g", &v); err != nil {
		return 0
	}
	return v
}

// genSpeed is the GT/s of a PCIe generation as NVML numbers it.
func genSpeed(gen int) float64 {
	switch gen {
	case 1:
		return 2.5
	case 2:
		return 5
	case 3:
		return 8
	case 4:
		return 16
	case 5:
		return 32
	case 6:
		return 64
	}
	return 0
}

// links checks the link of every GPU and of every bridge above it. A link trains to
// the lesser of its two ends' maxima, so the port above a GPU is taken into account:
// below that, the link is downtrained (fail); at it but below the card's own maximum,
// the slot is narrower than the card (warn). Speed below the maximum only warns: links
// drop to 2.5 GT/s at idle, and DCGM checks the generation only in P0.
func (j *judge) links() {
	seen := map[string]bool{}
	for i, g := range j.r.GPUs {
		var partner *Link
		if n := len(g.Upstream); n > 0 {
			partner = &g.Upstream[n-1].Link
		}
		j.link(fmt.Sprintf("GPU%d", i), j.gpuLabel(i), g.BDF, g.Link, partner, true)
		if g.NVML != nil && g.Link.CurrentSpeed == "" && g.NVML.MaxLinkGen > 0 && g.NVML.LinkGen > 0 && g.NVML.LinkGen < g.NVML.MaxLinkGen {
			j.add(SevWarn, "pcie.link", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s link at Gen%d of Gen%d (NVML)", j.gpuLabel(i), g.NVML.LinkGen, g.NVML.MaxLinkGen),
				fmt.Sprintf("nvml link_gen=%d max_link_gen=%d", g.NVML.LinkGen, g.NVML.MaxLinkGen), "links drop to a lower generation at idle; if it stays there under load, check the BIOS slot setting and the riser")
		}
		for k := 0; k+1 < len(g.Upstream); k++ {
			b := g.Upstream[k]
			if seen[b.BDF] {
				continue
			}
			seen[b.BDF] = true
			next := g.Upstream[k+1].Link
			j.link("bridge "+b.BDF, fmt.Sprintf("bridge %s (above %s)", b.BDF, j.gpuLabel(i)), b.BDF, b.Link, &next, false)
		}
	}
}

func (j *judge) link(subject, name, bdf string, l Link, partner *Link, gpu bool) {
	ev := fmt.Sprintf("%s current %s x%d, max %s x%d", bdf, orDefault(l.CurrentSpeed, "?"), l.CurrentWidth, orDefault(l.MaxSpeed, "?"), l.MaxWidth)
	if l.MaxWidth > 0 && l.CurrentWidth > 0 && l.CurrentWidth < l.MaxWidth {
		switch {
		case (partner == nil || partner.MaxWidth == 0) && gpu:
			// Without the port above we cannot tell a narrow slot from a downtrained link.
			j.add(SevWarn, "pcie.link", subject, fmt.Sprintf("%s trained at x%d of x%d", bdf, l.CurrentWidth, l.MaxWidth), ev, "reseat the card or riser; a narrow link caps peer bandwidth")
		case partner != nil && partner.MaxWidth > 0 && l.CurrentWidth >= partner.MaxWidth:
			j.add(SevWarn, "pcie.link", subject, fmt.Sprintf("%s runs at x%d of x%d: the port above is only x%d wide", name, l.CurrentWidth, l.MaxWidth, partner.MaxWidth),
				ev+fmt.Sprintf("; port above max x%d", partner.MaxWidth), "a narrow slot caps peer bandwidth: move the card to a x16 slot or check the BIOS bifurcation setting")
		default:
			j.add(SevFail, "pcie.link", subject, fmt.Sprintf("%s downtrained: %s x%d of x%d", name, orDefault(l.CurrentSpeed, "?"), l.CurrentWidth, l.MaxWidth),
				ev, "reseat the card, riser or cable; a link that trains narrower than both ends support is a signal-integrity fault")
		}
	}
	cur, maxs := linkSpeed(l.CurrentSpeed), linkSpeed(l.MaxSpeed)
	if partner != nil {
		if p := linkSpeed(partner.MaxSpeed); p > 0 && p < maxs {
			maxs = p
		}
	}
	if cur > 0 && maxs > 0 && cur < maxs {
		j.add(SevWarn, "pcie.link", subject, fmt.Sprintf("%s link at %s of %g GT/s", name, l.CurrentSpeed, maxs),
			ev, "links drop to a lower speed at idle (DCGM checks only in P0); if it stays there under load, check the BIOS slot generation setting and the riser")
	}
}

// replays warns on PCIe replays NVML counted: link errors the hardware retried.
// display names the GPUs that drive a display: sysfs boot_vga (the firmware's console
// card) or NVML's display mode / display active. The P2P forks' static BAR1 mapping
// is lost on such a card, so with driver.p2p = "static-bar1" it fails; without a
// recipe it warns; with the dynamic-BAR1 driver or P2P off it is information.
func (j *judge) display() {
	for i, g := range j.r.GPUs {
		var ev []string
		if g.BootVGA {
			ev = append(ev, "boot_vga=1")
		}
		if n := g.NVML; n != nil {
			if n.DisplayMode != nil && *n.DisplayMode == 1 {
				ev = append(ev, "nvml display_mode=1")
			}
			if n.DisplayActive != nil && *n.DisplayActive == 1 {
				ev = append(ev, "nvml display_active=1")
			}
		}
		if len(ev) == 0 {
			continue
		}
		sev := SevWarn
		switch j.p2pMode() {
		case recipe.P2PStaticBAR1:
			sev = SevFail
		case recipe.P2PDynamicBAR1, recipe.P2POff:
			sev = SevInfo
		}
		j.add(sev, "gpu.display", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s drives a display (%s): the P2P forks do not give a display GPU its static BAR1 mapping", j.gpuLabel(i), strings.Join(ev, ", ")),
			strings.Join(ev, " "), "drive the display from the board's VGA or another card (BIOS primary display), or run this GPU headless; with driver.p2p = \"static-bar1\" a display GPU cannot take part in P2P")
	}
}

func (j *judge) replays() {
	for i, g := range j.r.GPUs {
		if g.NVML != nil && g.NVML.ReplayCounter > 0 {
			j.add(SevWarn, "pcie.replay", fmt.Sprintf("GPU%d", i), fmt.Sprintf("%s: %d PCIe replay(s)", j.gpuLabel(i), g.NVML.ReplayCounter),
				fmt.Sprintf("nvmlDeviceGetPcieReplayCounter=%d", g.NVML.ReplayCounter), "replays are link errors being retried: reseat the card or riser, or set the slot to a lower generation in the BIOS")
		}
	}
}

// iommu states the IOMMU mode; peer traffic through a translating IOMMU works with the
// dynamic-BAR1 driver (it maps the window), so this is information, not a verdict.
func (j *judge) iommu() {
	io := &j.r.IOMMU
	if len(j.r.GPUs) == 0 || (io.Mode == "" && !io.Active && len(io.Units) == 0 && len(io.Cmdline) == 0) {
		return
	}
	msg := "IOMMU " + orDefault(io.Mode, "mode unknown")
	if len(io.Units) > 0 {
		msg += " (" + strings.Join(io.Units, ", ") + ")"
	}
	ev := "cmdline: " + orDefault(strings.Join(io.Cmdline, " "), "none")
	if len(io.GroupTypes) > 0 {
		ev += "; GPU group types: " + strings.Join(io.GroupTypes, ", ")
	}
	hint := ""
	if io.Mode == "translated" || io.Mode == "mixed" {
		hint = "peer traffic goes through IOMMU translation; if kernel.iommu_fault appears, try iommu=pt"
	}
	j.add(SevInfo, "iommu.mode", "iommu", msg, ev, hint)
}

// acs warns on ACS redirect bits on a pair's path: peer requests then go up to the root
// complex. Seed 000's Platform A ran P2P fine through the IOMMU that way, so it is
// reported, not failed; the measured copies decide.
func (j *judge) acs() {
	r := j.r
	bridges := map[string]*Bridge{}
	for gi := range r.GPUs {
		for k := range r.GPUs[gi].Upstream {
			b := &r.GPUs[gi].Upstream[k]
			bridges[b.BDF] = b
		}
	}
	for _, p := range r.Pairs {
		on := append([]string{}, p.ACSOn...)
		for _, bdf := range p.Path {
			if b := bridges[bdf]; b != nil && b.ACS.Redirects() && !contains(on, bdf) {
				on = append(on, bdf)
			}
		}
		if len(on) == 0 {
			continue
		}
		var ev []string
		for _, bdf := range on {
			if b := bridges[bdf]; b != nil && b.ACS != nil {
				ev = append(ev, fmt.Sprintf("%s ctrl=%#04x %s", bdf, b.ACS.Ctrl, acsBits(b.ACS)))
			} else {
				ev = append(ev, bdf)
			}
		}
		j.add(SevWarn, "acs.redirect", pairSubject(p.A, p.B), fmt.Sprintf("%s-%s: ACS redirect on at %s; peer traffic goes up to the root complex", j.gpuLabel(p.A), j.gpuLabel(p.B), strings.Join(on, ", ")),
			strings.Join(ev, "; "), "P2P can still work through the IOMMU; to route it directly boot with pci=disable_acs_redir="+strings.Join(on, ";"))
	}
}

func acsBits(a *ACS) string {
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

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func pairSubject(a, b int) string { return fmt.Sprintf("GPU%d-GPU%d", a, b) }

// p2pLetterHint says what to do about one NVML P2P status letter.
func p2pLetterHint(s string) string {
	switch s {
	case "CNS":
		return "chipset not supported is the stock driver's answer on GeForce: build the patched driver (driver.p2p = \"static-bar1\" or \"dynamic-bar1\")"
	case "TNS":
		return "topology not supported: the path crosses something the driver refuses; check acs.redirect and the IOMMU"
	case "GNS":
		return "GPU not supported: this driver's P2P patch does not cover the card"
	case "DRK":
		return "disabled by a registry key: check NVreg_RegistryDwords in driver.params"
	}
	return "NVML could not tell: check kernel_log for driver errors"
}

// p2pStatus checks NVML's P2P read/write status, which is also NCCL's P2P gate, and
// compares it with CUDA's cuDeviceCanAccessPeer.
func (j *judge) p2pStatus() {
	r := j.r
	sev := j.p2pSeverity()
	asked, cns := 0, 0
	var bad []Pair
	for _, p := range r.Pairs {
		if p.P2PRead == "" && p.P2PWrite == "" {
			continue
		}
		asked++
		if p.P2PRead == "CNS" && p.P2PWrite == "CNS" {
			cns++
		}
		if p.P2PRead != "OK" || p.P2PWrite != "OK" {
			bad = append(bad, p)
		}
	}
	switch {
	case asked > 0 && cns == asked:
		msg := fmt.Sprintf("unpatched driver: NVML reports CNS for every pair (%d pair(s))", asked)
		if sev == SevInfo {
			msg += "; P2P is off in this image (driver.p2p = \"off\"), so it is not expected"
		}
		j.add(sev, "p2p.status", "all pairs", msg, p2pEvidence(bad), "the stock driver reports CNS on GeForce: build the patched driver (driver.p2p = \"static-bar1\" or \"dynamic-bar1\", e.g. a patched platform recipe)")
	default:
		for _, p := range bad {
			letter := p.P2PRead
			if letter == "OK" || letter == "" {
				letter = p.P2PWrite
			}
			msg := fmt.Sprintf("%s-%s: NVML P2P read %s, write %s", j.gpuLabel(p.A), j.gpuLabel(p.B), orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?"))
			if sev == SevInfo {
				msg += "; P2P is off in this image, so it is not expected"
			}
			j.add(sev, "p2p.status", pairSubject(p.A, p.B), msg, p2pEvidence([]Pair{p}), p2pLetterHint(letter))
		}
	}
	for _, p := range r.Pairs {
		if p.P2PRead == "OK" && p.P2PWrite == "OK" && p.CanAccessPeer != nil && !*p.CanAccessPeer {
			j.add(SevFail, "p2p.cuda", pairSubject(p.A, p.B), fmt.Sprintf("%s-%s: NVML says P2P OK but cuDeviceCanAccessPeer is false", j.gpuLabel(p.A), j.gpuLabel(p.B)),
				fmt.Sprintf("nvml read=%s write=%s, cuDeviceCanAccessPeer=0", p.P2PRead, p.P2PWrite),
				"the driver's P2P capability bit is off: on cards whose BAR1 is smaller than VRAM the static-BAR1 patch leaves it false (use driver.p2p = \"dynamic-bar1\"); else check the patch series")
		}
	}
}

func p2pEvidence(ps []Pair) string {
	var s []string
	for k, p := range ps {
		if k == 4 {
			s = append(s, fmt.Sprintf("... %d more", len(ps)-k))
			break
		}
		s = append(s, fmt.Sprintf("GPU%d-GPU%d r=%s w=%s", p.A, p.B, orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?")))
	}
	return strings.Join(s, "; ")
}

// ptx fails when the self-test's own kernels did not load: every SM copy and data check
// depends on them.
func (j *judge) ptx() {
	p := j.r.CUDA.PTX
	if p == nil || p.Code == CUDASuccess {
		return
	}
	hint := "the driver could not JIT the self-test's PTX: see ptx_log"
	switch p.Code {
	case 222:
		hint = "the driver is older than the PTX ISA version: the driver must be at least CUDA 11.0"
	case 218:
		hint = "the PTX targets a newer GPU than this one: a p2pcheck bug, report it with ptx_log"
	case 221:
		hint = "no PTX JIT compiler: the image needs libnvidia-ptxjitcompiler1 of driver.version"
	}
	ev := statusText(p)
	if log := strings.TrimSpace(j.r.CUDA.PTXLog); log != "" {
		ev += ": " + firstLine(log)
	}
	j.add(SevFail, "cuda.ptx", "ptx", fmt.Sprintf("loading the self-test's PTX kernels: %s (%d)", p.Name, p.Code), ev, hint)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// CopySubject names a copy: "GPU0->GPU1 ce write" (GPU indexes).
func CopySubject(r *Report, c *Copy) string {
	return fmt.Sprintf("GPU%d->GPU%d %s %s", ordIndex(r, c.Src), ordIndex(r, c.Dst), c.Method, c.Direction)
}

// copies checks every timed copy: errors, corrupted data, rates above the link (the
// copies went somewhere else) and rates below the recipe's threshold for the pair's
// topology class.
func (j *judge) copies() {
	r := j.r
	var unverified []string
	defer func() { j.unverified(unverified) }()
	for k := range r.Copies {
		c := &r.Copies[k]
		a, b := ordIndex(r, c.Src), ordIndex(r, c.Dst)
		subject := CopySubject(r, c)
		name := fmt.Sprintf("GPU%d->GPU%d %s %s", a, b, c.Method, c.Direction)
		if c.Src == c.Dst {
			name = fmt.Sprintf("GPU%d local %s copy", a, c.Method)
		}
		if c.Error != "" {
			j.add(SevFail, "copy.error", subject, fmt.Sprintf("%s failed: %s", name, c.Error), c.Error, copyErrorHint(c.Error))
			continue
		}
		if m := c.Mismatch; m != nil {
			j.add(SevFail, "copy.corrupt", subject, fmt.Sprintf("%s corrupted data: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", name, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("offset=%d want=0x%08x got=0x%08x words=%d bytes=%d", m.Offset, m.Want, m.Got, m.Words, c.Bytes),
				j.corruptHint(c))
			continue
		}
		if !c.Verified {
			unverified = append(unverified, name)
			continue
		}
		if c.Src == c.Dst || c.Direction == DirLocal {
			continue
		}
		limit := c.LinkGBps
		if c.Direction == DirBidir {
			limit *= 2
		}
		if nvlinked(r, c.Src, c.Dst) {
			limit = 0 // the PCIe path's rate does not bound an NVLink pair
		}
		if limit > 0 && c.GBps > overrateFactor*limit {
			j.add(SevFail, "copy.overrate", subject, fmt.Sprintf("%s measured %.1f GB/s, above the link's %.1f GB/s: copies are not landing where they should", name, c.GBps, limit),
				fmt.Sprintf("gbps=%.2f link_gbps=%.2f samples=%s", c.GBps, c.LinkGBps, floats(c.Samples)),
				"a driver that claims P2P but maps peer memory wrongly measures like this (seen on early patch forks): do not use P2P on this image; check the driver patch series")
			continue
		}
		j.copyThreshold(c, a, b, subject, name)
	}
}

// unverified judges copies that ran without error but were never checked: with
// verification on (the default; selftest.verify) a copy that was not checked proves
// nothing, so it fails; with verification off the bandwidth figures stand alone and
// the report says so once.
func (j *judge) unverified(names []string) {
	if len(names) == 0 {
		return
	}
	ev := strings.Join(names, ", ")
	if j.e != nil && j.e.NoVerify {
		j.add(SevWarn, "copy.unverified", "copies", fmt.Sprintf("%d copies were not checked: the recipe sets selftest.verify = false, so a pass does not show that peer data arrived", len(names)), ev,
			"set selftest.verify = true (the default): only a verified copy shows the data landed where it should")
		return
	}
	for _, n := range names {
		j.add(SevFail, "copy.unverified", "copies", fmt.Sprintf("%s was not verified though verification is on: the data check did not run", n), n,
			"a copy that was timed but not checked proves nothing; this is a p2pcheck fault: report it with this JSON")
	}
}

// injectedMessage is the message of p2pcheck's test.injected finding, which names the
// copy --inject-corruption broke; "" when nothing was injected.
func (j *judge) injectedMessage() string {
	for _, f := range j.r.Findings {
		if f.ID == "test.injected" {
			return f.Message
		}
	}
	return ""
}

func (j *judge) isInjected(c *Copy) bool {
	msg := j.injectedMessage()
	return msg != "" && strings.Contains(msg, fmt.Sprintf("after the %s %s copy GPU %d -> GPU %d,", c.Method, c.Direction, c.Src, c.Dst))
}

// corruptHint says what a mismatch means for this copy: the injected one, one GPU's
// own copy (no peer path involved), an SM copy through the peer mapping, or a copy
// engine peer copy.
func (j *judge) corruptHint(c *Copy) string {
	switch {
	case j.isInjected(c):
		return "this is the word --inject-corruption inverted on purpose: the data check works; run without the flag for a verdict"
	case c.Src == c.Dst || c.Direction == DirLocal:
		return "a copy within one GPU corrupted data, with no peer path involved: suspect the GPU's memory or the driver (check kernel.xid for ECC / MMU errors, and the card's temperature and clocks)"
	case c.Method == MethodSM:
		return "the GPU's own loads and stores through the peer mapping (the path NCCL uses) landed in the wrong place: on cards whose BAR1 is smaller than VRAM use driver.p2p = \"dynamic-bar1\"; check kernel.iommu_fault and kernel.xid"
	}
	return "peer data landed in the wrong place: on cards whose BAR1 is smaller than VRAM an address outside the BAR1 window does this (use driver.p2p = \"dynamic-bar1\"); check kernel.iommu_fault and kernel.xid"
}

// injected fails a run where --inject-corruption broke a word and no verification
// found it: the data check itself is broken, so no pass of this image can be trusted.
func (j *judge) injected() {
	msg := j.injectedMessage()
	if msg == "" {
		return
	}
	for _, f := range j.fs {
		if f.ID == "copy.corrupt" && f.Status == SevFail {
			return
		}
	}
	j.add(SevFail, "test.undetected", "copies", "corruption was injected on purpose but no copy reported a mismatch: the data check does not catch corrupted copies", msg,
		"verification is off (selftest.verify) or broken; no PASS of this p2pcheck means peer data arrived")
}

func (j *judge) copyThreshold(c *Copy, a, b int, subject, name string) {
	if j.e == nil || len(j.e.Thresholds) == 0 {
		return
	}
	topo := pairTopology(j.r, a, b)
	th, ok := j.e.Thresholds[topo]
	if !ok {
		return
	}
	min, kind := th.UnidirGBps, "min_unidir_gbps"
	if c.Direction == DirBidir {
		min, kind = th.BidirGBps, "min_bidir_gbps"
	}
	if min <= 0 || c.GBps >= min {
		return
	}
	j.add(SevFail, "copy.bandwidth", subject, fmt.Sprintf("%s %.1f GB/s, below the %s threshold of %.1f GB/s", name, c.GBps, topo, min),
		fmt.Sprintf("gbps=%.2f selftest.thresholds.%s.%s=%g samples=%s", c.GBps, topo, kind, min, floats(c.Samples)),
		"check pcie.link for a narrow or slow link and the slot wiring (chipset lanes, x4 slots); far below means the copy was staged through host memory")
}

func floats(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprintf("%.2f", f)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func copyErrorHint(msg string) string {
	switch {
	case strings.Contains(msg, "MAP_FAILED") || strings.Contains(msg, "(205)"):
		return "mapping of buffer object failed is the broken-P2P-mapping error: on cards whose BAR1 is smaller than VRAM use driver.p2p = \"dynamic-bar1\""
	case strings.Contains(msg, "PEER_ACCESS_UNSUPPORTED") || strings.Contains(msg, "(217)"):
		return "the driver refused peer access between these GPUs: see p2p.status"
	case strings.Contains(msg, "TOO_MANY_PEERS") || strings.Contains(msg, "(711)"):
		return "peer hardware resources are exhausted (BAR1 windows): check the driver's BAR1 budget"
	case strings.Contains(msg, "ILLEGAL_ADDRESS") || strings.Contains(msg, "(700)"):
		return "the copy touched an unmapped address: a broken peer mapping; check kernel.xid and kernel.iommu_fault"
	}
	return "see kernel_events and dmesg for Xid or IOMMU faults around the copy"
}

// highMem checks the probe that places a buffer above the BAR1 size: on 48 GB cards
// with 32 GiB BAR1 that is where a static mapping silently corrupts data.
func (j *judge) highMem() {
	const hint = "peer copies to memory above the BAR1 size need per-allocation BAR1 windows: use the dynamic-BAR1 driver (driver.p2p = \"dynamic-bar1\")"
	for _, h := range j.r.HighMem {
		gi := ordIndex(j.r, h.GPU)
		subject := fmt.Sprintf("GPU%d", gi)
		ev := fmt.Sprintf("buffer_va=%s ballast=%dMiB bar1=%s vram=%s", orDefault(h.BufferVA, "?"), h.BallastMiB, humanBytes(h.BAR1Bytes), humanBytes(h.VRAMBytes))
		peer := "no peer"
		if h.Peer >= 0 {
			peer = "peer " + j.gpuLabel(ordIndex(j.r, h.Peer))
		}
		switch {
		case h.Error != "":
			j.add(SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) failed: %s", j.gpuLabel(gi), peer, h.Error), ev+"; "+h.Error, hint)
		case h.Mismatch != nil:
			m := h.Mismatch
			j.add(SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) corrupted data: %d word(s) differ, first at byte %#x (want 0x%08x, got 0x%08x)", j.gpuLabel(gi), peer, m.Words, m.Offset, m.Want, m.Got),
				fmt.Sprintf("%s; offset=%d want=0x%08x got=0x%08x", ev, m.Offset, m.Want, m.Got), hint)
		case !h.Verified && h.Peer < 0:
			j.add(SevInfo, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s: no peer GPU to copy with", j.gpuLabel(gi)), ev, "")
		case !h.Verified:
			j.add(SevFail, "highmem.copy", subject, fmt.Sprintf("above-BAR1 probe on %s (%s) was not verified", j.gpuLabel(gi), peer), ev, hint)
		}
	}
}

// ncclLevel ranks an NCCL_P2P_LEVEL value on TopoRank's scale (0 for LOC and the
// NVLink levels); ok is false for a value NCCL would not take.
func ncclLevel(v string) (int, bool) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "LOC", "0":
		return 0, true
	case "NVL", "NVB", "C2C":
		return 0, true
	case "PIX", "1":
		return TopoRank(TopoPIX), true
	case "PXB", "2", "P2C", "PXN":
		return TopoRank(TopoPXB), true
	case "PHB", "3":
		return TopoRank(TopoPHB), true
	case "SYS", "4", "5":
		return TopoRank(TopoSYS), true
	}
	return 0, false
}

// ncclCovers says whether P2P level covers a topology class; NCCL counts NODE as PHB.
func ncclCovers(level, topo string) bool {
	lv, ok := ncclLevel(level)
	if !ok {
		lv = TopoRank(TopoPXB)
	}
	t := TopoRank(topo)
	if topo == TopoNODE {
		t = TopoRank(TopoPHB)
	}
	return t <= lv
}

// ncclEnv is the value NCCL ran with (NCCL.Env), else what the recipe sets.
func (j *judge) ncclEnv(key string) (string, bool) {
	if n := j.r.NCCL; n != nil && n.Env != nil {
		v, ok := n.Env[key]
		return v, ok
	}
	if j.e != nil {
		v, ok := j.e.Env[key]
		return v, ok
	}
	return "", false
}

// nccl judges the all-reduce phase: its error, its data check, its bus bandwidth and
// the transport of every channel between two GPUs.
func (j *judge) nccl() {
	n := j.r.NCCL
	if n == nil {
		return
	}
	if n.Error != "" {
		hint := "see the NCCL log (log_file, NCCL_DEBUG=INFO) for the failing call"
		if strings.Contains(n.Error, "/dev/shm") {
			hint = "NCCL needs /dev/shm: the init must mount a tmpfs there"
		}
		j.add(SevFail, "nccl.error", "nccl", "NCCL all-reduce failed: "+n.Error, n.Error, hint)
	}
	for _, s := range n.Sizes {
		if s.Wrong > 0 {
			j.add(SevFail, "nccl.data", fmt.Sprintf("nccl %s", humanBytes(s.Bytes)), fmt.Sprintf("all-reduce of %s over %d ranks: %d element(s) differ from the exact sum", humanBytes(s.Bytes), n.Ranks, s.Wrong),
				fmt.Sprintf("bytes=%d wrong=%d", s.Bytes, s.Wrong), "NCCL moved wrong data: peer mappings are broken (compare copy.corrupt); rerun with NCCL_P2P_DISABLE=1 to confirm")
		}
	}
	busbw, at := n.BusBWAtMax, int64(0)
	if len(n.Sizes) > 0 {
		last := n.Sizes[len(n.Sizes)-1]
		at = last.Bytes
		if busbw <= 0 {
			busbw = last.BusBW
		}
	}
	nonP2P := 0
	for _, t := range n.Transports {
		if !t.P2P && t.From != t.To {
			nonP2P++
		}
	}
	if j.e != nil && j.e.MinBusBWGBps > 0 && busbw > 0 && busbw < j.e.MinBusBWGBps {
		hint := "a slow pair drags the whole ring: compare the copy bandwidth matrix and pcie.link"
		if nonP2P > 0 {
			hint = "NCCL is not using P2P on every channel (see nccl.transport): fix that first"
		}
		j.add(SevFail, "nccl.busbw", "nccl busbw", fmt.Sprintf("all-reduce bus bandwidth %.1f GB/s at %s, below selftest.min_busbw_gbps = %.1f", busbw, humanBytes(at), j.e.MinBusBWGBps),
			fmt.Sprintf("busbw_at_max=%.2f bytes=%d", busbw, at), hint)
	}
	// NCCL ran over several GPUs but its log named no channel: which transport it took
	// is unknown, so P2P is unproven (the log was not written, not read, or not parsed).
	if n.Error == "" && n.Ranks > 1 && len(n.Sizes) > 0 && len(n.Transports) == 0 {
		sev := SevWarn
		if j.e != nil && j.e.RequireP2P {
			sev = SevFail
		}
		j.add(sev, "nccl.transport", "nccl", fmt.Sprintf("NCCL ran over %d ranks but its log (%s) names no channel connection: the transports are unknown", n.Ranks, orDefault(n.LogFile, "NCCL_DEBUG_FILE")),
			"transports=0 ranks="+fmt.Sprint(n.Ranks), "p2pcheck runs NCCL with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,P2P,SHM; check that the log file is writable and that this NCCL prints \"Channel ... via\" lines")
	}
	j.transports(n)
}

// transports reports every GPU pair with a channel NCCL did not connect through P2P.
func (j *judge) transports(n *NCCL) {
	type agg struct {
		a, b     int
		channels []int
		vias     []string
	}
	var order []*agg
	byPair := map[[2]int]*agg{}
	for _, t := range n.Transports {
		if t.P2P || t.From == t.To {
			continue
		}
		a, b := ordIndex(j.r, t.From), ordIndex(j.r, t.To)
		if a > b {
			a, b = b, a
		}
		g := byPair[[2]int{a, b}]
		if g == nil {
			g = &agg{a: a, b: b}
			byPair[[2]int{a, b}] = g
			order = append(order, g)
		}
		g.channels = append(g.channels, t.Channel)
		if !contains(g.vias, t.Via) {
			g.vias = append(g.vias, t.Via)
		}
	}
	sev := SevWarn
	if j.e != nil && j.e.RequireP2P {
		sev = SevFail
	} else if j.e != nil && j.e.P2P == recipe.P2POff {
		sev = SevInfo
	}
	for _, g := range order {
		topo := pairTopology(j.r, g.a, g.b)
		level, set := j.ncclEnv("NCCL_P2P_LEVEL")
		var hint string
		switch {
		case isTrue(j.envOr("NCCL_P2P_DISABLE")):
			hint = "NCCL_P2P_DISABLE is set: remove it from the recipe's env"
		case topo != "" && TopoRank(topo) > TopoRank(TopoPXB) && !(set && ncclCovers(level, topo)):
			hint = fmt.Sprintf("set NCCL_P2P_LEVEL=SYS: the pair is %s, beyond NCCL's default level PXB", topo)
			if set {
				hint = fmt.Sprintf("set NCCL_P2P_LEVEL=SYS: the pair is %s, beyond NCCL_P2P_LEVEL=%s", topo, level)
			} else if v, ok := j.recipeEnv("NCCL_P2P_LEVEL"); ok && j.r.NCCL.Env != nil {
				hint = fmt.Sprintf("the recipe sets NCCL_P2P_LEVEL=%s but NCCL ran without it: check the env reaches p2pcheck", v)
			}
		default:
			hint = "NCCL takes P2P only where NVML reports P2P OK for read and write: check p2p.status for this pair"
		}
		p := pairOf(j.r, g.a, g.b)
		ev := fmt.Sprintf("channels %v via %s; topology %s", g.channels, strings.Join(g.vias, ", "), orDefault(topo, "?"))
		if p != nil && (p.P2PRead != "" || p.P2PWrite != "") {
			ev += fmt.Sprintf("; nvml p2p r=%s w=%s", orDefault(p.P2PRead, "?"), orDefault(p.P2PWrite, "?"))
		}
		if set {
			ev += "; NCCL_P2P_LEVEL=" + level
		}
		j.add(sev, "nccl.transport", pairSubject(g.a, g.b), fmt.Sprintf("%s-%s: NCCL connected %d channel(s) via %s, not P2P", j.gpuLabel(g.a), j.gpuLabel(g.b), len(g.channels), strings.Join(g.vias, ", ")), ev, hint)
	}
}

func (j *judge) recipeEnv(key string) (string, bool) {
	if j.e == nil {
		return "", false
	}
	v, ok := j.e.Env[key]
	return v, ok
}

func (j *judge) envOr(key string) string {
	v, _ := j.ncclEnv(key)
	return v
}

func isTrue(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && v != "0"
}

// kernelEvents fails on every Xid, IOMMU fault, firmware failure and NVRM error the
// kernel logged during the run; repeats of the same line shape are counted, not listed.
func (j *judge) kernelEvents() {
	type agg struct {
		ev    KEvent
		count int
	}
	var order []*agg
	seen := map[string]*agg{}
	for _, ev := range j.r.KernelEvents {
		key := fmt.Sprintf("%s|%s|%d", ev.Kind, ev.BDF, ev.Code)
		if ev.Kind == KEventNVRM || ev.Kind == KEventFirmware {
			key += "|" + ev.Line
		}
		if a := seen[key]; a != nil {
			a.count++
			continue
		}
		a := &agg{ev: ev, count: 1}
		seen[key] = a
		order = append(order, a)
	}
	for _, a := range order {
		ev := a.ev
		where := ""
		if ev.BDF != "" {
			where = " on " + j.bdfLabel(ev.BDF)
		} else if i := j.gpuInLine(ev.Line); i >= 0 {
			where = " on " + j.gpuLabel(i)
		}
		times := ""
		if a.count > 1 {
			times = fmt.Sprintf(" (%d times)", a.count)
		}
		subject := orDefault(ev.BDF, ev.Kind)
		switch ev.Kind {
		case KEventXid:
			j.add(SevFail, "kernel.xid", fmt.Sprintf("xid %d %s", ev.Code, orDefault(ev.BDF, "?")), fmt.Sprintf("Xid %d%s%s", ev.Code, where, times), ev.Line, xidHint(ev.Code))
		case KEventIOMMU:
			j.add(SevFail, "kernel.iommu_fault", subject, "IOMMU fault"+where+times, ev.Line,
				"the IOMMU blocked a peer DMA: the driver must IOMMU-map peer windows (dynamic-BAR1 branch), or boot with iommu=pt")
		case KEventFirmware:
			ver := "driver.version"
			if j.e != nil && j.e.DriverVersion != "" {
				ver = j.e.DriverVersion
			}
			j.add(SevFail, "kernel.firmware", subject, "GPU firmware failed to load"+where+times, ev.Line,
				fmt.Sprintf("the image needs firmware-nvidia-gsp of driver.version (%s): /lib/firmware/nvidia/%s/gsp_*.bin", ver, ver))
		case KEventNVRM:
			j.add(SevFail, "kernel.nvrm", subject, "NVRM error"+where+times, ev.Line, "the driver's own error text: see the line, and kernel_log around it")
		default:
			j.add(SevFail, "kernel."+ev.Kind, subject, "kernel reported "+ev.Kind+where+times, ev.Line, "see the line in dmesg")
		}
	}
}

// gpuInLine finds the GPU a kernel-log line names by bus id, -1 if none.
func (j *judge) gpuInLine(line string) int {
	l := strings.ToLower(line)
	for i, g := range j.r.GPUs {
		if g.BDF != "" && strings.Contains(l, strings.ToLower(g.BDF)) {
			return i
		}
	}
	return -1
}

// bdfLabel names a bus id as a GPU when it is one.
func (j *judge) bdfLabel(bdf string) string {
	for i, g := range j.r.GPUs {
		if strings.EqualFold(g.BDF, bdf) || strings.HasSuffix(strings.ToLower(g.BDF), strings.ToLower(bdf)) {
			return j.gpuLabel(i)
		}
	}
	return bdf
}

func xidHint(code int) string {
	switch code {
	case 79:
		return "Xid 79: the GPU fell off the bus: power, riser or slot; check pcie.link and pcie.replay"
	case 31:
		return "Xid 31: a GPU memory-management fault: a bad peer mapping if it came during the copies"
	case 13, 43:
		return "an engine or channel fault: if it came during the peer copies, the peer mapping is broken"
	case 119, 120:
		return "GSP timed out or failed: check firmware-nvidia-gsp matches driver.version"
	case 48, 63, 64, 94, 95:
		return "a memory (ECC / row-remap) error: the card's memory is failing"
	}
	return "see NVIDIA's Xid catalogue for this number; an Xid during the self-test is never normal"
}
