package nvml_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nvml"
)

// The tests below run the real probe over the FAKE libnvidia-ml of selftest/gpufake
// (package nvml_test, since gpufake imports nvml). patched stands in for a library
// that lacks an entry point or answers one differently from the FAKE.

// patched is lib with some entry points replaced; a nil replacement hides the symbol.
type patched struct {
	nvml.Library
	syms map[string]any
}

var errHidden = errors.New("no such symbol")

func (p patched) Bind(name string, fn any) error {
	impl, ok := p.syms[name]
	if !ok {
		return p.Library.Bind(name, fn)
	}
	if impl == nil {
		return errHidden
	}
	reflect.ValueOf(fn).Elem().Set(reflect.ValueOf(impl))
	return nil
}

func u32(v uint32) *uint32 { return &v }
func u64(v uint64) *uint64 { return &v }
func ptr[T any](v T) *T    { return &v }

// twoGPUs is an H200 with every sensor and ECC, and a GeForce without either.
func twoGPUs() gpufake.FakeNVML {
	return gpufake.FakeNVML{DriverVersion: "570.86.15", CUDAVersion: 12080,
		GPUs: []gpufake.FakeNVMLGPU{
			{BDF: "0000:18:00.0", Name: "NVIDIA H200", BAR1Total: 256 << 30, BAR1Used: 6 << 20, FBTotal: 141 << 30,
				LinkGen: 5, LinkWidth: 16, MaxGen: 5, MaxWidth: 16, Replay: 7, DisplayMode: 0, Display: 0,
				TempC: u32(41), SMClockMHz: u32(1980), MemClockMHz: u32(3201), PowerMW: u32(123456), ThrottleReasons: u64(0x4),
				ECC: &gpufake.FakeECC{Mode: 1, Corrected: 4, Uncorrected: 1, Remap: true, RemappedCorrectable: 2, RemappedUncorrectable: 3, RemapPending: true}},
			{BDF: "0000:c1:00.0", Name: "NVIDIA GeForce RTX 4090", BAR1Total: 256 << 20, BAR1Used: 1 << 20, FBTotal: 24 << 30,
				LinkGen: 1, LinkWidth: 8, MaxGen: 4, MaxWidth: 16, Replay: -1, DisplayMode: 1, Display: 1,
				ECC: &gpufake.FakeECC{Mode: -1}},
		},
		Pairs: []gpufake.FakeNVMLPair{{A: "0000:c1:00.0", B: "0000:18:00.0", Level: 50, Read: 1, Write: 0, NVLink: 5}},
	}
}

func TestProbeReadsEveryAnswer(t *testing.T) {
	r, err := nvml.ProbeWith(context.Background(), gpufake.NewNVML(twoGPUs()))
	if err != nil {
		t.Fatal(err)
	}
	wantNVML := selftest.NVML{Library: gpufake.NVMLName, Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS"},
		DriverVersion: "570.86.15", CUDAVersion: 12080}
	if !reflect.DeepEqual(r.NVML, wantNVML) {
		t.Errorf("NVML %+v\nwant %+v", r.NVML, wantNVML)
	}
	want := map[string]*selftest.NVMLGPU{
		"0000:18:00.0": {Name: "FAKE NVIDIA H200", BAR1Total: 256 << 30, BAR1Used: 6 << 20, FBTotal: 141 << 30,
			LinkGen: 5, LinkWidth: 16, MaxLinkGen: 5, MaxLinkWidth: 16, ReplayCounter: 7, DisplayMode: ptr(0), DisplayActive: ptr(0),
			TemperatureC: ptr(41), SMClockMHz: ptr(1980), MemClockMHz: ptr(3201), PowerMW: ptr(123456), ThrottleReasons: u64(0x4),
			ECC: &selftest.ECC{Mode: selftest.ECCOn, Corrected: u64(4), Uncorrected: u64(1),
				RemappedCorrectable: ptr(2), RemappedUncorrectable: ptr(3), RemapPending: ptr(true), RemapFailure: ptr(false)}},
		// NOT_SUPPORTED leaves the replay counter at -1 and the sensors out, without a note.
		"0000:c1:00.0": {Name: "FAKE NVIDIA GeForce RTX 4090", BAR1Total: 256 << 20, BAR1Used: 1 << 20, FBTotal: 24 << 30,
			LinkGen: 1, LinkWidth: 8, MaxLinkGen: 4, MaxLinkWidth: 16, ReplayCounter: -1, DisplayMode: ptr(1), DisplayActive: ptr(1),
			ECC: &selftest.ECC{Mode: selftest.ECCNone}},
	}
	if !reflect.DeepEqual(r.GPUs, want) {
		for k, g := range r.GPUs {
			t.Logf("got %s: %+v ecc %+v", k, *g, g.ECC)
		}
		t.Errorf("GPUs differ")
	}
	wantPairs := map[[2]string]nvml.PairInfo{{"0000:18:00.0", "0000:c1:00.0"}: {Topology: selftest.TopoSYS, Read: "CNS", Write: "OK", NVLink: "NS"}}
	if !reflect.DeepEqual(r.Pairs, wantPairs) {
		t.Errorf("pairs %+v\nwant %+v", r.Pairs, wantPairs)
	}
}

// Byte counts above what int64 holds are reported as the largest int64, never as
// a negative size.
func TestProbeClampsHugeCounts(t *testing.T) {
	cfg := gpufake.FakeNVML{GPUs: []gpufake.FakeNVMLGPU{{BDF: "0000:01:00.0", Replay: -1,
		BAR1Total: 1 << 63, BAR1Used: 1<<63 - 1, FBTotal: math.MaxUint64}}}
	r, err := nvml.ProbeWith(context.Background(), gpufake.NewNVML(cfg))
	if err != nil {
		t.Fatal(err)
	}
	g := r.GPUs["0000:01:00.0"]
	if g == nil || g.BAR1Total != math.MaxInt64 || g.BAR1Used != math.MaxInt64 || g.FBTotal != math.MaxInt64 {
		t.Errorf("got %+v, want every count math.MaxInt64", g)
	}
}

// The memory-error state: which calls answered decides what is reported.
func TestProbeECC(t *testing.T) {
	on := &gpufake.FakeECC{Mode: 1, Corrected: 9, Uncorrected: 2, Remap: true, RemappedCorrectable: 1, RemapFailure: true}
	remapOnly := &selftest.ECC{RemappedCorrectable: ptr(1), RemappedUncorrectable: ptr(0), RemapPending: ptr(false), RemapFailure: ptr(true)}
	eccMode := func(rc int32, cur uint32) func(dev uintptr, current, pending *uint32) int32 {
		return func(dev uintptr, current, pending *uint32) int32 {
			if rc == 0 {
				*current, *pending = cur, cur
			}
			return rc
		}
	}
	for _, tt := range []struct {
		name string
		ecc  *gpufake.FakeECC
		syms map[string]any
		want *selftest.ECC
	}{
		{"on", on, nil, &selftest.ECC{Mode: selftest.ECCOn, Corrected: u64(9), Uncorrected: u64(2),
			RemappedCorrectable: ptr(1), RemappedUncorrectable: ptr(0), RemapPending: ptr(false), RemapFailure: ptr(true)}},
		// Off: the counters are not asked (NVML counts nothing with ECC off).
		{"off", &gpufake.FakeECC{Mode: 0}, nil, &selftest.ECC{Mode: selftest.ECCOff}},
		{"off, counters answering", &gpufake.FakeECC{Mode: 0}, map[string]any{"nvmlDeviceGetTotalEccErrors": func(dev uintptr, errType, counter int32, v *uint64) int32 {
			*v = 5
			return 0
		}}, &selftest.ECC{Mode: selftest.ECCOff}},
		{"none", &gpufake.FakeECC{Mode: -1}, nil, &selftest.ECC{Mode: selftest.ECCNone}},
		// The mode answered with another error: no mode, and nothing else answered.
		{"mode lost", &gpufake.FakeECC{Mode: 1}, map[string]any{"nvmlDeviceGetEccMode": eccMode(15, 1)}, nil},
		{"mode lost, remap answers", on, map[string]any{"nvmlDeviceGetEccMode": eccMode(15, 1)}, remapOnly},
		// A card that keeps cur at 1 while failing the call is not "on".
		{"mode failing with cur set", on, map[string]any{"nvmlDeviceGetEccMode": func(dev uintptr, current, pending *uint32) int32 {
			*current = 1
			return 15
		}}, remapOnly},
		// A library without one of the calls still reports what the others say.
		{"no counters call", on, map[string]any{"nvmlDeviceGetTotalEccErrors": nil}, &selftest.ECC{Mode: selftest.ECCOn,
			RemappedCorrectable: ptr(1), RemappedUncorrectable: ptr(0), RemapPending: ptr(false), RemapFailure: ptr(true)}},
		{"counters failing", on, map[string]any{"nvmlDeviceGetTotalEccErrors": func(dev uintptr, errType, counter int32, v *uint64) int32 {
			*v = 5
			return 15
		}}, &selftest.ECC{Mode: selftest.ECCOn,
			RemappedCorrectable: ptr(1), RemappedUncorrectable: ptr(0), RemapPending: ptr(false), RemapFailure: ptr(true)}},
		{"no remap call", on, map[string]any{"nvmlDeviceGetRemappedRows": nil}, &selftest.ECC{Mode: selftest.ECCOn, Corrected: u64(9), Uncorrected: u64(2)}},
		{"no mode call", on, map[string]any{"nvmlDeviceGetEccMode": nil}, remapOnly},
		{"remap failing", &gpufake.FakeECC{Mode: 0}, map[string]any{"nvmlDeviceGetRemappedRows": func(dev uintptr, corr, unc, pending, failure *uint32) int32 {
			*corr, *pending = 3, 1
			return 15
		}}, &selftest.ECC{Mode: selftest.ECCOff}},
		{"remap pending", &gpufake.FakeECC{Mode: 1, Remap: true, RemappedUncorrectable: 4, RemapPending: true}, nil, &selftest.ECC{Mode: selftest.ECCOn,
			Corrected: u64(0), Uncorrected: u64(0), RemappedCorrectable: ptr(0), RemappedUncorrectable: ptr(4), RemapPending: ptr(true), RemapFailure: ptr(false)}},
		{"no ECC calls", nil, nil, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lib := nvml.Library(gpufake.NewNVML(gpufake.FakeNVML{GPUs: []gpufake.FakeNVMLGPU{{BDF: "0000:01:00.0", Replay: -1, ECC: tt.ecc}}}))
			if tt.syms != nil {
				lib = patched{lib, tt.syms}
			}
			r, err := nvml.ProbeWith(context.Background(), lib)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.GPUs["0000:01:00.0"].ECC; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ECC %s, want %s", eccString(got), eccString(tt.want))
			}
			if r.NVML.Error != "" {
				t.Errorf("the ECC calls are quiet, but: %s", r.NVML.Error)
			}
		})
	}
}

func eccString(e *selftest.ECC) string {
	b, _ := json.Marshal(e)
	return string(b)
}

func oneGPU() gpufake.FakeNVML {
	return gpufake.FakeNVML{GPUs: []gpufake.FakeNVMLGPU{{BDF: "0000:41:00.0", Name: "NVIDIA GeForce RTX 4090", Replay: -1}}}
}

// Each GPU's bus id is mapped back to a handle: a library that maps it to another GPU,
// or cannot map it, is noted, because every per-pair answer would then be suspect.
// An unreadable bus id is named from the numeric fields and not looked up.
func TestProbeChecksTheBusID(t *testing.T) {
	var lookups []string
	for _, tt := range []struct {
		name    string
		syms    map[string]any
		bdf     string
		want    string // NVML.Error
		lookups string
	}{
		{"agrees", nil, "0000:41:00.0", "", ""},
		{"another GPU", map[string]any{"nvmlDeviceGetHandleByPciBusId_v2": func(busID string, dev *uintptr) int32 {
			lookups = append(lookups, busID)
			*dev = 77
			return 0
		}}, "0000:41:00.0", "NVML maps bus id 00000000:41:00.0 to a different GPU than index 0", "00000000:41:00.0"},
		{"not found", map[string]any{"nvmlDeviceGetHandleByPciBusId_v2": func(busID string, dev *uintptr) int32 {
			lookups = append(lookups, busID)
			return 6
		}}, "0000:41:00.0", "nvmlDeviceGetHandleByPciBusId_v2(00000000:41:00.0): NVML_ERROR_NOT_FOUND", "00000000:41:00.0"},
		{"unreadable", map[string]any{
			"nvmlDeviceGetPciInfo_v3": func(dev uintptr, p *nvml.PCIInfo) int32 {
				*p = nvml.PCIInfo{Domain: 0, Bus: 0x41, Device: 0}
				copy(p.BusID[:], "GPU-41")
				return 0
			},
			"nvmlDeviceGetHandleByPciBusId_v2": func(busID string, dev *uintptr) int32 {
				lookups = append(lookups, busID)
				return 6
			}}, "0000:41:00.0", `GPU 0: unreadable NVML bus id "GPU-41", using 0000:41:00.0`, ""},
		// A library without the lookup: nothing to check, nothing noted but the gap.
		{"no lookup", map[string]any{"nvmlDeviceGetHandleByPciBusId_v2": nil}, "0000:41:00.0",
			"nvmlDeviceGetHandleByPciBusId_v2 is missing from " + gpufake.NVMLName, ""},
	} {
		lookups = nil
		lib := nvml.Library(gpufake.NewNVML(oneGPU()))
		if tt.syms != nil {
			lib = patched{lib, tt.syms}
		}
		r, err := nvml.ProbeWith(context.Background(), lib)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if r.NVML.Error != tt.want || r.GPUs[tt.bdf] == nil || len(r.GPUs) != 1 || strings.Join(lookups, ",") != tt.lookups {
			t.Errorf("%s: error %q, GPUs %v, lookups %q\nwant error %q, GPU %s, lookups %q", tt.name, r.NVML.Error, r.GPUs, lookups, tt.want, tt.bdf, tt.lookups)
		}
	}
}

// Without nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2 or
// nvmlDeviceGetPciInfo_v3 no GPU can be named: the probe stops with an error naming
// what is missing.
func TestProbeNeedsTheDeviceCalls(t *testing.T) {
	for _, name := range []string{"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPciInfo_v3"} {
		r, err := nvml.ProbeWith(context.Background(), patched{gpufake.NewNVML(oneGPU()), map[string]any{name: nil}})
		want := "loading NVML: " + gpufake.NVMLName + " lacks functions every probe needs: " + name + " is missing from " + gpufake.NVMLName
		if err == nil || err.Error() != want || len(r.GPUs) != 0 || r.NVML.Init == nil {
			t.Errorf("without %s: %v, %+v\nwant %s", name, err, r, want)
		}
	}
}

// NVML is shut down once the probe is over; a library without nvmlShutdown is probed
// all the same.
func TestProbeShutsNVMLDown(t *testing.T) {
	shutdowns := 0
	lib := patched{gpufake.NewNVML(oneGPU()), map[string]any{"nvmlShutdown": func() int32 { shutdowns++; return 0 }}}
	if _, err := nvml.ProbeWith(context.Background(), lib); err != nil || shutdowns != 1 {
		t.Errorf("probe: %v, %d shutdowns, want 1", err, shutdowns)
	}
	lib = patched{gpufake.NewNVML(oneGPU()), map[string]any{"nvmlShutdown": nil}}
	r, err := nvml.ProbeWith(context.Background(), lib)
	if err != nil || len(r.GPUs) != 1 || r.NVML.Error != "nvmlShutdown is missing from "+gpufake.NVMLName {
		t.Errorf("without nvmlShutdown: %v, %+v", err, r.NVML)
	}
}

// A device count no box has (a corrupt answer) is read only up to 1024 GPUs.
func TestProbeCapsTheDeviceCount(t *testing.T) {
	asked := 0
	lib := patched{gpufake.NewNVML(oneGPU()), map[string]any{
		"nvmlDeviceGetCount_v2": func(n *uint32) int32 { *n = 1 << 31; return 0 },
		"nvmlDeviceGetHandleByIndex_v2": func(i uint32, dev *uintptr) int32 {
			asked++
			return 2 // NVML_ERROR_INVALID_ARGUMENT: no such index
		}}}
	r, err := nvml.ProbeWith(context.Background(), lib)
	if err != nil || asked != 1024 || len(r.GPUs) != 0 {
		t.Errorf("%v: asked %d indexes, want 1024; %d GPUs", err, asked, len(r.GPUs))
	}
	if !strings.Contains(r.NVML.Error, "nvmlDeviceGetHandleByIndex_v2(1023): NVML_ERROR_INVALID_ARGUMENT") {
		t.Errorf("error %.200q...", r.NVML.Error)
	}
}
