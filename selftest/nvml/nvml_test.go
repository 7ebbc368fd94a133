package nvml

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// fakeNVML builds testdata/fakenvml.c, a FAKE libnvidia-ml for tests, with the given
// -D switches (see the file's header).
func fakeNVML(t *testing.T, defines ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testguard.Skip(t, "gcc not installed; the fake NVML library cannot be built (make deps installs build-essential)")
	}
	so := filepath.Join(t.TempDir(), "libnvidia-ml-fake.so")
	args := append([]string{"-shared", "-fPIC", "-Wall", "-Werror", "-o", so}, defines...)
	out, err := exec.Command("gcc", append(args, filepath.Join("testdata", "fakenvml.c"))...).CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

const (
	gpu0 = "0000:01:00.0"
	gpu1 = "0000:21:00.0"
	gpu2 = "0000:41:00.0"
	gpu3 = "0000:c1:00.0"
)

func wantGPUs() map[string]*selftest.NVMLGPU {
	g := func(bar1Used int64, gen, width int, replay int64) *selftest.NVMLGPU {
		off := 0
		return &selftest.NVMLGPU{
			Name: "NVIDIA GeForce RTX 4090", BAR1Total: 32 << 30, BAR1Used: bar1Used, FBTotal: 49140 << 20,
			LinkGen: gen, LinkWidth: width, MaxLinkGen: 4, MaxLinkWidth: 16, ReplayCounter: replay,
			DisplayMode: &off, DisplayActive: &off,
		}
	}
	display := g(8<<20, 1, 16, 0)
	on := 1
	display.DisplayMode, display.DisplayActive = &on, &on // GPU 0 drives the console
	return map[string]*selftest.NVMLGPU{
		gpu0: display,
		gpu1: g(16<<20, 4, 16, 3),
		gpu2: g(24<<20, 4, 8, 0),
		gpu3: g(32<<20, 4, 16, -1), // NOT_SUPPORTED
	}
}

func TestProbePatchedDriver(t *testing.T) {
	so := fakeNVML(t)
	r, err := Probe(context.Background(), so)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	wantNVML := selftest.NVML{
		Library: so, Loaded: true, Init: &selftest.Status{Name: "NVML_SUCCESS", Code: 0},
		DriverVersion: "595.71.05", CUDAVersion: 13010,
	}
	if !reflect.DeepEqual(r.NVML, wantNVML) {
		t.Errorf("NVML\n got %+v (init %+v)\nwant %+v", r.NVML, r.NVML.Init, wantNVML)
	}
	if want := wantGPUs(); !reflect.DeepEqual(r.GPUs, want) {
		for k, v := range r.GPUs {
			t.Logf("got %s: %+v", k, *v)
		}
		t.Errorf("GPUs differ from %d expected", len(want))
	}
	ok := func(topo string) PairInfo { return PairInfo{Topology: topo, Read: "OK", Write: "OK"} }
	wantPairs := map[[2]string]PairInfo{
		{gpu0, gpu1}: ok(selftest.TopoPIX),
		{gpu0, gpu2}: ok(selftest.TopoPHB),
		{gpu0, gpu3}: ok(selftest.TopoNODE),
		{gpu1, gpu2}: ok(selftest.TopoPHB),
		{gpu1, gpu3}: ok(selftest.TopoSYS),
		{gpu2, gpu3}: {Topology: selftest.TopoPXB, Read: "OK", Write: "TNS"},
	}
	if !reflect.DeepEqual(r.Pairs, wantPairs) {
		t.Errorf("Pairs\n got %+v\nwant %+v", r.Pairs, wantPairs)
	}
}

// The stock GeForce driver: every pair CNS, read and write.
func TestProbeStockDriver(t *testing.T) {
	r, err := Probe(context.Background(), fakeNVML(t, "-DFAKE_P2P=1"))
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if len(r.Pairs) != 6 {
		t.Fatalf("%d pairs, want 6", len(r.Pairs))
	}
	for k, p := range r.Pairs {
		if p.Read != "CNS" || p.Write != "CNS" || p.Topology == "" {
			t.Errorf("%v: %+v", k, p)
		}
		if k[0] >= k[1] {
			t.Errorf("key %v not in order", k)
		}
	}
	if r.NVML.Error != "" {
		t.Errorf("error %q", r.NVML.Error)
	}
}

// A library without the replay counter (an older driver) still probes; the gap is
// recorded and the field says "not supported".
func TestProbeMissingSymbol(t *testing.T) {
	r, err := Probe(context.Background(), fakeNVML(t, "-DFAKE_NO_REPLAY"))
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if !strings.Contains(r.NVML.Error, "nvmlDeviceGetPcieReplayCounter is missing") {
		t.Errorf("error %q", r.NVML.Error)
	}
	for bdf, g := range r.GPUs {
		if g.ReplayCounter != -1 || g.MaxLinkGen != 4 {
			t.Errorf("%s: %+v", bdf, *g)
		}
	}
	if len(r.GPUs) != 4 || len(r.Pairs) != 6 {
		t.Errorf("%d GPUs, %d pairs", len(r.GPUs), len(r.Pairs))
	}
}

func TestProbeNoInitSymbol(t *testing.T) {
	so := fakeNVML(t, "-DFAKE_NO_INIT")
	r, err := Probe(context.Background(), so)
	if err == nil || !strings.Contains(err.Error(), "nvmlInit_v2 is missing") {
		t.Fatalf("err = %v", err)
	}
	if !r.NVML.Loaded || r.NVML.Init != nil || !strings.Contains(r.NVML.Error, "nvmlInit_v2") || len(r.GPUs) != 0 {
		t.Errorf("result %+v", r.NVML)
	}
}

func TestProbeDriverNotLoaded(t *testing.T) {
	r, err := Probe(context.Background(), fakeNVML(t, "-DFAKE_INIT_RC=9"))
	if err == nil || !strings.Contains(err.Error(), "NVML_ERROR_DRIVER_NOT_LOADED") {
		t.Fatalf("err = %v", err)
	}
	if r.NVML.Init == nil || r.NVML.Init.Code != 9 || r.NVML.DriverVersion != "" || len(r.GPUs) != 0 {
		t.Errorf("result %+v", r.NVML)
	}
}

func TestProbeAbsentLibrary(t *testing.T) {
	r, err := Probe(context.Background(), "libnvidia-ml-absent.so.1")
	if err == nil || r == nil || r.NVML.Loaded || !strings.Contains(r.NVML.Error, "libnvidia-ml-absent.so.1") {
		t.Fatalf("got %+v, %v", r, err)
	}
	if r.GPUs == nil || r.Pairs == nil {
		t.Error("nil maps")
	}
}

// A wedged driver: Probe returns at the deadline with the context's error.
func TestProbeDeadline(t *testing.T) {
	so := fakeNVML(t, "-DFAKE_INIT_HANG")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Probe(ctx, so)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || r == nil || r.NVML.Library != so || !strings.Contains(r.NVML.Error, "did not answer") {
		t.Errorf("got %+v, %v", r, err)
	}
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := Probe(cancelled, so); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestStatusLetter(t *testing.T) {
	for code, want := range map[int]string{0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DRK", 5: "NS", 6: "U", 7: "U", -1: "U"} {
		if got := StatusLetter(code); got != want {
			t.Errorf("StatusLetter(%d) = %q, want %q", code, got, want)
		}
	}
}

func TestTopologyClass(t *testing.T) {
	for level, want := range map[int]string{0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS", 5: "", 60: "", -1: ""} {
		if got := TopologyClass(level); got != want {
			t.Errorf("TopologyClass(%d) = %q, want %q", level, got, want)
		}
	}
	// Nearest to farthest, as selftest.TopoRank orders them.
	prev := 0
	for _, level := range []int{10, 20, 30, 40, 50} {
		r := selftest.TopoRank(TopologyClass(level))
		if r <= prev {
			t.Errorf("level %d ranks %d, not after %d", level, r, prev)
		}
		prev = r
	}
}

func TestBDF(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:01:00.0":  "0000:01:00.0",
		"00000000:C1:00.0":  "0000:c1:00.0",
		"00000001:81:00.0":  "0001:81:00.0",
		"0000:41:00.0":      "0000:41:00.0",
		"00000000:41:00":    "0000:41:00.0",
		" 0000:1B:00.1\n":   "0000:1b:00.1",
		"":                  "",
		"0000:01:00.8":      "",
		"0000:01:20.0":      "",
		"100000000:01:00.0": "",
		"0000:1:00.0":       "",
		"zz:01:00.0":        "",
		// One to eight domain digits; a 16-bit domain; devices 00 to 1f.
		"0:01:00.0":         "0000:01:00.0",
		"000000001:01:00.0": "",
		":01:00.0":          "",
		"0000ffff:01:00.0":  "ffff:01:00.0",
		"00010000:01:00.0":  "",
		"0000:01:1f.7":      "0000:01:1f.7",
		"0000:01:0.0":       "",
		"0000:01:000.0":     "",
		"0000:01:00.10":     "",
		"0000:zz:00.0":      "",
		"0000:01:zz.0":      "",
	} {
		got, ok := BDF(in)
		if got != want || ok != (want != "") {
			t.Errorf("BDF(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
