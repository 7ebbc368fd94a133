package gpufake

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/peerboot/peerboot/selftest/nvml"
)

// NVMLName labels the FAKE libnvidia-ml in reports.
const NVMLName = "FAKE-libnvidia-ml (selftest/gpufake, no GPU)"

// FakeNVML is what the FAKE libnvidia-ml's entry points return, as raw numbers:
// nvmlReturn_t of nvmlInit_v2, per GPU the values the per-device queries fill in, per
// pair the nvmlGpuTopologyLevel_t and nvmlGpuP2PStatus_t codes.
type FakeNVML struct {
	Init          int            `json:"init"` // nvmlInit_v2's nvmlReturn_t [0]
	DriverVersion string         `json:"driver_version"`
	CUDAVersion   int            `json:"cuda_version"`
	GPUs          []FakeNVMLGPU  `json:"gpus"` // in NVML index order
	Pairs         []FakeNVMLPair `json:"pairs"`
}

// FakeNVMLGPU is one device's answers.
type FakeNVMLGPU struct {
	BDF       string `json:"bdf"` // 0000:01:00.0; NVML prints 00000000:01:00.0
	Name      string `json:"name"`
	BAR1Total uint64 `json:"bar1_total"`
	BAR1Used  uint64 `json:"bar1_used"`
	// BAR1UsedAfter is what NVML answers once the copies are over (After); nil:
	// the same as BAR1Used, every window given back.
	BAR1UsedAfter *uint64 `json:"bar1_used_after,omitempty"`
	FBTotal       uint64  `json:"fb_total"`
	LinkGen       uint32  `json:"link_gen"`
	LinkWidth     uint32  `json:"link_width"`
	MaxGen        uint32  `json:"max_gen"`
	MaxWidth      uint32  `json:"max_width"`
	Replay        int     `json:"replay"`       // -1: NVML_ERROR_NOT_SUPPORTED
	DisplayMode   int     `json:"display_mode"` // nvmlEnableState_t
	Display       int     `json:"display_active"`
	// Sensors; nil answers NVML_ERROR_NOT_SUPPORTED. ThrottleReasons is the
	// nvmlClocksThrottleReason* bit mask.
	TempC           *uint32 `json:"temp_c,omitempty"`
	SMClockMHz      *uint32 `json:"sm_clock_mhz,omitempty"`
	MemClockMHz     *uint32 `json:"mem_clock_mhz,omitempty"`
	PowerMW         *uint32 `json:"power_mw,omitempty"`
	ThrottleReasons *uint64 `json:"throttle_reasons,omitempty"`
	// ECC is the card's memory-error answers; nil: the ECC calls answer
	// NOT_SUPPORTED for this GPU.
	ECC *FakeECC `json:"ecc,omitempty"`
}

// FakeECC is what nvmlDeviceGetEccMode, nvmlDeviceGetTotalEccErrors (volatile) and
// nvmlDeviceGetRemappedRows answer for one GPU.
type FakeECC struct {
	Mode        int    `json:"mode"` // nvmlEnableState_t: 1 on, 0 off; -1 NOT_SUPPORTED
	Corrected   uint64 `json:"corrected"`
	Uncorrected uint64 `json:"uncorrected"`
	// Remap says the card answers nvmlDeviceGetRemappedRows (data-centre cards).
	Remap                 bool `json:"remap"`
	RemappedCorrectable   int  `json:"remapped_correctable"`
	RemappedUncorrectable int  `json:"remapped_uncorrectable"`
	RemapPending          bool `json:"remap_pending"`
	RemapFailure          bool `json:"remap_failure"`
}

// After is the NVML a query answers after the copy phases: each GPU's BAR1 used is its
// BAR1UsedAfter where the scenario sets one.
func (c FakeNVML) After() FakeNVML {
	gpus := make([]FakeNVMLGPU, len(c.GPUs))
	for i, g := range c.GPUs {
		if g.BAR1UsedAfter != nil {
			g.BAR1Used = *g.BAR1UsedAfter
		}
		gpus[i] = g
	}
	c.GPUs = gpus
	return c
}

// FakeNVMLPair is one pair's codes (order of A and B does not matter). NVLink -1
// answers NVML_ERROR_NOT_SUPPORTED, as PCIe-only boxes do.
type FakeNVMLPair struct {
	A      string `json:"a"`
	B      string `json:"b"`
	Level  int    `json:"level"`
	Read   int    `json:"read"`
	Write  int    `json:"write"`
	NVLink int    `json:"nvlink"`
}

// nvmlReturn_t values the FAKE NVML answers with.
const (
	nvmlSuccess         = 0
	nvmlUninitialized   = 1
	nvmlInvalidArgument = 2
	nvmlNotSupported    = 3
	nvmlInsufficient    = 7
	nvmlNotFound        = 6
)

type fakeNVML struct {
	cfg    FakeNVML
	inited bool
}

// NewNVML is a FAKE libnvidia-ml answering cfg; selftest/nvml's real probe runs over
// it through nvml.ProbeWith.
func NewNVML(cfg FakeNVML) *FakeLibrary {
	f := &fakeNVML{cfg: cfg}
	lib := &FakeLibrary{name: NVMLName, syms: map[string]any{
		"nvmlInit_v2":                         f.init,
		"nvmlShutdown":                        f.shutdown,
		"nvmlSystemGetDriverVersion":          f.driverVersion,
		"nvmlSystemGetCudaDriverVersion_v2":   f.cudaVersion,
		"nvmlDeviceGetCount_v2":               f.count,
		"nvmlDeviceGetHandleByIndex_v2":       f.handleByIndex,
		"nvmlDeviceGetHandleByPciBusId_v2":    f.handleByBusID,
		"nvmlDeviceGetPciInfo_v3":             f.pciInfo,
		"nvmlDeviceGetName":                   f.name,
		"nvmlDeviceGetBAR1MemoryInfo":         f.bar1,
		"nvmlDeviceGetMemoryInfo":             f.memory,
		"nvmlDeviceGetCurrPcieLinkGeneration": f.u32(func(g FakeNVMLGPU) (uint32, bool) { return g.LinkGen, true }),
		"nvmlDeviceGetCurrPcieLinkWidth":      f.u32(func(g FakeNVMLGPU) (uint32, bool) { return g.LinkWidth, true }),
		"nvmlDeviceGetMaxPcieLinkGeneration":  f.u32(func(g FakeNVMLGPU) (uint32, bool) { return g.MaxGen, true }),
		"nvmlDeviceGetMaxPcieLinkWidth":       f.u32(func(g FakeNVMLGPU) (uint32, bool) { return g.MaxWidth, true }),
		"nvmlDeviceGetTemperature":            f.sensor(func(g FakeNVMLGPU, kind int32) *uint32 { return g.TempC }),
		"nvmlDeviceGetClockInfo": f.sensor(func(g FakeNVMLGPU, kind int32) *uint32 {
			switch kind {
			case 1:
				return g.SMClockMHz
			case 2:
				return g.MemClockMHz
			}
			return nil
		}),
		"nvmlDeviceGetPowerUsage": f.u32(func(g FakeNVMLGPU) (uint32, bool) {
			if g.PowerMW == nil {
				return 0, false
			}
			return *g.PowerMW, true
		}),
		"nvmlDeviceGetCurrentClocksThrottleReasons": f.throttle,
		"nvmlDeviceGetPcieReplayCounter":            f.u32(func(g FakeNVMLGPU) (uint32, bool) { return uint32(g.Replay), g.Replay >= 0 }),
		"nvmlDeviceGetDisplayMode":                  f.u32(func(g FakeNVMLGPU) (uint32, bool) { return uint32(g.DisplayMode), true }),
		"nvmlDeviceGetDisplayActive":                f.u32(func(g FakeNVMLGPU) (uint32, bool) { return uint32(g.Display), true }),
		"nvmlDeviceGetP2PStatus":                    f.p2pStatus,
		"nvmlDeviceGetTopologyCommonAncestor":       f.topology,
	}}
	withECC(f, lib.syms)
	return lib
}

// withECC adds the ECC entry points when a GPU of cfg answers them: scenarios
// written without ECC stand for a library that lacks the calls (their reports stay as
// they were), as an older libnvidia-ml would.
func withECC(f *fakeNVML, syms map[string]any) {
	for _, g := range f.cfg.GPUs {
		if g.ECC == nil {
			continue
		}
		syms["nvmlDeviceGetEccMode"] = f.eccMode
		syms["nvmlDeviceGetTotalEccErrors"] = f.eccTotal
		syms["nvmlDeviceGetRemappedRows"] = f.remappedRows
		return
	}
}

func (f *fakeNVML) eccMode(dev uintptr, current, pending *uint32) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	if g.ECC == nil || g.ECC.Mode < 0 {
		return nvmlNotSupported
	}
	*current, *pending = uint32(g.ECC.Mode), uint32(g.ECC.Mode)
	return nvmlSuccess
}

func (f *fakeNVML) eccTotal(dev uintptr, errType, counter int32, v *uint64) int32 {
	g, ok := f.dev(dev)
	if !ok || counter != 0 || errType < 0 || errType > 1 {
		return nvmlInvalidArgument
	}
	if g.ECC == nil || g.ECC.Mode != 1 {
		return nvmlNotSupported
	}
	*v = g.ECC.Corrected
	if errType == 1 {
		*v = g.ECC.Uncorrected
	}
	return nvmlSuccess
}

func (f *fakeNVML) remappedRows(dev uintptr, corr, unc, pending, failure *uint32) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	if g.ECC == nil || !g.ECC.Remap {
		return nvmlNotSupported
	}
	b := func(x bool) uint32 {
		if x {
			return 1
		}
		return 0
	}
	*corr, *unc, *pending, *failure = uint32(g.ECC.RemappedCorrectable), uint32(g.ECC.RemappedUncorrectable), b(g.ECC.RemapPending), b(g.ECC.RemapFailure)
	return nvmlSuccess
}

func (f *fakeNVML) init() int32 {
	if f.cfg.Init != 0 {
		return int32(f.cfg.Init)
	}
	f.inited = true
	return nvmlSuccess
}

func (f *fakeNVML) shutdown() int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	f.inited = false
	return nvmlSuccess
}

func cPut(buf *byte, n uint32, s string) int32 {
	if int(n) < len(s)+1 {
		return nvmlInsufficient
	}
	out := unsafe.Slice(buf, int(n))
	copy(out, s)
	out[len(s)] = 0
	return nvmlSuccess
}

func (f *fakeNVML) driverVersion(buf *byte, n uint32) int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	return cPut(buf, n, f.cfg.DriverVersion)
}

func (f *fakeNVML) cudaVersion(v *int32) int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	*v = int32(f.cfg.CUDAVersion)
	return nvmlSuccess
}

func (f *fakeNVML) count(n *uint32) int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	*n = uint32(len(f.cfg.GPUs))
	return nvmlSuccess
}

// Device handles are index+1, never 0.
func (f *fakeNVML) dev(h uintptr) (FakeNVMLGPU, bool) {
	i := int(h) - 1
	if !f.inited || i < 0 || i >= len(f.cfg.GPUs) {
		return FakeNVMLGPU{}, false
	}
	return f.cfg.GPUs[i], true
}

func (f *fakeNVML) handleByIndex(i uint32, dev *uintptr) int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	if int(i) >= len(f.cfg.GPUs) {
		return nvmlInvalidArgument
	}
	*dev = uintptr(i) + 1
	return nvmlSuccess
}

// busID is NVML's spelling of a BDF: an 8-digit domain, upper case.
func busID(bdf string) string { return strings.ToUpper("0000" + bdf) }

func (f *fakeNVML) handleByBusID(id string, dev *uintptr) int32 {
	if !f.inited {
		return nvmlUninitialized
	}
	for i, g := range f.cfg.GPUs {
		if strings.EqualFold(busID(g.BDF), id) {
			*dev = uintptr(i) + 1
			return nvmlSuccess
		}
	}
	return nvmlNotFound
}

func (f *fakeNVML) pciInfo(dev uintptr, p *nvml.PCIInfo) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	var dom, bus, d, fn uint32
	if _, err := fmt.Sscanf(g.BDF, "%x:%x:%x.%x", &dom, &bus, &d, &fn); err != nil {
		return nvmlInvalidArgument
	}
	*p = nvml.PCIInfo{Domain: dom, Bus: bus, Device: d, PCIDeviceID: 0x268410de}
	copy(p.BusIDLegacy[:len(p.BusIDLegacy)-1], strings.ToUpper(g.BDF))
	copy(p.BusID[:len(p.BusID)-1], busID(g.BDF))
	return nvmlSuccess
}

func (f *fakeNVML) name(dev uintptr, buf *byte, n uint32) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	return cPut(buf, n, "FAKE "+g.Name)
}

func (f *fakeNVML) bar1(dev uintptr, m *nvml.Memory) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	*m = nvml.Memory{Total: g.BAR1Total, Used: g.BAR1Used, Free: g.BAR1Total - g.BAR1Used}
	return nvmlSuccess
}

func (f *fakeNVML) memory(dev uintptr, m *nvml.Memory) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	*m = nvml.Memory{Total: g.FBTotal, Used: 431 << 20, Free: g.FBTotal - 431<<20}
	return nvmlSuccess
}

// sensor answers a call with a sensor or clock argument (nvmlDeviceGetTemperature,
// nvmlDeviceGetClockInfo): NOT_SUPPORTED where get gives nil.
func (f *fakeNVML) sensor(get func(FakeNVMLGPU, int32) *uint32) func(dev uintptr, kind int32, v *uint32) int32 {
	return func(dev uintptr, kind int32, v *uint32) int32 {
		g, ok := f.dev(dev)
		if !ok {
			return nvmlInvalidArgument
		}
		x := get(g, kind)
		if x == nil {
			return nvmlNotSupported
		}
		*v = *x
		return nvmlSuccess
	}
}

func (f *fakeNVML) throttle(dev uintptr, v *uint64) int32 {
	g, ok := f.dev(dev)
	if !ok {
		return nvmlInvalidArgument
	}
	if g.ThrottleReasons == nil {
		return nvmlNotSupported
	}
	*v = *g.ThrottleReasons
	return nvmlSuccess
}

func (f *fakeNVML) u32(get func(FakeNVMLGPU) (uint32, bool)) func(dev uintptr, v *uint32) int32 {
	return func(dev uintptr, v *uint32) int32 {
		g, ok := f.dev(dev)
		if !ok {
			return nvmlInvalidArgument
		}
		x, ok := get(g)
		if !ok {
			return nvmlNotSupported
		}
		*v = x
		return nvmlSuccess
	}
}

func (f *fakeNVML) pair(a, b uintptr) (FakeNVMLPair, bool) {
	ga, ok1 := f.dev(a)
	gb, ok2 := f.dev(b)
	if !ok1 || !ok2 {
		return FakeNVMLPair{}, false
	}
	for _, p := range f.cfg.Pairs {
		if (strings.EqualFold(p.A, ga.BDF) && strings.EqualFold(p.B, gb.BDF)) || (strings.EqualFold(p.A, gb.BDF) && strings.EqualFold(p.B, ga.BDF)) {
			return p, true
		}
	}
	return FakeNVMLPair{}, false
}

func (f *fakeNVML) p2pStatus(a, b uintptr, caps int32, status *int32) int32 {
	p, ok := f.pair(a, b)
	if !ok {
		return nvmlInvalidArgument
	}
	switch caps {
	case 0:
		*status = int32(p.Read)
	case 1:
		*status = int32(p.Write)
	case 2:
		if p.NVLink < 0 {
			return nvmlNotSupported
		}
		*status = int32(p.NVLink)
	default:
		return nvmlNotSupported
	}
	return nvmlSuccess
}

func (f *fakeNVML) topology(a, b uintptr, level *int32) int32 {
	p, ok := f.pair(a, b)
	if !ok {
		return nvmlInvalidArgument
	}
	*level = int32(p.Level)
	return nvmlSuccess
}
