package cuda_test

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The driver binding (driver.go) over the FAKE libcuda: what Open and Init need
// from a library, how each call's failure is named (the text a report shows and the
// verdict reads), and what each wrapper hands the driver and gives back.

// partLib is the FAKE libcuda as an older or odd driver shows it to Open: symbols
// missing (hide), answered by another of its symbols (alias), or replaced.
type partLib struct {
	cuda.Library
	hide     map[string]bool
	alias    map[string]string // symbol asked -> FAKE symbol answering it
	override map[string]any
	// setCurrent, when set, records every context cuCtxSetCurrent is given.
	setCurrent *[]uintptr
	// fail, once *armed, makes the symbol fail (CUDA_ERROR_ILLEGAL_ADDRESS) on
	// its failNth call from then on (0: every call).
	fail    string
	failNth int
	armed   *bool
}

func (l partLib) Bind(name string, fn any) error {
	if l.hide[name] {
		return fmt.Errorf("dlsym %s: not in this driver", name)
	}
	if f, ok := l.override[name]; ok {
		reflect.ValueOf(fn).Elem().Set(reflect.ValueOf(f))
		return nil
	}
	if a, ok := l.alias[name]; ok {
		name = a
	}
	if err := l.Library.Bind(name, fn); err != nil {
		return err
	}
	if p, ok := fn.(*func(uintptr) int32); ok && name == "cuCtxSetCurrent" && l.setCurrent != nil {
		inner, rec := *p, l.setCurrent
		*p = func(ctx uintptr) int32 { *rec = append(*rec, ctx); return inner(ctx) }
	}
	if name == l.fail {
		f := reflect.ValueOf(fn).Elem()
		inner, n := f.Interface(), 0
		f.Set(reflect.MakeFunc(f.Type(), func(args []reflect.Value) []reflect.Value {
			if *l.armed {
				if n++; l.failNth == 0 || n == l.failNth {
					return []reflect.Value{reflect.ValueOf(int32(illegalAddress))}
				}
			}
			return reflect.ValueOf(inner).Call(args)
		}))
	}
	return nil
}

const illegalAddress = 700 // CUDA_ERROR_ILLEGAL_ADDRESS

const fakeLib = "loading " + gpufake.CUDAName + ": "

// Open binds only what says whether there is a driver (cuInit, the version); the
// rest is bound after cuInit succeeded, so a library lacking a device symbol still
// reports cuInit's status. cuEventElapsedTime falls back to the pre-12.8 symbol.
func TestOpenAndInitBindings(t *testing.T) {
	for _, sym := range []string{"cuInit", "cuDriverGetVersion"} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1)})
		if d, err := cuda.Open(partLib{Library: box.CUDA(), hide: map[string]bool{sym: true}}); err == nil || d != nil ||
			err.Error() != fakeLib+"dlsym "+sym+": not in this driver" {
			t.Errorf("without %s: Open gave %v", sym, err)
		}
	}
	for _, tc := range []struct {
		name  string
		hide  []string
		alias map[string]string
		want  string // Init's error, "" none
	}{
		{"every symbol", nil, nil, ""},
		{"no cuMemAlloc_v2", []string{"cuMemAlloc_v2"}, nil, fakeLib + "dlsym cuMemAlloc_v2: not in this driver"},
		{"no cuLaunchKernel", []string{"cuLaunchKernel"}, nil, fakeLib + "dlsym cuLaunchKernel: not in this driver"},
		{"legacy cuEventElapsedTime only", []string{"cuEventElapsedTime_v2"}, map[string]string{"cuEventElapsedTime": "cuEventElapsedTime_v2"}, ""},
		{"no cuEventElapsedTime at all", []string{"cuEventElapsedTime_v2", "cuEventElapsedTime"}, nil, fakeLib + "dlsym cuEventElapsedTime: not in this driver"},
	} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1)})
		l := partLib{Library: box.CUDA(), hide: map[string]bool{}, alias: tc.alias}
		for _, h := range tc.hide {
			l.hide[h] = true
		}
		d, err := cuda.Open(l)
		if err != nil || d.Lib != gpufake.CUDAName {
			t.Fatalf("%s: Open: %v", tc.name, err)
		}
		st, err := d.Init()
		if st != (selftest.Status{Name: "CUDA_SUCCESS", Code: 0}) {
			t.Errorf("%s: cuInit status %+v, want CUDA_SUCCESS", tc.name, st)
		}
		if tc.want != "" {
			if err == nil || err.Error() != tc.want {
				t.Errorf("%s: Init: %v, want %q", tc.name, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Init: %v", tc.name, err)
			continue
		}
		// The elapsed time (through whichever symbol) is the FAKE's copy time.
		if ms := timedCopy(t, d, 0, 9<<20); ms != float32ms(9<<20/900e9*1e3) {
			t.Errorf("%s: a 9 MiB local copy took %v ms, want %v", tc.name, ms, 9<<20/900e9*1e3)
		}
		if err := d.Close(); err != nil {
			t.Errorf("%s: Close: %v", tc.name, err)
		}
	}
}

// timedCopy times one copy of n bytes issued by GPU 0, from GPU from's memory
// into its own, between two events (ms, as the driver answers).
func timedCopy(t *testing.T, d *cuda.Driver, from int, n int64) float64 {
	t.Helper()
	s, err := d.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyStream(0, s)
	src, err := d.Alloc(from, n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(from, src)
	dst, err := d.Alloc(0, n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(0, dst)
	start, err := d.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyEvent(start)
	end, err := d.NewEvent(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyEvent(end)
	for _, err := range []error{d.Record(0, start, s), d.CopyAsync(0, dst, src, n, s), d.Record(0, end, s)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	ms, err := d.Elapsed(0, start, end)
	if err != nil {
		t.Fatal(err)
	}
	return float32ms(ms)
}

// float32ms rounds to the float32 the driver answers in.
func float32ms(ms float64) float64 { return float64(float32(ms)) }

// Without a GPU cuInit fails: Init says so in its status and error, having set
// CUDA_DEVICE_ORDER so that ordinals follow PCI order; Close of such a driver (no
// device entry point bound) gives nothing back and does not fail.
func TestInitWithoutGPU(t *testing.T) {
	t.Setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
	box := gpufake.New(gpufake.FakeConfig{})
	d, err := cuda.Open(box.CUDA())
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Init()
	if st != (selftest.Status{Name: "CUDA_ERROR_NO_DEVICE", Code: 100}) || err == nil || err.Error() != "cuInit(0): CUDA_ERROR_NO_DEVICE" || cuda.Code(err) != 100 {
		t.Errorf("Init: %+v, %v", st, err)
	}
	if v := os.Getenv("CUDA_DEVICE_ORDER"); v != "PCI_BUS_ID" {
		t.Errorf("CUDA_DEVICE_ORDER=%q, want PCI_BUS_ID", v)
	}
	if v, err := d.DriverVersion(); v != 12040 || err != nil {
		t.Errorf("DriverVersion: %d, %v (it works before cuInit)", v, err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A CUresult is named by the library's cuGetErrorName when it answers with a name;
// otherwise (no such symbol, a failed call, no name) by selftest's table. A name the
// library does not end within 256 bytes is cut there.
func TestStatusNames(t *testing.T) {
	long := append([]byte(strings.Repeat("N", 300)), 0)
	named := func(rc int32, name *byte) func(int32, **byte) int32 {
		return func(code int32, p **byte) int32 { *p = name; return rc }
	}
	libName := append([]byte("FROM_THE_LIBRARY"), 0)
	for _, tc := range []struct {
		name string
		fn   any // cuGetErrorName; nil: the symbol is missing
		want string
	}{
		{"the library's name", named(0, &libName[0]), "FROM_THE_LIBRARY"},
		{"no cuGetErrorName", nil, "CUDA_ERROR_OUT_OF_MEMORY"},
		{"cuGetErrorName fails", named(1, &libName[0]), "CUDA_ERROR_OUT_OF_MEMORY"},
		{"success without a name", named(0, nil), "CUDA_ERROR_OUT_OF_MEMORY"},
		{"a name without its NUL", named(0, &long[0]), strings.Repeat("N", 256)},
	} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1), Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuMemAlloc_v2", Code: 2}}})
		l := partLib{Library: box.CUDA(), hide: map[string]bool{}, override: map[string]any{}}
		if tc.fn == nil {
			l.hide["cuGetErrorName"] = true
		} else {
			l.override["cuGetErrorName"] = tc.fn
		}
		d, err := cuda.Open(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Init(); err != nil {
			t.Fatal(err)
		}
		if st := d.Status(2); st != (selftest.Status{Name: tc.want, Code: 2}) {
			t.Errorf("%s: Status(2) = %+v, want %s", tc.name, st, tc.want)
		}
		_, err = d.Alloc(0, 4096)
		if want := "cuMemAlloc_v2(4 KiB) on GPU 0: " + tc.want; err == nil || err.Error() != want || cuda.Code(err) != 2 {
			t.Errorf("%s: Alloc: %v, want %q", tc.name, err, want)
		}
		d.Close()
	}
	// The table's name for a code it does not know.
	if st := (*cuda.Driver)(nil).Status(12345); st != (selftest.Status{Name: "CUresult(12345)", Code: 12345}) {
		t.Errorf("nil driver: %+v", st)
	}
}

// Each device is described as the report shows it: the driver's name, the PCI
// address in lower case (libcuda prints it in upper case), compute capability, SMs,
// memory; the clock and peer access per pair as the driver answers.
func TestDevicesOverFake(t *testing.T) {
	_, d := openFake(t, gpufake.FakeConfig{
		DriverVersion: 13000,
		GPUs: []gpufake.FakeGPU{
			{Name: "NVIDIA H100 80GB HBM3", BDF: "0000:c1:00.0", CC: "9.0", SMs: 132, MemBytes: 80 << 30, ClockKHz: 1980000},
			{Name: "NVIDIA A100-SXM4-40GB", BDF: "000a:0f:00.0", CC: "8.0", SMs: 108, MemBytes: 40 << 30, ClockKHz: 1410000},
			{BDF: "0000:Az:00.0"}, // not a BDF: every letter A-Z, z and the bounds
		},
		CanAccess: [][]bool{{false, true, false}, {false, false, true}, {true, true, false}},
	})
	if v, err := d.DriverVersion(); v != 13000 || err != nil {
		t.Errorf("DriverVersion: %d, %v", v, err)
	}
	if n, err := d.DeviceCount(); n != 3 || err != nil {
		t.Errorf("DeviceCount: %d, %v", n, err)
	}
	want := []selftest.CUDADevice{
		{Ordinal: 0, Name: "FAKE NVIDIA H100 80GB HBM3", BDF: "0000:c1:00.0", CC: "9.0", SMs: 132, MemBytes: 80 << 30},
		{Ordinal: 1, Name: "FAKE NVIDIA A100-SXM4-40GB", BDF: "000a:0f:00.0", CC: "8.0", SMs: 108, MemBytes: 40 << 30},
		{Ordinal: 2, Name: "FAKE NVIDIA GeForce RTX 4090", BDF: "0000:az:00.0", CC: "8.9", SMs: 128, MemBytes: 24 << 30},
	}
	for i, w := range want {
		if got, err := d.Device(i); err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("Device(%d) = %+v, %v; want %+v", i, got, err, w)
		}
	}
	for i, khz := range []int{1980000, 1410000, 2520000} {
		if got, err := d.ClockKHz(i); got != khz || err != nil {
			t.Errorf("ClockKHz(%d) = %d, %v", i, got, err)
		}
	}
	for a, row := range [][]bool{{false, true, false}, {false, false, true}, {true, true, false}} {
		for b, w := range row {
			if got, err := d.CanAccessPeer(a, b); got != w || err != nil {
				t.Errorf("CanAccessPeer(%d, %d) = %v, %v; want %v", a, b, got, err, w)
			}
		}
	}
}

// things is what the failing calls of TestDriverErrorsNamed work on: a stream,
// a buffer and two events on GPU 1.
type things struct {
	s          cuda.Stream
	p          cuda.Ptr
	start, end cuda.Event
}

func (e things) elapsed(d *cuda.Driver) (float64, error) {
	if err := d.Record(1, e.start, e.s); err != nil {
		return 0, err
	}
	if err := d.Record(1, e.end, e.s); err != nil {
		return 0, err
	}
	return d.Elapsed(1, e.start, e.end)
}

// Every failed call is named with what was asked and of which GPU, and carries its
// CUresult: the report's error text and the verdict's code.
func TestDriverErrorsNamed(t *testing.T) {
	device := func(ord int) func(*cuda.Driver, things) error {
		return func(d *cuda.Driver, _ things) error { _, err := d.Device(ord); return err }
	}
	for _, tc := range []struct {
		call string
		nth  int
		do   func(*cuda.Driver, things) error
		want string
	}{
		{"cuDriverGetVersion", 0, func(d *cuda.Driver, _ things) error { _, err := d.DriverVersion(); return err }, "cuDriverGetVersion"},
		{"cuDeviceGetCount", 0, func(d *cuda.Driver, _ things) error { _, err := d.DeviceCount(); return err }, "cuDeviceGetCount"},
		// GPU 1's device is known from the setup; GPU 0's is asked for.
		{"cuDeviceGet", 0, device(0), "cuDeviceGet(0)"},
		{"cuDeviceGetName", 0, device(1), "cuDeviceGetName on GPU 1"},
		{"cuDeviceGetPCIBusId", 0, device(1), "cuDeviceGetPCIBusId on GPU 1"},
		{"cuDeviceGetAttribute", 1, device(1), "cuDeviceGetAttribute(75) on GPU 1"},
		{"cuDeviceGetAttribute", 2, device(1), "cuDeviceGetAttribute(76) on GPU 1"},
		{"cuDeviceGetAttribute", 3, device(1), "cuDeviceGetAttribute(16) on GPU 1"},
		{"cuDeviceTotalMem_v2", 0, device(1), "cuDeviceTotalMem_v2 on GPU 1"},
		{"cuDeviceGetAttribute", 0, func(d *cuda.Driver, _ things) error { _, err := d.ClockKHz(1); return err }, "cuDeviceGetAttribute(13) on GPU 1"},
		{"cuDeviceCanAccessPeer", 0, func(d *cuda.Driver, _ things) error { _, err := d.CanAccessPeer(1, 0); return err }, "cuDeviceCanAccessPeer(1, 0)"},
		{"cuDevicePrimaryCtxRetain", 0, func(d *cuda.Driver, _ things) error { return d.SetCurrent(0) }, "cuDevicePrimaryCtxRetain on GPU 0"},
		{"cuCtxSetCurrent", 0, func(d *cuda.Driver, _ things) error { return d.SetCurrent(1) }, "cuCtxSetCurrent on GPU 1"},
		{"cuCtxEnablePeerAccess", 0, func(d *cuda.Driver, _ things) error { return d.EnablePeer(1, 0) }, "cuCtxEnablePeerAccess(GPU 1 -> GPU 0)"},
		{"cuCtxDisablePeerAccess", 0, func(d *cuda.Driver, _ things) error { return d.DisablePeer(1, 0) }, "cuCtxDisablePeerAccess(GPU 1 -> GPU 0)"},
		{"cuMemGetInfo_v2", 0, func(d *cuda.Driver, _ things) error { _, _, err := d.MemInfo(1); return err }, "cuMemGetInfo_v2 on GPU 1"},
		{"cuMemAlloc_v2", 0, func(d *cuda.Driver, _ things) error { _, err := d.Alloc(1, 3<<20); return err }, "cuMemAlloc_v2(3 MiB) on GPU 1"},
		{"cuMemFree_v2", 0, func(d *cuda.Driver, e things) error { return d.Free(1, e.p) }, "cuMemFree_v2 on GPU 1"},
		{"cuStreamCreate", 0, func(d *cuda.Driver, _ things) error { _, err := d.NewStream(1); return err }, "cuStreamCreate on GPU 1"},
		{"cuStreamDestroy_v2", 0, func(d *cuda.Driver, e things) error { return d.DestroyStream(1, e.s) }, "cuStreamDestroy_v2 on GPU 1"},
		{"cuStreamSynchronize", 0, func(d *cuda.Driver, e things) error { return d.StreamSync(1, e.s) }, "cuStreamSynchronize on GPU 1"},
		{"cuMemsetD32Async", 0, func(d *cuda.Driver, e things) error { return d.MemsetD32Async(1, e.p, 7, 12, e.s) }, "cuMemsetD32Async(12 words) on GPU 1"},
		{"cuMemcpyAsync", 0, func(d *cuda.Driver, e things) error { return d.CopyAsync(1, e.p+64, e.p, 64, e.s) }, "cuMemcpyAsync(64 B) on GPU 1"},
		{"cuMemcpyDtoH_v2", 0, func(d *cuda.Driver, e things) error { _, err := d.ReadWords(1, e.p, 5); return err }, "cuMemcpyDtoH_v2(20 B) on GPU 1"},
		{"cuMemcpyHtoD_v2", 0, func(d *cuda.Driver, e things) error { return d.WriteWords(1, e.p, make([]uint32, 3)) }, "cuMemcpyHtoD_v2(12 B) on GPU 1"},
		{"cuEventCreate", 0, func(d *cuda.Driver, _ things) error { _, err := d.NewEvent(1); return err }, "cuEventCreate on GPU 1"},
		{"cuEventDestroy_v2", 0, func(d *cuda.Driver, e things) error { return d.DestroyEvent(e.start) }, "cuEventDestroy_v2"},
		{"cuEventRecord", 0, func(d *cuda.Driver, e things) error { return d.Record(1, e.start, e.s) }, "cuEventRecord on GPU 1"},
		{"cuEventSynchronize", 0, func(d *cuda.Driver, e things) error { _, err := e.elapsed(d); return err }, "cuEventSynchronize on GPU 1"},
		{"cuEventElapsedTime_v2", 0, func(d *cuda.Driver, e things) error { _, err := e.elapsed(d); return err }, "cuEventElapsedTime on GPU 1"},
		{"cuDevicePrimaryCtxRelease_v2", 0, func(d *cuda.Driver, _ things) error { return d.Close() }, "cuDevicePrimaryCtxRelease_v2 on GPU 1"},
	} {
		armed := false
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
		d, err := cuda.Open(partLib{Library: box.CUDA(), fail: tc.call, failNth: tc.nth, armed: &armed})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Init(); err != nil {
			t.Fatal(err)
		}
		var e things
		if e.s, err = d.NewStream(1); err != nil {
			t.Fatal(err)
		}
		if e.p, err = d.Alloc(1, 4096); err != nil {
			t.Fatal(err)
		}
		if e.start, err = d.NewEvent(1); err != nil {
			t.Fatal(err)
		}
		if e.end, err = d.NewEvent(1); err != nil {
			t.Fatal(err)
		}
		armed = true
		err = tc.do(d, e)
		if want := tc.want + ": CUDA_ERROR_ILLEGAL_ADDRESS"; err == nil || err.Error() != want || cuda.Code(err) != illegalAddress {
			t.Errorf("%s failing: %v, want %q", tc.call, err, want)
		}
		armed = false
		d.Close()
	}
}

// A GPU that is not a CUDA ordinal is refused by every call that needs its
// context, with cuDeviceGet's answer, before anything is asked of it.
func TestUnknownGPURefused(t *testing.T) {
	box, d := openFake(t, gpufake.FakeConfig{GPUs: gpus(2)})
	s, err := d.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyStream(0, s)
	const want = "cuDeviceGet(2): CUDA_ERROR_INVALID_DEVICE"
	for name, call := range map[string]func() error{
		"Device":         func() error { _, err := d.Device(2); return err },
		"ClockKHz":       func() error { _, err := d.ClockKHz(2); return err },
		"CanAccessPeer":  func() error { _, err := d.CanAccessPeer(2, 0); return err },
		"CanAccessPeer'": func() error { _, err := d.CanAccessPeer(0, 2); return err },
		"SetCurrent":     func() error { return d.SetCurrent(2) },
		"EnablePeer":     func() error { return d.EnablePeer(2, 0) },
		"EnablePeer'":    func() error { return d.EnablePeer(0, 2) },
		"DisablePeer":    func() error { return d.DisablePeer(2, 0) },
		"DisablePeer'":   func() error { return d.DisablePeer(0, 2) },
		"MemInfo":        func() error { _, _, err := d.MemInfo(2); return err },
		"Alloc":          func() error { _, err := d.Alloc(2, 4096); return err },
		"Free":           func() error { return d.Free(2, 0x7f0000000000) },
		"NewStream":      func() error { _, err := d.NewStream(2); return err },
		"DestroyStream":  func() error { return d.DestroyStream(2, s) },
		"MemsetD32Async": func() error { return d.MemsetD32Async(2, 0x7f0000000000, 1, 1, s) },
		"CopyAsync":      func() error { return d.CopyAsync(2, 0x7f0000000000, 0x7f0000000000, 16, s) },
		"ReadWords":      func() error { _, err := d.ReadWords(2, 0x7f0000000000, 1); return err },
		"WriteWords":     func() error { return d.WriteWords(2, 0x7f0000000000, []uint32{1}) },
		"NewEvent":       func() error { _, err := d.NewEvent(2); return err },
		"Record":         func() error { return d.Record(2, 1, s) },
	} {
		before := box.Held()
		if err := call(); err == nil || err.Error() != want || cuda.Code(err) != 101 {
			t.Errorf("%s on GPU 2: %v, want %q", name, err, want)
		}
		if after := box.Held(); !reflect.DeepEqual(before, after) {
			t.Errorf("%s on GPU 2 changed what the driver holds: %v -> %v", name, before, after)
		}
	}
}

// Peer access is enabled in the copying GPU's context for the peer's memory; asking
// twice, or disabling what is not enabled, is no error; a pair the driver refuses is
// named with the driver's code.
func TestPeerAccessOverFake(t *testing.T) {
	box, d := openFake(t, gpufake.FakeConfig{GPUs: gpus(2), CanAccess: [][]bool{{false, true}, {false, false}}})
	// Copies issued by GPU 0 from GPU 1's memory: staged through the host (10 GB/s)
	// without peer access, at 20 GB/s with it.
	const n = 10 << 20
	rate := func() float64 { return float64(n) / (timedCopy(t, d, 1, n) / 1e3) / 1e9 }
	near := func(x, want float64) bool { return x > want*0.999 && x < want*1.001 }
	if r := rate(); !near(r, 10) {
		t.Errorf("before EnablePeer: %.3f GB/s, want the staged 10", r)
	}
	for i := range 2 {
		if err := d.EnablePeer(0, 1); err != nil {
			t.Fatalf("EnablePeer(0, 1) #%d: %v", i+1, err)
		}
	}
	if r := rate(); !near(r, 20) {
		t.Errorf("after EnablePeer: %.3f GB/s, want the peer 20", r)
	}
	for i := range 2 {
		if err := d.DisablePeer(0, 1); err != nil {
			t.Fatalf("DisablePeer(0, 1) #%d: %v", i+1, err)
		}
	}
	if r := rate(); !near(r, 10) {
		t.Errorf("after DisablePeer: %.3f GB/s, want the staged 10", r)
	}
	err := d.EnablePeer(1, 0)
	if want := "cuCtxEnablePeerAccess(GPU 1 -> GPU 0): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"; err == nil || err.Error() != want || cuda.Code(err) != 217 {
		t.Errorf("EnablePeer(1, 0) without access: %v, want %q", err, want)
	}
	if box.Calls("cuCtxEnablePeerAccess") != 3 || box.Calls("cuCtxDisablePeerAccess") != 2 {
		t.Errorf("peer access asked %d times, dropped %d times; want 3 and 2", box.Calls("cuCtxEnablePeerAccess"), box.Calls("cuCtxDisablePeerAccess"))
	}
}

// Close frees the kernels' buffers, unloads their modules, releases every primary
// context it retained and leaves none current; a release that fails is in its error.
func TestCloseGivesBack(t *testing.T) {
	var set []uintptr
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(3)})
	d, err := cuda.Open(partLib{Library: box.CUDA(), setCurrent: &set})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Init(); err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{0, 2} {
		if _, err := d.Kernels(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SetCurrent(1); err != nil {
		t.Fatal(err)
	}
	if h := box.Held(); h["contexts"] != 3 || h["modules"] != 2 || h["device memory"] != 2 {
		t.Fatalf("before Close the driver holds %v", h)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for what, n := range box.Held() {
		if n != 0 {
			t.Errorf("after Close the driver still holds %d %s", n, what)
		}
	}
	if len(set) == 0 || set[len(set)-1] != 0 {
		t.Errorf("contexts made current %v: the last is not NULL", set)
	}
	// A second Close has nothing left to give back.
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// Every release that fails is named.
	box = gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuDevicePrimaryCtxRelease_v2", Code: 201}}})
	d, err = cuda.Open(box.CUDA())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Init(); err != nil {
		t.Fatal(err)
	}
	for _, g := range []int{1, 0} {
		if err := d.SetCurrent(g); err != nil {
			t.Fatal(err)
		}
	}
	err = d.Close()
	for _, g := range []string{"0", "1"} {
		if want := "cuDevicePrimaryCtxRelease_v2 on GPU " + g + ": CUDA_ERROR_INVALID_CONTEXT"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Close: %v, want %q in it", err, want)
		}
	}
}

// Memory as the copy phase uses it: what is free, words written and read back
// exactly (4 bytes each), a memset of n words, a copy of n bytes; a zero handle or
// an empty read or write asks the driver nothing.
func TestMemoryOverFake(t *testing.T) {
	box, d := openFake(t, gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 1 << 30}}})
	p, err := d.Alloc(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(0, p)
	if free, total, err := d.MemInfo(0); free != 1<<30-64 || total != 1<<30 || err != nil {
		t.Errorf("MemInfo: free %d, total %d, %v", free, total, err)
	}
	words := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if err := d.WriteWords(0, p, words); err != nil {
		t.Fatal(err)
	}
	if got, err := d.ReadWords(0, p, 16); err != nil || !reflect.DeepEqual(got, words) {
		t.Errorf("read back %v, %v; want %v", got, err, words)
	}
	s, err := d.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyStream(0, s)
	// Words 0-2 set to 0xAB; bytes 16-31 (words 4-7) copied over words 8-11.
	if err := d.MemsetD32Async(0, p, 0xAB, 3, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyAsync(0, p+32, p+16, 16, s); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSync(0, s); err != nil {
		t.Fatal(err)
	}
	want := []uint32{0xAB, 0xAB, 0xAB, 4, 5, 6, 7, 8, 5, 6, 7, 8, 13, 14, 15, 16}
	if got, err := d.ReadWords(0, p, 16); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after memset and copy: %v, %v; want %v", got, err, want)
	}

	calls := func() [4]int {
		return [4]int{box.Calls("cuMemFree_v2"), box.Calls("cuStreamDestroy_v2"), box.Calls("cuEventDestroy_v2"), box.Calls("cuMemcpyDtoH_v2") + box.Calls("cuMemcpyHtoD_v2")}
	}
	before := calls()
	// GPU 5 does not exist: nothing here needs a context, so nothing asks for one.
	if err := d.Free(5, 0); err != nil {
		t.Errorf("Free of 0: %v", err)
	}
	if err := d.DestroyStream(5, 0); err != nil {
		t.Errorf("DestroyStream of 0: %v", err)
	}
	if err := d.DestroyEvent(0); err != nil {
		t.Errorf("DestroyEvent of 0: %v", err)
	}
	if err := d.WriteWords(5, p, nil); err != nil {
		t.Errorf("WriteWords of nothing: %v", err)
	}
	if got, err := d.ReadWords(0, p, 0); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ReadWords of 0 words: %v, %v; want an empty list", got, err)
	}
	if after := calls(); after != before {
		t.Errorf("nothing to do called the driver: %v -> %v", before, after)
	}
}
