// Package nvml asks the NVIDIA management library (libnvidia-ml) what the self-test needs
// to judge peer-to-peer: each GPU's BAR1, memory and PCIe link, and for each pair of GPUs
// the topology level and the driver's P2P read and write status, the very status NCCL
// gates its P2P transport on.
//
// The library is loaded with dlopen through purego, so the binary needs no cgo. The
// symbols are the versioned names nvml.h maps its calls to (nvmlInit_v2,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3, ...),
// and the structs are laid out here byte for byte as nvml.h declares them.
package nvml

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/dl"
)

// nvmlGpuP2PCapsIndex_t values.
const (
	capsRead   = 0
	capsWrite  = 1
	capsNVLink = 2
)

// nvmlReturn_t values the probe treats specially.
const (
	nvmlSuccess      = 0
	nvmlNotSupported = 3
)

// Result is what NVML said. NVML goes into Report.NVML as it is; GPUs are keyed by
// lower-case sysfs BDF ("0000:01:00.0") for merging into Report.GPUs[i].NVML; Pairs
// are keyed by two BDFs in ascending order and fill the NVML fields of Report.Pairs.
type Result struct {
	NVML  selftest.NVML
	GPUs  map[string]*selftest.NVMLGPU
	Pairs map[[2]string]PairInfo
}

// PairInfo is NVML's view of one GPU pair {A, B}, A < B: Topology is TopologyClass of
// nvmlDeviceGetTopologyCommonAncestor(A, B); Read and Write are StatusLetter of
// nvmlDeviceGetP2PStatus(A, B, READ / WRITE). A field NVML did not answer is "".
type PairInfo struct {
	Topology string
	Read     string
	Write    string
	NVLink   string // P2P status over NVLink; "" when NVML did not answer
}

// StatusLetter names an nvmlGpuP2PStatus_t the way `nvidia-smi topo -p2p r|w` does:
// OK, CNS (chipset not supported, what a stock GeForce driver answers), GNS (GPU not
// supported), TNS (topology not supported), NS (not supported), U (unknown). nvidia-smi
// has no documented letter for NVML_P2P_STATUS_DISABLED_BY_REGKEY (4); "DRK" is this
// package's own. Codes NVML may add later also read as U.
func StatusLetter(code int) string {
	switch code {
	case 0:
		return "OK"
	case 1:
		return "CNS"
	case 2:
		return "GNS"
	case 3:
		return "TNS"
	case 4:
		return "DRK"
	case 5:
		return "NS"
	}
	return "U"
}

// TopologyClass names an nvmlGpuTopologyLevel_t with nvidia-smi's topology letters
// (selftest.TopoPIX ... TopoSYS): SINGLE (10) PIX, MULTIPLE (20) PXB, HOSTBRIDGE (30)
// PHB, NODE (40; the old CPU alias) NODE, SYSTEM (50) SYS.
//
// INTERNAL (0) is two GPUs on one board (dual-GPU cards such as the K80). Such a board
// joins its GPUs with its own PCIe switch, which is what PIX means, and PIX keeps the
// pair ranked nearest by selftest.TopoRank, so INTERNAL reads as PIX rather than as
// nvidia-smi's "X" (its mark for a GPU against itself, which no pair is). Levels NVML may
// add later are "".
func TopologyClass(level int) string {
	switch level {
	case 0, 10:
		return selftest.TopoPIX
	case 20:
		return selftest.TopoPXB
	case 30:
		return selftest.TopoPHB
	case 40:
		return selftest.TopoNODE
	case 50:
		return selftest.TopoSYS
	}
	return ""
}

// pciInfo is nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it: 68 bytes, no padding.
type pciInfo struct {
	BusIDLegacy    [16]byte // "0000:01:00.0" (NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE)
	Domain         uint32
	Bus            uint32
	Device         uint32
	PCIDeviceID    uint32 // device id << 16 | vendor id
	PCISubSystemID uint32
	BusID          [32]byte // "00000000:01:00.0" (NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE)
}

// PCIInfo and Memory name the C layouts for a stand-in library (selftest/gpufake's
// FAKE NVML), whose entry points must have the bindings' exact Go types.
type (
	PCIInfo = pciInfo
	Memory  = memInfo
)

// Library is where the probe's entry points come from: libnvidia-ml through dlopen
// (Probe), or a FAKE stand-in that tests pass to ProbeWith (see package dl).
type Library = dl.Library

// memInfo is both nvmlBAR1Memory_t {bar1Total, bar1Free, bar1Used} and nvmlMemory_t
// {total, free, used}: three unsigned long long, in bytes.
type memInfo struct {
	Total, Free, Used uint64
}

// Buffer sizes from nvml.h.
const (
	driverVersionBuf = 80 // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
	deviceNameBuf    = 96 // NVML_DEVICE_NAME_V2_BUFFER_SIZE
)

// api holds the bound functions; a nil one was missing from the library.
type api struct {
	init                   func() int32
	shutdown               func() int32
	driverVersion          func(buf *byte, n uint32) int32
	cudaVersion            func(v *int32) int32
	count                  func(n *uint32) int32
	handleByIndex          func(i uint32, dev *uintptr) int32
	handleByBusID          func(busID string, dev *uintptr) int32
	pciInfo                func(dev uintptr, p *pciInfo) int32
	name                   func(dev uintptr, buf *byte, n uint32) int32
	bar1                   func(dev uintptr, m *memInfo) int32
	memory                 func(dev uintptr, m *memInfo) int32
	currGen, currWidth     func(dev uintptr, v *uint32) int32
	maxGen, maxWidth       func(dev uintptr, v *uint32) int32
	replay                 func(dev uintptr, v *uint32) int32
	displayMode            func(dev uintptr, v *uint32) int32 // nvmlEnableState_t
	displayActive          func(dev uintptr, v *uint32) int32
	temperature            func(dev uintptr, sensor int32, v *uint32) int32
	clockInfo              func(dev uintptr, clock int32, v *uint32) int32
	powerUsage             func(dev uintptr, v *uint32) int32
	throttleReasons        func(dev uintptr, v *uint64) int32
	eccMode                func(dev uintptr, current, pending *uint32) int32          // nvmlEnableState_t
	eccTotal               func(dev uintptr, errType, counter int32, v *uint64) int32 // nvmlMemoryErrorType_t, nvmlEccCounterType_t
	remappedRows           func(dev uintptr, corr, unc, pending, failure *uint32) int32
	p2pStatus              func(a, b uintptr, caps int32, status *int32) int32
	topologyCommonAncestor func(a, b uintptr, level *int32) int32
}

// probe is one run: the bound library and the problems met so far.
type probe struct {
	api
	lib  string
	src  Library
	errs []string
}

// note records a problem for Result.NVML.Error.
func (p *probe) note(format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
}

// bind looks a symbol up before registering it: purego panics on a missing symbol, and
// a library without one is a finding, not a crash. A missing symbol is noted and the
// function stays nil.
func (p *probe) bind(name string, fn any) bool {
	if err := p.src.Bind(name, fn); err != nil {
		p.note("%s is missing from %s", name, p.lib)
		return false
	}
	return true
}

// Probe loads lib (normally "libnvidia-ml.so.1"), initializes NVML and reads every GPU
// and every pair, then shuts NVML down again. The library stays loaded (NCCL loads the
// same one later; unloading a library whose threads may still run is not safe).
//
// The returned Result is never nil. The error is non-nil when NVML could not be asked
// at all: the library does not load, lacks one of the symbols every call needs
// (nvmlInit_v2, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetPciInfo_v3), nvmlInit_v2 or the device count fails, or ctx ends first.
// Problems with single calls (a symbol an older driver lacks, one GPU that does not
// answer) do not stop the probe; they are listed in Result.NVML.Error and leave their
// fields empty.
//
// NVML calls cannot be interrupted. When ctx ends first Probe returns at once with a
// Result that only names the library, and the call in progress is left behind on its
// own thread; the caller reports the stall and should not call NVML again.
func Probe(ctx context.Context, lib string) (*Result, error) {
	return probeWith(ctx, lib, nil)
}

// ProbeWith is Probe over l instead of a dlopened library.
func ProbeWith(ctx context.Context, l Library) (*Result, error) {
	return probeWith(ctx, l.Name(), l)
}

func probeWith(ctx context.Context, lib string, src Library) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return newResult(lib, "NVML was not asked: "+err.Error()), fmt.Errorf("asking NVML (%s): %w", lib, err)
	}
	type answer struct {
		r   *Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := run(ctx, lib, src)
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		return a.r, a.err
	case <-ctx.Done():
		return newResult(lib, "NVML did not answer in time: "+ctx.Err().Error()),
			fmt.Errorf("asking NVML (%s): no answer before the deadline: %w", lib, ctx.Err())
	}
}

func newResult(lib, errText string) *Result {
	return &Result{
		NVML:  selftest.NVML{Library: lib, Error: errText},
		GPUs:  map[string]*selftest.NVMLGPU{},
		Pairs: map[[2]string]PairInfo{},
	}
}

// run is the probe proper, in the order the calls must come.
func run(ctx context.Context, lib string, src Library) (*Result, error) {
	r := newResult(lib, "")
	p := &probe{lib: lib, src: src}
	defer func() { r.NVML.Error = strings.Join(p.errs, "; ") }()

	// 1. Load the library and bind what it has.
	if p.src == nil {
		l, err := dl.Open(lib)
		if err != nil {
			p.note("dlopen: %v", err)
			return r, fmt.Errorf("loading NVML: %w", err)
		}
		p.src = l
	}
	r.NVML.Loaded = true
	p.bind("nvmlInit_v2", &p.init)
	if p.init == nil {
		return r, fmt.Errorf("loading NVML: %s lacks functions every probe needs: %s", lib, strings.Join(p.errs, "; "))
	}

	// 2. Initialize; everything else needs it. On a box without a loaded driver this is
	// where the answer is (NVML_ERROR_DRIVER_NOT_LOADED), so it comes before the rest of
	// the binding: a library that can only say that is still a truthful library.
	st := selftest.NVMLStatus(int(p.init()))
	r.NVML.Init = &st
	if st.Code != nvmlSuccess {
		p.note("nvmlInit_v2: %s", st.Name)
		return r, fmt.Errorf("initializing NVML (%s): %s", lib, st.Name)
	}
	p.bindAll()
	if p.count == nil || p.handleByIndex == nil || p.pciInfo == nil {
		return r, fmt.Errorf("loading NVML: %s lacks functions every probe needs: %s", lib, strings.Join(p.errs, "; "))
	}
	if p.shutdown != nil {
		defer p.shutdown()
	}

	// 3. Versions.
	if p.driverVersion != nil {
		buf := make([]byte, driverVersionBuf+16)
		if rc := p.driverVersion(&buf[0], uint32(len(buf))); rc != nvmlSuccess {
			p.note("nvmlSystemGetDriverVersion: %s", selftest.NVMLStatus(int(rc)).Name)
		} else {
			r.NVML.DriverVersion = cString(buf)
		}
	}
	if p.cudaVersion != nil {
		var v int32
		if rc := p.cudaVersion(&v); rc != nvmlSuccess {
			p.note("nvmlSystemGetCudaDriverVersion_v2: %s", selftest.NVMLStatus(int(rc)).Name)
		} else {
			r.NVML.CUDAVersion = int(v)
		}
	}

	// 4. Enumerate the GPUs and name each by its bus id.
	var n uint32
	if rc := p.count(&n); rc != nvmlSuccess {
		name := selftest.NVMLStatus(int(rc)).Name
		p.note("nvmlDeviceGetCount_v2: %s", name)
		return r, fmt.Errorf("counting GPUs with NVML: %s", name)
	}
	handles := map[string]uintptr{}
	for i := uint32(0); i < n && i < 1024; i++ {
		if err := ctx.Err(); err != nil {
			return r, fmt.Errorf("asking NVML: %w", err)
		}
		bdf, dev, ok := p.device(i)
		if !ok {
			continue
		}
		if _, dup := handles[bdf]; dup {
			p.note("GPU %d: NVML lists %s twice", i, bdf)
			continue
		}
		handles[bdf] = dev
		r.GPUs[bdf] = p.gpu(bdf, dev)
	}

	// 5. Every pair, in BDF order.
	bdfs := make([]string, 0, len(handles))
	for b := range handles {
		bdfs = append(bdfs, b)
	}
	sort.Strings(bdfs)
	for i, a := range bdfs {
		for _, b := range bdfs[i+1:] {
			if err := ctx.Err(); err != nil {
				return r, fmt.Errorf("asking NVML: %w", err)
			}
			r.Pairs[[2]string{a, b}] = p.pair(a, b, handles[a], handles[b])
		}
	}
	return r, nil
}

// bindAll binds every function; missing ones are noted and stay nil.
func (p *probe) bindAll() {
	p.bind("nvmlShutdown", &p.shutdown)
	p.bind("nvmlSystemGetDriverVersion", &p.driverVersion)
	p.bind("nvmlSystemGetCudaDriverVersion_v2", &p.cudaVersion)
	p.bind("nvmlDeviceGetCount_v2", &p.count)
	p.bind("nvmlDeviceGetHandleByIndex_v2", &p.handleByIndex)
	p.bind("nvmlDeviceGetHandleByPciBusId_v2", &p.handleByBusID)
	p.bind("nvmlDeviceGetPciInfo_v3", &p.pciInfo)
	p.bind("nvmlDeviceGetName", &p.name)
	p.bind("nvmlDeviceGetBAR1MemoryInfo", &p.bar1)
	p.bind("nvmlDeviceGetMemoryInfo", &p.memory)
	p.bind("nvmlDeviceGetCurrPcieLinkGeneration", &p.currGen)
	p.bind("nvmlDeviceGetCurrPcieLinkWidth", &p.currWidth)
	p.bind("nvmlDeviceGetMaxPcieLinkGeneration", &p.maxGen)
	p.bind("nvmlDeviceGetMaxPcieLinkWidth", &p.maxWidth)
	p.bind("nvmlDeviceGetPcieReplayCounter", &p.replay)
	p.bind("nvmlDeviceGetDisplayMode", &p.displayMode)
	p.bind("nvmlDeviceGetDisplayActive", &p.displayActive)
	p.bind("nvmlDeviceGetP2PStatus", &p.p2pStatus)
	// The sensors are bound quietly: a library without one is no problem of the
	// self-test's, and the soak's samples simply lack that figure.
	_ = p.src.Bind("nvmlDeviceGetTemperature", &p.temperature)
	_ = p.src.Bind("nvmlDeviceGetClockInfo", &p.clockInfo)
	_ = p.src.Bind("nvmlDeviceGetPowerUsage", &p.powerUsage)
	_ = p.src.Bind("nvmlDeviceGetCurrentClocksThrottleReasons", &p.throttleReasons)
	_ = p.src.Bind("nvmlDeviceGetEccMode", &p.eccMode)
	_ = p.src.Bind("nvmlDeviceGetTotalEccErrors", &p.eccTotal)
	_ = p.src.Bind("nvmlDeviceGetRemappedRows", &p.remappedRows)
	p.bind("nvmlDeviceGetTopologyCommonAncestor", &p.topologyCommonAncestor)
}

// device returns GPU i's handle and sysfs BDF. When the library has
// nvmlDeviceGetHandleByPciBusId_v2 it must map the bus id back to the same handle; a
// library that does not is noted (it would make every later per-pair answer suspect).
func (p *probe) device(i uint32) (string, uintptr, bool) {
	var dev uintptr
	if rc := p.handleByIndex(i, &dev); rc != nvmlSuccess {
		p.note("nvmlDeviceGetHandleByIndex_v2(%d): %s", i, selftest.NVMLStatus(int(rc)).Name)
		return "", 0, false
	}
	var info pciInfo
	if rc := p.pciInfo(dev, &info); rc != nvmlSuccess {
		p.note("nvmlDeviceGetPciInfo_v3(GPU %d): %s", i, selftest.NVMLStatus(int(rc)).Name)
		return "", 0, false
	}
	busID := cString(info.BusID[:])
	bdf, ok := BDF(busID)
	if !ok {
		// The numeric fields say the same; NVML reports no function, GPUs are function 0.
		bdf = fmt.Sprintf("%04x:%02x:%02x.0", info.Domain, info.Bus, info.Device)
		p.note("GPU %d: unreadable NVML bus id %q, using %s", i, busID, bdf)
	}
	if p.handleByBusID != nil && ok {
		var back uintptr
		if rc := p.handleByBusID(busID, &back); rc != nvmlSuccess {
			p.note("nvmlDeviceGetHandleByPciBusId_v2(%s): %s", busID, selftest.NVMLStatus(int(rc)).Name)
		} else if back != dev {
			p.note("NVML maps bus id %s to a different GPU than index %d", busID, i)
		}
	}
	return bdf, dev, true
}

// nvml.h's enum values for the sensor calls.
const (
	nvmlTemperatureGPU = 0 // nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU
	nvmlClockSM        = 1 // nvmlClockType_t NVML_CLOCK_SM
	nvmlClockMem       = 2 // NVML_CLOCK_MEM
	nvmlCorrected      = 0 // nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED
	nvmlUncorrected    = 1 // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
	nvmlVolatileECC    = 0 // nvmlEccCounterType_t NVML_VOLATILE_ECC
)

// gpu reads one GPU's fields. NOT_SUPPORTED leaves a field at its zero value (or -1
// for the replay counter) without a note: consumer cards lack some counters.
func (p *probe) gpu(bdf string, dev uintptr) *selftest.NVMLGPU {
	g := &selftest.NVMLGPU{ReplayCounter: -1}
	check := func(fn string, rc int32) bool {
		if rc == nvmlSuccess {
			return true
		}
		if rc != nvmlNotSupported {
			p.note("%s(%s): %s", fn, bdf, selftest.NVMLStatus(int(rc)).Name)
		}
		return false
	}
	if p.name != nil {
		buf := make([]byte, deviceNameBuf)
		if check("nvmlDeviceGetName", p.name(dev, &buf[0], uint32(len(buf)))) {
			g.Name = cString(buf)
		}
	}
	var m memInfo
	if p.bar1 != nil && check("nvmlDeviceGetBAR1MemoryInfo", p.bar1(dev, &m)) {
		g.BAR1Total, g.BAR1Used = clamp(m.Total), clamp(m.Used)
	}
	m = memInfo{}
	if p.memory != nil && check("nvmlDeviceGetMemoryInfo", p.memory(dev, &m)) {
		g.FBTotal = clamp(m.Total)
	}
	u32 := func(fn string, f func(uintptr, *uint32) int32, set func(uint32)) {
		if f == nil {
			return
		}
		var v uint32
		if check(fn, f(dev, &v)) {
			set(v)
		}
	}
	u32("nvmlDeviceGetCurrPcieLinkGeneration", p.currGen, func(v uint32) { g.LinkGen = int(v) })
	u32("nvmlDeviceGetCurrPcieLinkWidth", p.currWidth, func(v uint32) { g.LinkWidth = int(v) })
	u32("nvmlDeviceGetMaxPcieLinkGeneration", p.maxGen, func(v uint32) { g.MaxLinkGen = int(v) })
	u32("nvmlDeviceGetMaxPcieLinkWidth", p.maxWidth, func(v uint32) { g.MaxLinkWidth = int(v) })
	u32("nvmlDeviceGetPcieReplayCounter", p.replay, func(v uint32) { g.ReplayCounter = int64(v) })
	// A GPU with a display attached (or initialized for one) is the one the P2P forks'
	// static BAR1 mapping does not get.
	u32("nvmlDeviceGetDisplayMode", p.displayMode, func(v uint32) { x := int(v); g.DisplayMode = &x })
	u32("nvmlDeviceGetDisplayActive", p.displayActive, func(v uint32) { x := int(v); g.DisplayActive = &x })
	// Sensors: any failure leaves the figure out, without a note (the self-test does
	// not judge them; the soak samples them).
	quiet := func(rc int32) bool { return rc == nvmlSuccess }
	var v uint32
	if p.temperature != nil && quiet(p.temperature(dev, nvmlTemperatureGPU, &v)) {
		x := int(v)
		g.TemperatureC = &x
	}
	if p.clockInfo != nil && quiet(p.clockInfo(dev, nvmlClockSM, &v)) {
		x := int(v)
		g.SMClockMHz = &x
	}
	if p.clockInfo != nil && quiet(p.clockInfo(dev, nvmlClockMem, &v)) {
		x := int(v)
		g.MemClockMHz = &x
	}
	if p.powerUsage != nil && quiet(p.powerUsage(dev, &v)) {
		x := int(v)
		g.PowerMW = &x
	}
	var mask uint64
	if p.throttleReasons != nil && quiet(p.throttleReasons(dev, &mask)) {
		g.ThrottleReasons = &mask
	}
	g.ECC = p.ecc(dev)
	return g
}

// ecc reads the memory-error state, quietly like the sensors: nil when NVML answers
// none of it (a library without the calls). A card that says NOT_SUPPORTED to the
// mode has no ECC ("none"), which is itself worth a line in the soak's findings.
func (p *probe) ecc(dev uintptr) *selftest.ECC {
	if p.eccMode == nil && p.remappedRows == nil {
		return nil
	}
	e := &selftest.ECC{}
	answered := false
	if p.eccMode != nil {
		var cur, pend uint32
		switch rc := p.eccMode(dev, &cur, &pend); {
		case rc == nvmlSuccess && cur == 1:
			e.Mode, answered = selftest.ECCOn, true
		case rc == nvmlSuccess:
			e.Mode, answered = selftest.ECCOff, true
		case rc == nvmlNotSupported:
			e.Mode, answered = selftest.ECCNone, true
		}
	}
	if p.eccTotal != nil && e.Mode == selftest.ECCOn {
		for _, x := range []struct {
			kind int32
			dst  **uint64
		}{{nvmlCorrected, &e.Corrected}, {nvmlUncorrected, &e.Uncorrected}} {
			var v uint64
			if p.eccTotal(dev, x.kind, nvmlVolatileECC, &v) == nvmlSuccess {
				*x.dst = &v
			}
		}
	}
	if p.remappedRows != nil {
		var corr, unc, pending, failure uint32
		if p.remappedRows(dev, &corr, &unc, &pending, &failure) == nvmlSuccess {
			c, u, pe, f := int(corr), int(unc), pending != 0, failure != 0
			e.RemappedCorrectable, e.RemappedUncorrectable, e.RemapPending, e.RemapFailure = &c, &u, &pe, &f
			answered = true
		}
	}
	if !answered {
		return nil
	}
	return e
}

// pair asks the topology level and both P2P statuses of a -> b.
func (p *probe) pair(a, b string, da, db uintptr) PairInfo {
	var pi PairInfo
	if p.topologyCommonAncestor != nil {
		var level int32
		if rc := p.topologyCommonAncestor(da, db, &level); rc != nvmlSuccess {
			p.note("nvmlDeviceGetTopologyCommonAncestor(%s, %s): %s", a, b, selftest.NVMLStatus(int(rc)).Name)
		} else if pi.Topology = TopologyClass(int(level)); pi.Topology == "" {
			p.note("nvmlDeviceGetTopologyCommonAncestor(%s, %s): unknown level %d", a, b, level)
		}
	}
	if p.p2pStatus != nil {
		for _, c := range []struct {
			caps int32
			name string
			dst  *string
		}{{capsRead, "READ", &pi.Read}, {capsWrite, "WRITE", &pi.Write}} {
			var st int32
			if rc := p.p2pStatus(da, db, c.caps, &st); rc != nvmlSuccess {
				p.note("nvmlDeviceGetP2PStatus(%s, %s, %s): %s", a, b, c.name, selftest.NVMLStatus(int(rc)).Name)
				continue
			}
			*c.dst = StatusLetter(int(st))
		}
		// NVLink is asked quietly: PCIe-only boxes (every RTX 4090 box) answer it with
		// an error or NS, and that is not a problem worth a note.
		var st int32
		if p.p2pStatus(da, db, capsNVLink, &st) == nvmlSuccess {
			pi.NVLink = StatusLetter(int(st))
		}
	}
	return pi
}

// BDF turns an NVML bus id ("00000000:01:00.0", eight-digit domain, upper-case hex)
// into the sysfs form "0000:01:00.0". It also accepts the legacy four-digit form and
// ids without a function (read as function 0).
func BDF(busID string) (string, bool) {
	s := strings.TrimSpace(busID)
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || len(dom) < 1 || len(dom) > 8 {
		return "", false
	}
	bus, rest, ok := strings.Cut(rest, ":")
	if !ok || len(bus) != 2 {
		return "", false
	}
	devfn, fn, hasFn := strings.Cut(rest, ".")
	if len(devfn) != 2 || (hasFn && len(fn) != 1) {
		return "", false
	}
	if !hasFn {
		fn = "0"
	}
	d, err1 := strconv.ParseUint(dom, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(devfn, 16, 8)
	f, err4 := strconv.ParseUint(fn, 8, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || d > 0xffff || v > 0x1f {
		return "", false
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, v, f), true
}

// cString returns buf up to its first NUL.
func cString(buf []byte) string {
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}

// clamp keeps a byte count inside int64.
func clamp(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}

// The layouts above are what the C library writes into; a wrong size would corrupt
// memory silently, so pin them at compile time.
var (
	_ [68 - unsafe.Sizeof(pciInfo{})]struct{}
	_ [unsafe.Sizeof(pciInfo{}) - 68]struct{}
	_ [24 - unsafe.Sizeof(memInfo{})]struct{}
	_ [unsafe.Sizeof(memInfo{}) - 24]struct{}
)
