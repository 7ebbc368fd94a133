package selftest

import (
	"strconv"
	"testing"
)

// The units messages and the console print: milliseconds below a second, tenths of
// seconds above; a byte count in the largest binary unit that divides it, "?" for
// none; any byte count, negative ones included, with one decimal.
func TestHumanUnits(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want string
	}{
		{0, "0ms"}, {999, "999ms"}, {1000, "1.0s"}, {1049, "1.0s"}, {1051, "1.1s"}, {90000, "90.0s"},
	} {
		if got := MSDuration(tc.ms); got != tc.want {
			t.Errorf("MSDuration(%d) = %q, want %q", tc.ms, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{-1, "?"}, {0, "?"}, {1, "1B"}, {1 << 10, "1024B"}, {1 << 20, "1MiB"}, {3 << 20, "3MiB"}, {1<<30 + 1<<20, "1025MiB"},
		{1 << 30, "1GiB"}, {48 << 30, "48GiB"}, {1<<30 + 1, "1073741825B"},
	} {
		if got := HumanBytes(tc.n); got != tc.want {
			t.Errorf("HumanBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n            int64
		want, signed string
	}{
		{0, "0B", "0B"}, {1023, "1023B", "+1023B"}, {1024, "1.0KiB", "+1.0KiB"}, {-1024, "-1.0KiB", "-1.0KiB"},
		{1<<20 - 1, "1024.0KiB", "+1024.0KiB"}, {1 << 20, "1.0MiB", "+1.0MiB"}, {-(3 << 19), "-1.5MiB", "-1.5MiB"},
		{1<<30 - 1<<20, "1023.0MiB", "+1023.0MiB"}, {1 << 30, "1.0GiB", "+1.0GiB"}, {-(5 << 30), "-5.0GiB", "-5.0GiB"}, {-1, "-1B", "-1B"},
	} {
		if got := HumanBytesAny(tc.n); got != tc.want {
			t.Errorf("HumanBytesAny(%d) = %q, want %q", tc.n, got, tc.want)
		}
		if got := signedBytes(tc.n); got != tc.signed {
			t.Errorf("signedBytes(%d) = %q, want %q", tc.n, got, tc.signed)
		}
	}
}

// accessReport has three GPUs sysfs listed and CUDA devices that name them through
// their bus ids in another order (upper case in one): ordinal 0 is GPU2, ordinal 1
// GPU0, ordinal 2 has no bus id, ordinal 5 names a GPU sysfs did not list.
func accessReport() *Report {
	vram := int64(20 << 30)
	zero := int64(0)
	return &Report{
		GPUs: []GPU{
			{BDF: "0000:01:00.0", BAR1Bytes: 256 << 20, VRAMBytes: &vram, NVML: &NVMLGPU{Name: "", BAR1Total: 1 << 30, FBTotal: 0}},
			{BDF: "0000:02:00.0", VRAMBytes: &zero, NVML: &NVMLGPU{Name: "NVIDIA L40S", BAR1Total: 64 << 30, FBTotal: 46 << 30},
				CUDA: &CUDADevice{Name: "own CUDA entry", MemBytes: 1 << 30}},
			{BDF: "0000:81:00.0"},
		},
		CUDA: CUDA{Devices: []CUDADevice{
			{Ordinal: 0, BDF: "0000:81:00.0", Name: "NVIDIA A40", MemBytes: 0},
			{Ordinal: 1, BDF: "0000:01:00.0", Name: "NVIDIA A100", MemBytes: 40 << 30},
			{Ordinal: 2, Name: "no bus id"},
			{Ordinal: 5, BDF: "0000:c1:00.0", Name: "not in sysfs"},
		}},
		Pairs: []Pair{
			{A: 0, B: 1, Topology: "PHB", NVMLTopology: "SYS"},
			{A: 0, B: 2, NVMLTopology: "NODE"},
			{A: 1, B: 2},
		},
	}
}

// How GPUs are named and found: an ordinal maps to the GPU of its bus id (any case),
// else to the same number; CUDA's details come from the GPU's own entry, else the
// device of its bus id; names, memory and BAR1 from the best source the report has.
func TestReportAccessors(t *testing.T) {
	r := accessReport()
	for _, tc := range []struct{ ord, want int }{{0, 2}, {1, 0}, {2, 2}, {3, 3}, {5, 5}, {-1, -1}} {
		if got := r.GPUIndex(tc.ord); got != tc.want {
			t.Errorf("GPUIndex(%d) = %d, want %d", tc.ord, got, tc.want)
		}
	}
	// Bus ids compare without regard to case (sysfs writes lower case; a bus id
	// string from elsewhere may not be).
	up := accessReport()
	up.CUDA.Devices[3] = CUDADevice{Ordinal: 3, BDF: "0000:02:00.0", Name: "upper"}
	up.GPUs[1].BDF = "0000:02:00.0"
	up.CUDA.Devices[3].BDF = "0000:0A:00.0"
	up.GPUs[1].BDF = "0000:0a:00.0"
	if got := up.GPUIndex(3); got != 1 {
		t.Errorf("GPUIndex(3) of 0000:0A:00.0 = %d, want GPU1 (0000:0a:00.0)", got)
	}
	if d := up.DeviceOf(1); d == nil || d.Name != "own CUDA entry" {
		t.Errorf("DeviceOf(1) = %+v, want the GPU's own entry", d)
	}
	up.GPUs[1].CUDA = nil
	if d := up.DeviceOf(1); d == nil || d.Name != "upper" {
		t.Errorf("DeviceOf(1) = %+v, want the device of 0000:0A:00.0", d)
	}

	for _, tc := range []struct {
		i    int
		want string // DeviceOf's name, "" for nil
	}{{-1, ""}, {0, "NVIDIA A100"}, {1, "own CUDA entry"}, {2, "NVIDIA A40"}, {3, ""}} {
		d := r.DeviceOf(tc.i)
		if (d == nil) != (tc.want == "") || d != nil && d.Name != tc.want {
			t.Errorf("DeviceOf(%d) = %+v, want %q", tc.i, d, tc.want)
		}
	}
	// GPU2's bus id is not one CUDA listed: nothing.
	r.GPUs[2].BDF = "0000:82:00.0"
	if d := r.DeviceOf(2); d != nil {
		t.Errorf("DeviceOf(2) of a bus id CUDA did not list = %+v", d)
	}
	r.GPUs[2].BDF = "0000:81:00.0"

	for _, tc := range []struct {
		i           int
		name, label string
		vram        int64
		from        string
		bar1        int64
	}{
		// NVML's name is empty: CUDA's; the driver's VRAM over CUDA's; sysfs BAR1.
		{0, "NVIDIA A100", "GPU0 (0000:01:00.0)", 20 << 30, "driver", 256 << 20},
		// NVML's name and framebuffer; the driver said 0 (unknown); NVML's BAR1.
		{1, "NVIDIA L40S", "GPU1 (0000:02:00.0)", 46 << 30, "NVML", 64 << 30},
		// CUDA's name, CUDA's memory of 0: nothing; no BAR1 anywhere.
		{2, "NVIDIA A40", "GPU2 (0000:81:00.0)", 0, "", 0},
	} {
		if got := r.GPUName(tc.i); got != tc.name {
			t.Errorf("GPUName(%d) = %q, want %q", tc.i, got, tc.name)
		}
		if got := r.GPULabel(tc.i); got != tc.label {
			t.Errorf("GPULabel(%d) = %q, want %q", tc.i, got, tc.label)
		}
		if v, from := r.GPUVRAM(tc.i); v != tc.vram || from != tc.from {
			t.Errorf("GPUVRAM(%d) = %d, %q, want %d, %q", tc.i, v, from, tc.vram, tc.from)
		}
		if got := r.GPUBAR1(tc.i); got != tc.bar1 {
			t.Errorf("GPUBAR1(%d) = %d, want %d", tc.i, got, tc.bar1)
		}
	}
	// CUDA's memory when nothing else says; no name at all.
	r.GPUs[0].VRAMBytes, r.GPUs[0].NVML = nil, nil
	r.CUDA.Devices[1].Name = ""
	if v, from := r.GPUVRAM(0); v != 40<<30 || from != "CUDA" {
		t.Errorf("GPUVRAM(0) from CUDA alone = %d, %q", v, from)
	}
	if got := r.GPUName(0); got != "" {
		t.Errorf("GPUName(0) with no name anywhere = %q", got)
	}
	r.GPUs[0].BDF = "0000:09:00.0" // CUDA no longer lists it
	if v, from := r.GPUVRAM(0); v != 0 || from != "" {
		t.Errorf("GPUVRAM(0) with no source = %d, %q", v, from)
	}
	if got := r.GPUName(0); got != "" {
		t.Errorf("GPUName(0) with no device = %q", got)
	}
	for _, i := range []int{-1, 3, 10} {
		if got, want := r.GPULabel(i), "GPU"+strconv.Itoa(i); got != want {
			t.Errorf("GPULabel(%d) out of range = %q, want %q", i, got, want)
		}
	}
}

// Pairs are found in either order; the class is sysfs', else NVML's, "" unknown.
func TestPairOf(t *testing.T) {
	r := accessReport()
	for _, tc := range []struct {
		a, b   int
		found  bool
		topo   string
		pairAB [2]int
	}{
		{0, 1, true, "PHB", [2]int{0, 1}},
		{1, 0, true, "PHB", [2]int{0, 1}},
		{2, 0, true, "NODE", [2]int{0, 2}},
		{1, 2, true, "", [2]int{1, 2}},
		{2, 1, true, "", [2]int{1, 2}},
		{0, 0, false, "", [2]int{}},
		{1, 3, false, "", [2]int{}},
		{3, 1, false, "", [2]int{}},
	} {
		p := r.PairOf(tc.a, tc.b)
		if (p != nil) != tc.found {
			t.Fatalf("PairOf(%d, %d) = %+v, want found %v", tc.a, tc.b, p, tc.found)
		}
		if p != nil && (p.A != tc.pairAB[0] || p.B != tc.pairAB[1]) {
			t.Errorf("PairOf(%d, %d) = %d-%d, want %d-%d", tc.a, tc.b, p.A, p.B, tc.pairAB[0], tc.pairAB[1])
		}
		if got := r.PairTopology(tc.a, tc.b); got != tc.topo {
			t.Errorf("PairTopology(%d, %d) = %q, want %q", tc.a, tc.b, got, tc.topo)
		}
	}
}

// ACS bits are named in a fixed order, joined with +.
func TestACSBits(t *testing.T) {
	for _, tc := range []struct {
		a    ACS
		want string
	}{
		{ACS{}, ""},
		{ACS{RequestRedirect: true}, "RR"},
		{ACS{CompletionRedirect: true}, "CR"},
		{ACS{EgressControl: true}, "EC"},
		{ACS{RequestRedirect: true, CompletionRedirect: true, EgressControl: true}, "RR+CR+EC"},
		{ACS{RequestRedirect: true, EgressControl: true}, "RR+EC"},
	} {
		if got := tc.a.Bits(); got != tc.want {
			t.Errorf("%+v.Bits() = %q, want %q", tc.a, got, tc.want)
		}
	}
}

// A driver-reported VRAM of 0 is no figure: CUDA's total answers instead.
func TestGPUVRAMZeroFromDriver(t *testing.T) {
	zero := int64(0)
	r := &Report{GPUs: []GPU{{BDF: "0000:01:00.0", VRAMBytes: &zero, CUDA: &CUDADevice{MemBytes: 24 << 30}}}}
	if got, src := r.GPUVRAM(0); got != 24<<30 || src != "CUDA" {
		t.Errorf("GPUVRAM = %d from %q, want %d from CUDA", got, src, int64(24<<30))
	}
}
