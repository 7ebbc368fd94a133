package cuda_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// openFake is the driver over a FAKE box, cuInit done.
func openFake(t *testing.T, cfg gpufake.FakeConfig) (*gpufake.FakeBox, *cuda.Driver) {
	t.Helper()
	box := gpufake.New(cfg)
	d, err := cuda.Open(box.CUDA())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if _, err := d.Init(); err != nil {
		t.Fatal(err)
	}
	return box, d
}

// The kernels' launch shapes: fill and verify run a grid-stride loop over enough
// blocks of 256 to fill every SM eight times, never more than the words need (at
// least one); the SM copy runs two blocks of 512 per SM, the shape of
// scripts/device/d2d_ref.cu's reference kernel, which is what saturates HBM.
func TestLaunchShapesOverFake(t *testing.T) {
	box, d := openFake(t, gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{SMs: 100, MemBytes: 1 << 30}}})
	s, err := d.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Alloc(0, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words int64
		grid  uint32
	}{{1 << 20, 800}, {800 * 256, 800}, {800*256 + 1, 800}, {1000, 4}, {1024, 4}, {1025, 5}, {1, 1}, {0, 1}} {
		if err := d.Fill(0, s, p, tc.words, 1); err != nil {
			t.Fatal(err)
		}
		if g := box.Grids["pb_fill"]; g != tc.grid {
			t.Errorf("fill of %d words: a grid of %d blocks, want %d", tc.words, g, tc.grid)
		}
		if _, err := d.Verify(0, s, p, tc.words, 1); err != nil {
			t.Fatal(err)
		}
		if g := box.Grids["pb_verify"]; g != tc.grid {
			t.Errorf("verify of %d words: a grid of %d blocks, want %d", tc.words, g, tc.grid)
		}
	}
	if err := d.CopySM(0, s, p+cuda.Ptr(2<<20), p, 1<<20); err != nil {
		t.Fatal(err)
	}
	if g := box.Grids["pb_copy_v4"]; g != 200 {
		t.Errorf("SM copy: a grid of %d blocks, want 2 per SM (200)", g)
	}
	if err := d.StreamSync(0, s); err != nil {
		t.Fatal(err)
	}
}

// Verify's answer: no wrong word is {0, -1}; otherwise the count and the first.
func TestVerifyOverFake(t *testing.T) {
	_, d := openFake(t, gpufake.FakeConfig{GPUs: gpus(1)})
	s, err := d.NewStream(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Alloc(0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fill(0, s, p, 1024, 7); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Verify(0, s, p, 1024, 7); err != nil || v != (cuda.Verification{Wrong: 0, FirstBad: -1}) {
		t.Errorf("clean: %+v, %v", v, err)
	}
	if err := d.WriteWords(0, p+4*300, []uint32{0, 0}); err != nil {
		t.Fatal(err)
	}
	if v, err := d.Verify(0, s, p, 1024, 7); err != nil || v != (cuda.Verification{Wrong: 2, FirstBad: 300}) {
		t.Errorf("two words zeroed at 300: %+v, %v", v, err)
	}
}

// Giving back twice, or giving back nothing, is not an error: cleanup paths call
// Unload and Free on what may already be gone.
func TestReleaseTwiceOverFake(t *testing.T) {
	_, d := openFake(t, gpufake.FakeConfig{GPUs: gpus(1)})
	k, err := d.Kernels(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Module.Unload(); err != nil {
		t.Fatalf("Unload: %v", err)
	}
	if err := k.Module.Unload(); err != nil {
		t.Errorf("Unload of an unloaded module: %v", err)
	}
	if err := (*cuda.Module)(nil).Unload(); err != nil {
		t.Errorf("Unload of no module: %v", err)
	}
	f, err := d.NewHostFlag(0)
	if err != nil {
		t.Fatal(err)
	}
	if f.TimedOut() {
		t.Errorf("a new flag says a spin kernel timed out")
	}
	if err := f.Free(); err != nil {
		t.Fatalf("Free: %v", err)
	}
	if err := f.Free(); err != nil {
		t.Errorf("Free of a freed flag: %v", err)
	}
	if err := (*cuda.HostFlag)(nil).Free(); err != nil {
		t.Errorf("Free of no flag: %v", err)
	}
}

// A module that does not load carries the JIT's log after the error, and only when
// there is one.
func TestPTXErrorOverFake(t *testing.T) {
	base := errors.New("cuModuleLoadDataEx on GPU 0: CUDA_ERROR_INVALID_PTX")
	if got := (&cuda.PTXError{Err: base}).Error(); got != base.Error() {
		t.Errorf("without a log: %q", got)
	}
	if got := (&cuda.PTXError{Err: base, Log: "ptxas: line 3"}).Error(); got != base.Error()+": ptxas: line 3" {
		t.Errorf("with a log: %q", got)
	}
	cfg := gpufake.FakeConfig{GPUs: gpus(1), PTXLog: "ptxas fatal   : Unsupported .version 7.0",
		Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuModuleLoadDataEx", Code: 218}}}
	_, d := openFake(t, cfg)
	_, err := d.Kernels(0)
	var pe *cuda.PTXError
	if !errors.As(err, &pe) || pe.Log != cfg.PTXLog || !strings.HasSuffix(err.Error(), ": "+cfg.PTXLog) {
		t.Errorf("Kernels: %v", err)
	}
}

// The FAKE's spin gate never times out, so no copy or latency sample may carry the
// note that a spin kernel did.
func TestNoSpinTimeoutNoteOverFake(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
	r, err := cuda.Run(context.Background(), cuda.Options{Library: box.CUDA(), CopyBytes: 4096, Loops: 2, Samples: 2, LatencyWrites: 2, LatencySamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.Notes {
		if strings.Contains(n, "timed out") {
			t.Errorf("note %q", n)
		}
	}
}

// jitLog is the FAKE libcuda with a cuModuleLoadDataEx that fails, writing text into
// the error log buffer (as much as fits; no NUL after it when it fills the buffer)
// and reporting size as the log's length, which a broken driver may get wrong.
type jitLog struct {
	cuda.Library
	text string
	size uintptr
}

func (l jitLog) Bind(name string, fn any) error {
	if name != "cuModuleLoadDataEx" {
		return l.Library.Bind(name, fn)
	}
	*fn.(*func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32) = func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32 {
		os, vs := unsafe.Slice(opts, n), unsafe.Slice(vals, n)
		var buf []byte
		sizeAt := -1
		for i, o := range os {
			if o == 6 { // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
				sizeAt = i
			}
		}
		for i, o := range os {
			if o == 5 { // CU_JIT_ERROR_LOG_BUFFER: the address as an integer
				buf = unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&vs[i]))), vs[sizeAt])
			}
		}
		if k := copy(buf, l.text); k < len(buf) {
			buf[k] = 0
		}
		vs[sizeAt] = l.size
		return 218 // CUDA_ERROR_INVALID_PTX
	}
	return nil
}

// The JIT log shown is the length the driver reports, bounded by the 16 KiB buffer:
// a report past the buffer (or negative) reads the buffer and no further.
func TestJITLogLengthOverFake(t *testing.T) {
	full := strings.Repeat("x", 16<<10)
	for _, tc := range []struct {
		name string
		text string
		size uintptr
		want string
	}{
		{"as reported", "abcdef", 3, "abc"},
		{"none reported", "abcdef", 0, ""},
		{"to the NUL", "abcdef", 6, "abcdef"},
		{"past the buffer", full, 1 << 20, full},
		{"negative", "abc", ^uintptr(0), "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1)})
			d, err := cuda.Open(jitLog{box.CUDA(), tc.text, tc.size})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if _, err := d.Init(); err != nil {
				t.Fatal(err)
			}
			_, log, err := d.LoadModule(0, ".version 7.0")
			if err == nil || log != tc.want {
				t.Errorf("log of %d bytes %.20q..., want %d bytes %.20q...; err %v", len(log), log, len(tc.want), tc.want, err)
			}
		})
	}
}
