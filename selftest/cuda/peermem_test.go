package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The peermem phase (peermem.go) over the FAKE driver, in cuda's own package so that
// its mutants meet these tests (gpufake's own peermem tests run in another package).
// Each check names its form, its pair and, when something is wrong, the step and the
// word: those are what a user reads in the report, so those are what is asserted.

// The patterns' seeds (peermem.go): the owner writes the first, the peer the second.
const (
	seedOwner = 0x0A11CE55
	seedPeer  = 0x9EE2B0B5
)

func gpus(n int) []gpufake.FakeGPU {
	g := make([]gpufake.FakeGPU, n)
	for i := range g {
		g[i].MemBytes = 4 << 30
	}
	return g
}

func pmKey(c selftest.PeerMem) string { return fmt.Sprintf("%s %d->%d", c.Kind, c.Owner, c.Peer) }

func pmOf(t *testing.T, r *cuda.MemResult, kind string, owner, peer int) selftest.PeerMem {
	t.Helper()
	for _, c := range r.Checks {
		if c.Kind == kind && c.Owner == owner && c.Peer == peer {
			return c
		}
	}
	t.Fatalf("no %s check %d->%d in %+v", kind, owner, peer, r.Checks)
	return selftest.PeerMem{}
}

// holdsNothing fails when the FAKE driver still holds anything the phase took.
func holdsNothing(t *testing.T, box *gpufake.FakeBox) {
	t.Helper()
	for what, n := range box.Held() {
		if n != 0 {
			t.Errorf("after RunPeerMem the driver still holds %d %s", n, what)
		}
	}
}

// Every form runs on every ordered pair with peer access both ways, in form order,
// each through its own driver path (the calls a report lists), with the byte count
// rounded to 16 (managed) or to the allocation granularity (vmm, ipc), and every
// handle, mapping, reservation and buffer is given back.
func TestPeerMemPairsAndCallsOverFake(t *testing.T) {
	// 0 and 1 reach each other, 1 and 2 too; 0 may reach 2 but 2 may not reach 0, so
	// neither 0->2 nor 2->0 is tried.
	cfg := gpufake.FakeConfig{GPUs: gpus(3), CanAccess: [][]bool{{false, true, true}, {true, false, true}, {false, true, false}}}
	box := gpufake.New(cfg)
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 100})
	if err != nil {
		t.Fatalf("RunPeerMem: %v", err)
	}
	var got, want []string
	for _, k := range []string{selftest.MemManaged, selftest.MemVMM, selftest.MemIPC} {
		for _, p := range [][2]int{{0, 1}, {1, 0}, {1, 2}, {2, 1}} {
			want = append(want, fmt.Sprintf("%s %d->%d", k, p[0], p[1]))
		}
	}
	for _, c := range r.Checks {
		got = append(got, pmKey(c))
		wantBytes := int64(64 << 10) // 100 -> 112 -> the FAKE's 64 KiB granularity
		if c.Kind == selftest.MemManaged {
			wantBytes = 112
		}
		if !c.Verified || c.Step != "" || c.Mismatch != nil || c.Refused != "" || c.Error != "" || c.Bytes != wantBytes {
			t.Errorf("%s: %+v, want verified, %d bytes", pmKey(c), c, wantBytes)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("checks\n%v\nwant\n%v", got, want)
	}
	for _, tc := range []struct {
		kind  string
		calls []string
	}{
		{selftest.MemManaged, []string{
			"cuMemAllocManaged(112 B, CU_MEM_ATTACH_GLOBAL) on GPU 1",
			"cuMemAdvise(SET_PREFERRED_LOCATION, GPU 1)", "cuMemAdvise(SET_ACCESSED_BY, GPU 1)", "cuMemAdvise(SET_ACCESSED_BY, GPU 2)",
			"cuMemcpyAsync(112 B) on GPU 2"}},
		{selftest.MemVMM, []string{
			"cuMemCreate(64 KiB, pinned on GPU 1)", "cuMemAddressReserve(64 KiB)", "cuMemMap(64 KiB)",
			"cuMemSetAccess(GPU 1 read-write, GPU 2 read-write)", "cuMemcpyAsync(64 KiB) on GPU 2"}},
		{selftest.MemIPC, []string{
			"cuMemCreate(64 KiB, pinned on GPU 1, exportable as a POSIX fd)", "cuMemExportToShareableHandle(POSIX fd)",
			"cuMemImportFromShareableHandle(POSIX fd)", "cuMemAddressReserve(64 KiB)", "cuMemMap(64 KiB)",
			"cuMemSetAccess(GPU 1 read-write, GPU 2 read-write)", "cuMemcpyAsync(64 KiB) on GPU 2"}},
	} {
		if c := pmOf(t, r, tc.kind, 1, 2); !slices.Equal(c.Calls, tc.calls) {
			t.Errorf("%s 1->2 calls\n%q\nwant\n%q", tc.kind, c.Calls, tc.calls)
		}
	}
	holdsNothing(t, box)
	// Each vmm check releases its handle, each ipc check its handle and the imported one.
	if n := box.Calls("cuMemRelease"); n != 12 {
		t.Errorf("cuMemRelease called %d times, want 12", n)
	}
}

// One GPU, or GPUs none of which reach another, run each form locally on GPU 0 (the
// owner is its own peer: one SET_ACCESSED_BY, one access descriptor).
func TestPeerMemLocalOverFake(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  gpufake.FakeConfig
	}{
		{"one GPU", gpufake.FakeConfig{GPUs: gpus(1)}},
		{"two GPUs without P2P", gpufake.FakeConfig{GPUs: gpus(2), CanAccess: [][]bool{{false, false}, {false, false}}}},
		{"two GPUs, P2P one way", gpufake.FakeConfig{GPUs: gpus(2), CanAccess: [][]bool{{false, true}, {false, false}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(tc.cfg)
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range r.Checks {
				got = append(got, pmKey(c))
				if !c.Verified {
					t.Errorf("%s: %+v", pmKey(c), c)
				}
			}
			if want := []string{"managed 0->0", "vmm 0->0", "ipc 0->0"}; !slices.Equal(got, want) {
				t.Fatalf("checks %v, want %v", got, want)
			}
			if c := pmOf(t, r, selftest.MemManaged, 0, 0); !slices.Equal(c.Calls, []string{"cuMemAllocManaged(64 KiB, CU_MEM_ATTACH_GLOBAL) on GPU 0",
				"cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0)", "cuMemAdvise(SET_ACCESSED_BY, GPU 0)", "cuMemcpyAsync(64 KiB) on GPU 0"}) {
				t.Errorf("managed calls %q", c.Calls)
			}
			if c := pmOf(t, r, selftest.MemVMM, 0, 0); !slices.Contains(c.Calls, "cuMemSetAccess(GPU 0 read-write)") {
				t.Errorf("vmm calls %q", c.Calls)
			}
			if len(r.CUDA.Devices) != len(tc.cfg.GPUs) || !r.CUDA.Loaded || r.CUDA.Error != "" || r.CUDA.DriverVersion != 12040 ||
				r.CUDA.PTX == nil || r.CUDA.PTX.Name != "CUDA_SUCCESS" {
				t.Errorf("CUDA %+v", r.CUDA)
			}
			holdsNothing(t, box)
		})
	}
}

// Bytes: 0 or less is the default 32 MiB; anything else is rounded up to 16.
func TestPeerMemBytesOverFake(t *testing.T) {
	for _, tc := range []struct{ bytes, want int64 }{{0, 32 << 20}, {-7, 32 << 20}, {1, 16}, {16, 16}, {17, 32}} {
		box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1)})
		r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: tc.bytes, Kinds: []string{selftest.MemManaged}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Checks) != 1 || r.Checks[0].Bytes != tc.want || !r.Checks[0].Verified {
			t.Errorf("Bytes %d: %+v, want one verified check of %d bytes", tc.bytes, r.Checks, tc.want)
		}
	}
}

// Wrong data at each step is reported at that step with the pair, the first bad
// word's byte offset, what it should have been and what it was: a verdict that
// passes a corrupted peer read, peer write or peer copy is the bug this phase hunts.
func TestPeerMemCorruptionOverFake(t *testing.T) {
	const bytes = 64 << 10
	const words = bytes / 4
	for _, tc := range []struct {
		name    string
		faults  []gpufake.Fault
		corrupt string
		kind    string
		step    string
		want    selftest.Mismatch
	}{
		// GPU 0's peer aperture is 2 MiB + 8 KiB: the peer's reads from 8 KiB into the
		// managed buffer (which sits at 2 MiB, above the kernels' result) land 2 MiB + 8
		// KiB lower, outside it. The host reads the word back where it is, so the report
		// shows the right value as got: the peer's kernel read something else.
		{"managed peer read through a short window", []gpufake.Fault{{Kind: gpufake.FaultWindow, GPU: 0, Window: 2<<20 + 8<<10}}, "",
			selftest.MemManaged, selftest.StepPeerRead,
			selftest.Mismatch{Offset: 8 << 10, Want: cuda.Pattern(2048, seedOwner), Got: cuda.Pattern(2048, seedOwner), Words: words - 2048}},
		// The peer's writes to bytes 4096..4103 of GPU 0's managed memory are lost:
		// the owner still finds its own pattern there.
		{"managed peer writes lost", []gpufake.Fault{{Kind: gpufake.FaultLost, GPU: 0, Mem: gpufake.MemManaged, Offset: 4096, Bytes: 8}}, "",
			selftest.MemManaged, selftest.StepPeerWrite,
			selftest.Mismatch{Offset: 4096, Want: cuda.Pattern(1024, seedPeer), Got: cuda.Pattern(1024, seedOwner), Words: 2}},
		{"vmm peer writes lost", []gpufake.Fault{{Kind: gpufake.FaultLost, GPU: 0, Mem: gpufake.MemVMM, Offset: 60, Bytes: 4}}, "",
			selftest.MemVMM, selftest.StepPeerWrite,
			selftest.Mismatch{Offset: 60, Want: cuda.Pattern(15, seedPeer), Got: cuda.Pattern(15, seedOwner), Words: 1}},
		// The peer's copy engine flips a word of what it copies out.
		{"managed peer copy flipped", []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 4100}}, "",
			selftest.MemManaged, selftest.StepPeerCopy,
			selftest.Mismatch{Offset: 4100, Want: cuda.Pattern(1025, seedPeer), Got: ^cuda.Pattern(1025, seedPeer), Words: 1}},
		{"vmm peer copy flipped", []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: 8}}, "",
			selftest.MemVMM, selftest.StepPeerCopy,
			selftest.Mismatch{Offset: 8, Want: cuda.Pattern(2, seedPeer), Got: ^cuda.Pattern(2, seedPeer), Words: 1}},
		{"ipc peer copy flipped", []gpufake.Fault{{Kind: gpufake.FaultFlip, Copy: "0->1", Method: "ce", Offset: bytes - 4}}, "",
			selftest.MemIPC, selftest.StepPeerCopy,
			selftest.Mismatch{Offset: bytes - 4, Want: cuda.Pattern(words-1, seedPeer), Got: ^cuda.Pattern(words-1, seedPeer), Words: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: tc.faults})
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: bytes, Corrupt: tc.corrupt})
			if err != nil {
				t.Fatal(err)
			}
			c := pmOf(t, r, tc.kind, 0, 1)
			if c.Verified || c.Step != tc.step || c.Mismatch == nil || *c.Mismatch != tc.want || c.Error != "" || c.Refused != "" {
				t.Errorf("%s 0->1: %+v, mismatch %+v; want step %q, %+v", tc.kind, c, c.Mismatch, tc.step, tc.want)
			}
			// Only that direction is wrong: the same form the other way verifies
			// (a window spoils every peer access to GPU 0, copies out included).
			if o := pmOf(t, r, tc.kind, 1, 0); !o.Verified && tc.faults[0].Kind != gpufake.FaultWindow {
				t.Errorf("%s: %+v, %+v", pmKey(o), o, o.Mismatch)
			}
			holdsNothing(t, box)
		})
	}
}

// The Corrupt hook inverts one word after the peer's write in the first check of its
// form only, says where in Injected, and that check reports exactly that word.
func TestPeerMemCorruptHookOverFake(t *testing.T) {
	const bytes = 96 << 10 // vmm and ipc: 128 KiB
	for _, kind := range []string{selftest.MemManaged, selftest.MemVMM, selftest.MemIPC, selftest.MemCUDAIPC} {
		t.Run(kind, func(t *testing.T) {
			cfg := gpufake.FakeConfig{GPUs: gpus(2)}
			box := gpufake.New(cfg)
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: bytes, Corrupt: kind,
				Importer: func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
					return cuda.RunImport(ctx, cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, fd, req)
				}})
			if err != nil {
				t.Fatal(err)
			}
			c := pmOf(t, r, kind, 0, 1)
			idx := c.Bytes/8 + 5
			want := cuda.Pattern(uint64(idx), seedPeer)
			if c.Verified || c.Step != selftest.StepPeerWrite || c.Mismatch == nil ||
				*c.Mismatch != (selftest.Mismatch{Offset: 4 * idx, Want: want, Got: ^want, Words: 1}) {
				t.Errorf("%+v %+v, want the word at %d inverted", c, c.Mismatch, 4*idx)
			}
			inj := fmt.Sprintf("Corrupt test hook: in the %s check GPU 0 -> GPU 1, after the peer's write the word at byte offset %d of GPU 0's memory was inverted on purpose (0x%08x -> 0x%08x); verification must report it as a mismatch",
				kind, 4*idx, want, ^want)
			if r.Injected != inj {
				t.Errorf("Injected %q\nwant %q", r.Injected, inj)
			}
			for _, o := range r.Checks {
				if pmKey(o) != pmKey(c) && !o.Verified {
					t.Errorf("the hook touches one check only: %s %+v", pmKey(o), o)
				}
			}
			holdsNothing(t, box)
		})
	}
}

// A driver call that fails is named with its GPU: before any data moved it is a
// refusal (the form is unavailable, setup step), after that an error at its step;
// either way the check is not verified, the other checks go on, and what was
// taken is given back.
func TestPeerMemCallFailuresOverFake(t *testing.T) {
	code := func(call string, code, nth int) []gpufake.Fault {
		return []gpufake.Fault{{Kind: gpufake.FaultCode, Call: call, Code: code, Nth: nth}}
	}
	for _, tc := range []struct {
		name    string
		faults  []gpufake.Fault
		kind    string
		step    string
		refused string // "": an Error instead, containing errText
		errText string
	}{
		{"alloc managed", code("cuMemAllocManaged", 2, 1), selftest.MemManaged, selftest.StepSetup,
			"cuMemAllocManaged(64 KiB, CU_MEM_ATTACH_GLOBAL) on GPU 0: CUDA_ERROR_OUT_OF_MEMORY", ""},
		{"advise preferred", code("cuMemAdvise", 801, 1), selftest.MemManaged, selftest.StepSetup,
			"cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0): CUDA_ERROR_NOT_SUPPORTED", ""},
		{"advise accessed by the peer", code("cuMemAdvise", 801, 3), selftest.MemManaged, selftest.StepSetup,
			"cuMemAdvise(SET_ACCESSED_BY, GPU 1): CUDA_ERROR_NOT_SUPPORTED", ""},
		{"granularity", code("cuMemGetAllocationGranularity", 801, 1), selftest.MemVMM, selftest.StepSetup,
			"cuMemGetAllocationGranularity on GPU 0: CUDA_ERROR_NOT_SUPPORTED", ""},
		{"create", code("cuMemCreate", 2, 1), selftest.MemVMM, selftest.StepSetup,
			"cuMemCreate(64 KiB, pinned on GPU 0): CUDA_ERROR_OUT_OF_MEMORY", ""},
		{"reserve", code("cuMemAddressReserve", 2, 1), selftest.MemVMM, selftest.StepSetup,
			"cuMemAddressReserve(64 KiB): CUDA_ERROR_OUT_OF_MEMORY", ""},
		{"map", code("cuMemMap", 205, 1), selftest.MemVMM, selftest.StepSetup,
			"cuMemMap(64 KiB): CUDA_ERROR_MAP_FAILED", ""},
		{"set access", code("cuMemSetAccess", 217, 1), selftest.MemVMM, selftest.StepSetup,
			"cuMemSetAccess(GPU 0 read-write, GPU 1 read-write): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", ""},
		{"export", code("cuMemExportToShareableHandle", 801, 1), selftest.MemIPC, selftest.StepSetup,
			"cuMemExportToShareableHandle(POSIX fd) on GPU 0: CUDA_ERROR_NOT_SUPPORTED", ""},
		{"import", code("cuMemImportFromShareableHandle", 801, 1), selftest.MemIPC, selftest.StepSetup,
			"cuMemImportFromShareableHandle(POSIX fd) on GPU 0: CUDA_ERROR_NOT_SUPPORTED", ""},
		// The data moved and checked out; giving the memory back failed.
		{"release", code("cuMemRelease", 1, 1), selftest.MemVMM, selftest.StepSetup, "",
			"releasing the memory: cuMemRelease on GPU 0: CUDA_ERROR_INVALID_VALUE"},
		{"unmap", code("cuMemUnmap", 1, 1), selftest.MemVMM, selftest.StepSetup, "",
			"releasing the memory: cuMemUnmap: CUDA_ERROR_INVALID_VALUE"},
		{"peer copy", code("cuMemcpyAsync", 1, 1), selftest.MemManaged, selftest.StepPeerCopy, "",
			"CUDA_ERROR_INVALID_VALUE"},
		// The first cuMemFree_v2 of the phase is the peer copy's destination.
		{"free the copy's destination", code("cuMemFree_v2", 1, 1), selftest.MemManaged, selftest.StepPeerCopy, "",
			"cuMemFree_v2 on GPU 1: CUDA_ERROR_INVALID_VALUE"},
		// Both fail: the copy's error is the one reported.
		{"peer copy, then its free", append(code("cuMemcpyAsync", 1, 1), code("cuMemFree_v2", 2, 1)...), selftest.MemManaged, selftest.StepPeerCopy, "",
			"cuMemcpyAsync"},
		{"peer kernel faults on vmm", []gpufake.Fault{{Kind: gpufake.FaultMMU, GPU: 0, Mem: gpufake.MemVMM}}, selftest.MemVMM, selftest.StepPeerRead, "",
			"CUDA_ERROR_ILLEGAL_ADDRESS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), Faults: tc.faults})
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Checks) != 6 {
				t.Fatalf("%d checks: %+v", len(r.Checks), r.Checks)
			}
			c := pmOf(t, r, tc.kind, 0, 1)
			if c.Verified || c.Step != tc.step || c.Mismatch != nil {
				t.Errorf("%+v, want step %q", c, tc.step)
			}
			if tc.refused != "" && (c.Refused != tc.refused || c.Error != "") {
				t.Errorf("refused %q error %q, want refused %q", c.Refused, c.Error, tc.refused)
			}
			if tc.refused == "" && (c.Refused != "" || !strings.Contains(c.Error, tc.errText)) {
				t.Errorf("refused %q error %q, want an error with %q", c.Refused, c.Error, tc.errText)
			}
			// A refusal on the Nth call hits one check; the others verify.
			for _, o := range r.Checks {
				if pmKey(o) != pmKey(c) && !o.Verified && tc.step == selftest.StepSetup {
					t.Errorf("%s: %+v", pmKey(o), o)
				}
			}
			if tc.errText == "cuMemcpyAsync" && strings.Contains(c.Error, "OUT_OF_MEMORY") {
				t.Errorf("the free's error replaced the copy's: %q", c.Error)
			}
			if l := tc.faults[len(tc.faults)-1].Call; l != "cuMemRelease" && l != "cuMemUnmap" && l != "cuMemFree_v2" {
				holdsNothing(t, box)
			}
		})
	}
}

// A failure before the checks stops the phase: the error is returned and recorded as
// the CUDA error, with what was learned so far.
func TestPeerMemStopsOverFake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []gpufake.Fault
		gpus   int
		want   string
	}{
		{"cuInit", []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuInit", Code: 100}}, 2, "cuInit(0): CUDA_ERROR_NO_DEVICE"},
		{"can access peer", []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuDeviceCanAccessPeer", Code: 101, Nth: 1}}, 2, "CUDA_ERROR_INVALID_DEVICE"},
		{"can access peer, the way back", []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuDeviceCanAccessPeer", Code: 101, Nth: 2}}, 2, "CUDA_ERROR_INVALID_DEVICE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(tc.gpus), Faults: tc.faults})
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10})
			if err == nil || !strings.Contains(err.Error(), tc.want) || r == nil || r.CUDA.Error != err.Error() || len(r.Checks) != 0 {
				t.Fatalf("RunPeerMem: %v, %+v; want an error with %q", err, r, tc.want)
			}
		})
	}
	// The kernels that do not load on GPU 1 stop it, with the JIT's status and log.
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2), PTXLog: "ptxas fatal",
		Faults: []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuModuleLoadDataEx", Code: 218, Nth: 2}}})
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10})
	if err == nil || !strings.Contains(err.Error(), "cuModuleLoadDataEx on GPU 1: CUDA_ERROR_INVALID_PTX: ptxas fatal") ||
		r.CUDA.PTX == nil || r.CUDA.PTX.Name != "CUDA_ERROR_INVALID_PTX" || r.CUDA.PTXLog != "ptxas fatal" || len(r.Checks) != 0 {
		t.Errorf("PTX: %v, %+v", err, r)
	}
	// A context already cancelled stops it before the first check, naming it.
	box = gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, err = cuda.RunPeerMem(ctx, cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10})
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "before the managed check GPU 0 -> GPU 1") || len(r.Checks) != 0 {
		t.Errorf("cancelled: %v, %+v", err, r)
	}
	holdsNothing(t, box)
}

// With an importer, ipc and cudaipc run on the ring (each owner with the next GPU it
// has peer access to both ways) and the other process is asked for exactly that
// pair, those bytes and those seeds; managed and vmm still cover every pair.
func TestPeerMemImporterRequestsOverFake(t *testing.T) {
	// 0 and 1 do not reach each other; every other pair does.
	can := [][]bool{{false, false, true, true}, {false, false, true, true}, {true, true, false, true}, {true, true, true, false}}
	cfg := gpufake.FakeConfig{GPUs: gpus(4), CanAccess: can}
	var asked []string
	var others []*gpufake.FakeBox // the importing processes' drivers
	importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
		asked = append(asked, fmt.Sprintf("fd %v handle %v peer %d bytes %d seeds %#x %#x", fd >= 0, req.Handle != nil, req.Peer, req.Bytes, req.ReadSeed, req.WriteSeed))
		other := gpufake.New(cfg)
		others = append(others, other)
		return cuda.RunImport(ctx, cuda.MemOptions{Library: other.CUDA()}, fd, req)
	}
	box := gpufake.New(cfg)
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 100 << 10, Importer: importer})
	if err != nil {
		t.Fatal(err)
	}
	var ring []string
	count := map[string]int{}
	for _, c := range r.Checks {
		count[c.Kind]++
		if !c.Verified {
			t.Errorf("%s: %+v", pmKey(c), c)
		}
		if c.Kind == selftest.MemIPC || c.Kind == selftest.MemCUDAIPC {
			ring = append(ring, pmKey(c))
		}
	}
	if want := []string{"ipc 0->2", "ipc 1->2", "ipc 2->3", "ipc 3->0", "cudaipc 0->2", "cudaipc 1->2", "cudaipc 2->3", "cudaipc 3->0"}; !slices.Equal(ring, want) {
		t.Errorf("ring checks %v, want %v", ring, want)
	}
	if count[selftest.MemManaged] != 10 || count[selftest.MemVMM] != 10 {
		t.Errorf("checks by form %v, want managed and vmm on all 10 pairs", count)
	}
	var want []string
	for _, h := range []bool{false, true} {
		for _, peer := range []int{2, 2, 3, 0} {
			bytes := 128 << 10 // the ipc form's granularity
			if h {
				bytes = 100 << 10
			}
			want = append(want, fmt.Sprintf("fd %v handle %v peer %d bytes %d seeds %#x %#x", !h, h, peer, bytes, seedOwner, seedPeer))
		}
	}
	if !slices.Equal(asked, want) {
		t.Errorf("importer asked\n%q\nwant\n%q", asked, want)
	}
	c := pmOf(t, r, selftest.MemCUDAIPC, 2, 3)
	if len(c.Calls) < 3 || c.Calls[0] != "cuMemAlloc_v2(100 KiB) on GPU 2" || c.Calls[1] != "cuIpcGetMemHandle" ||
		!strings.HasPrefix(c.Calls[2], "importer: cuIpcOpenMemHandle(LAZY_ENABLE_PEER_ACCESS) on GPU 3 in process ") ||
		c.Calls[len(c.Calls)-1] != "cuMemcpyAsync(100 KiB) on GPU 3" || !slices.Contains(c.Calls, "importer: pb_verify and pb_fill on GPU 3") {
		t.Errorf("cudaipc 2->3 calls %q", c.Calls)
	}
	c = pmOf(t, r, selftest.MemIPC, 3, 0)
	if !slices.Contains(c.Calls, "cuMemExportToShareableHandle(POSIX fd)") || !slices.Contains(c.Calls, "importer: cuMemSetAccess(GPU 0 read-write)") ||
		slices.Contains(c.Calls, "cuMemImportFromShareableHandle(POSIX fd)") {
		t.Errorf("ipc 3->0 calls %q: exported here, imported there", c.Calls)
	}
	holdsNothing(t, box)
	for _, o := range others {
		holdsNothing(t, o)
	}
}

// Without an importer cudaipc cannot be checked (the driver opens a handle only in
// another process): asked for, it is refused, not failed.
func TestPeerMemCUDAIPCWithoutImporter(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10, Kinds: []string{selftest.MemCUDAIPC, "bogus"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Checks) != 4 {
		t.Fatalf("%+v", r.Checks)
	}
	c := pmOf(t, r, selftest.MemCUDAIPC, 1, 0)
	if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "no importing process was given") {
		t.Errorf("%+v", c)
	}
	if c := pmOf(t, r, "bogus", 0, 1); c.Verified || c.Refused != `unknown peer-memory form "bogus"` {
		t.Errorf("%+v", c)
	}
	holdsNothing(t, box)
}

// What the importing process answers decides the check: a refusal there is a
// refusal here, its mismatch is the peer read's, its error keeps its step (a peer
// read or else a peer write), and a process that could not answer is a peer-read
// error. Its calls are listed after the owner's, marked as the importer's.
func TestPeerMemImporterAnswersOverFake(t *testing.T) {
	bad := &selftest.Mismatch{Offset: 40, Want: 1, Got: 2, Words: 3}
	for _, tc := range []struct {
		name    string
		answer  cuda.ImportResult
		err     error
		step    string
		refused string
		errText string
		mis     *selftest.Mismatch
	}{
		{"refused", cuda.ImportResult{Calls: []string{"x"}, Refused: "no"}, nil, selftest.StepSetup, "in the importing process: no", "", nil},
		{"mismatch", cuda.ImportResult{Calls: []string{"x"}, Mismatch: bad}, nil, selftest.StepPeerRead, "", "", bad},
		{"error reading", cuda.ImportResult{Calls: []string{"x"}, Error: "boom", Step: selftest.StepPeerRead}, nil, selftest.StepPeerRead, "", "the importing process: boom", nil},
		{"error writing", cuda.ImportResult{Calls: []string{"x"}, Error: "boom", Step: selftest.StepPeerWrite}, nil, selftest.StepPeerWrite, "", "the importing process: boom", nil},
		{"error without a step", cuda.ImportResult{Calls: []string{"x"}, Error: "boom"}, nil, selftest.StepPeerWrite, "", "the importing process: boom", nil},
		{"no answer", cuda.ImportResult{}, errors.New("exit status 2"), selftest.StepPeerRead, "", "the importing process: exit status 2", nil},
	} {
		for _, kind := range []string{selftest.MemIPC, selftest.MemCUDAIPC} {
			t.Run(tc.name+" "+kind, func(t *testing.T) {
				box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(2)})
				importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
					a := tc.answer
					if tc.err != nil {
						return nil, tc.err
					}
					return &a, nil
				}
				r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10, Kinds: []string{kind}, Importer: importer})
				if err != nil {
					t.Fatal(err)
				}
				c := pmOf(t, r, kind, 0, 1)
				if c.Verified || c.Step != tc.step || c.Refused != tc.refused || !strings.Contains(c.Error, tc.errText) || (tc.errText == "") != (c.Error == "") ||
					(c.Mismatch == nil) != (tc.mis == nil) || (tc.mis != nil && *c.Mismatch != *tc.mis) {
					t.Errorf("%+v %+v", c, c.Mismatch)
				}
				if tc.err == nil && c.Calls[len(c.Calls)-1] != "importer: x" {
					t.Errorf("calls %q", c.Calls)
				}
				holdsNothing(t, box)
			})
		}
	}
}

// The importing process's own check: a word of the shared memory changed before it
// reads is its mismatch, named by offset, the owner's pattern and what it read, and it
// does not write then; a request out of range is refused before anything is mapped.
func TestRunImportOverFake(t *testing.T) {
	cfg := gpufake.FakeConfig{GPUs: gpus(2)}
	const bytes = 64 << 10
	const off = 4 * 1000
	var answer *cuda.ImportResult
	importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
		mem, err := unix.Mmap(fd, 0, int(req.Bytes), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil, err
		}
		mem[off] ^= 0xff
		unix.Munmap(mem)
		answer, err = cuda.RunImport(ctx, cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, fd, req)
		return answer, err
	}
	box := gpufake.New(cfg)
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: bytes, Kinds: []string{selftest.MemIPC}, Importer: importer})
	if err != nil {
		t.Fatal(err)
	}
	want := cuda.Pattern(1000, seedOwner)
	c := pmOf(t, r, selftest.MemIPC, 0, 1)
	if c.Verified || c.Step != selftest.StepPeerRead || c.Mismatch == nil ||
		*c.Mismatch != (selftest.Mismatch{Offset: off, Want: want, Got: want ^ 0xff, Words: 1}) {
		t.Errorf("%+v %+v", c, c.Mismatch)
	}
	if slices.Contains(answer.Calls, "pb_verify and pb_fill on GPU 1") {
		t.Errorf("the importer wrote after a bad read: %q", answer.Calls)
	}

	for _, req := range []cuda.ImportRequest{{Peer: -1, Bytes: 64}, {Peer: 2, Bytes: 64}, {Peer: 0, Bytes: 0}, {Peer: 0, Bytes: -4}, {Peer: 1, Bytes: 66}} {
		res, err := cuda.RunImport(context.Background(), cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, -1, req)
		want := fmt.Sprintf("import request for GPU %d of 2, %d bytes: out of range", req.Peer, req.Bytes)
		if err == nil || err.Error() != want || res == nil || len(res.Calls) != 0 {
			t.Errorf("%+v: %v, %+v; want %q", req, err, res, want)
		}
	}
	// GPU 0 and a word-sized request are in range: the descriptor (none here) is
	// what is refused.
	res, err := cuda.RunImport(context.Background(), cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, -1, cuda.ImportRequest{Peer: 0, Bytes: 4})
	if err != nil || res.Refused == "" || !strings.Contains(res.Refused, "cuMemImportFromShareableHandle(POSIX fd) in process") {
		t.Errorf("GPU 0, 4 bytes, no descriptor: %v, %+v", err, res)
	}
}

// olderDriver is the FAKE libcuda with some symbols gone, the way an older or
// stripped driver lacks them; cuMemAdvise_v2, when asked for, is the CUDA 13 form
// (a CUmemLocation by value: type in the low half, the device in the high half)
// answered by the FAKE's cuMemAdvise, and refused unless the location is a device.
type olderDriver struct {
	cuda.Library
	gone     map[string]bool
	v2       bool
	v2Called *int
}

func (l olderDriver) Bind(name string, fn any) error {
	if l.gone[name] {
		return fmt.Errorf("dlsym %s: no such symbol", name)
	}
	if name == "cuMemAdvise_v2" && l.v2 {
		var v1 func(p cuda.Ptr, n uintptr, advice int32, dev int32) int32
		if err := l.Library.Bind("cuMemAdvise", &v1); err != nil {
			return err
		}
		*fn.(*func(p cuda.Ptr, n uintptr, advice int32, loc uint64) int32) = func(p cuda.Ptr, n uintptr, advice int32, loc uint64) int32 {
			*l.v2Called++
			if uint32(loc) != 1 { // CU_MEM_LOCATION_TYPE_DEVICE
				return 1
			}
			return v1(p, n, advice, int32(loc>>32))
		}
		return nil
	}
	return l.Library.Bind(name, fn)
}

// A driver with only cuMemAdvise_v2 gets the managed form through it, the device in
// the location's high half; one without the legacy IPC calls refuses cudaipc (and
// its importer refuses a handle); one without a VMM call refuses every form by name.
func TestPeerMemOlderDriversOverFake(t *testing.T) {
	cfg := gpufake.FakeConfig{GPUs: gpus(2)}
	run := func(t *testing.T, lib cuda.Library, importer func(context.Context, int, cuda.ImportRequest) (*cuda.ImportResult, error), kinds ...string) *cuda.MemResult {
		t.Helper()
		r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: lib, Bytes: 64 << 10, Kinds: kinds, Importer: importer})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Run("cuMemAdvise_v2 only", func(t *testing.T) {
		calls := 0
		lib := olderDriver{Library: gpufake.New(cfg).CUDA(), gone: map[string]bool{"cuMemAdvise": true}, v2: true, v2Called: &calls}
		r := run(t, lib, nil, selftest.MemManaged)
		for _, c := range r.Checks {
			if !c.Verified || !slices.Contains(c.Calls, fmt.Sprintf("cuMemAdvise(SET_ACCESSED_BY, GPU %d)", c.Peer)) {
				t.Errorf("%s: %+v", pmKey(c), c)
			}
		}
		if len(r.Checks) != 2 || calls != 6 {
			t.Errorf("%d checks, cuMemAdvise_v2 called %d times, want 2 and 6", len(r.Checks), calls)
		}
	})
	t.Run("neither cuMemAdvise", func(t *testing.T) {
		lib := olderDriver{Library: gpufake.New(cfg).CUDA(), gone: map[string]bool{"cuMemAdvise": true, "cuMemAdvise_v2": true}}
		for _, c := range run(t, lib, nil, selftest.MemManaged, selftest.MemVMM).Checks {
			if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "dlsym cuMemAdvise_v2: no such symbol") {
				t.Errorf("%s: %+v", pmKey(c), c)
			}
		}
	})
	t.Run("no cuMemMap", func(t *testing.T) {
		lib := olderDriver{Library: gpufake.New(cfg).CUDA(), gone: map[string]bool{"cuMemMap": true}}
		r := run(t, lib, nil, selftest.MemManaged, selftest.MemVMM, selftest.MemIPC)
		for _, c := range r.Checks {
			if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "dlsym cuMemMap: no such symbol") {
				t.Errorf("%s: %+v", pmKey(c), c)
			}
		}
	})
	for _, gone := range []string{"cuIpcGetMemHandle", "cuIpcCloseMemHandle", "cuIpcOpenMemHandle_v2"} {
		t.Run("no "+gone, func(t *testing.T) {
			box := gpufake.New(cfg)
			lib := olderDriver{Library: box.CUDA(), gone: map[string]bool{gone: true, "cuIpcOpenMemHandle": true}}
			importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
				return cuda.RunImport(ctx, cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, fd, req)
			}
			r := run(t, lib, importer, selftest.MemCUDAIPC, selftest.MemIPC)
			for _, c := range r.Checks {
				refused := c.Kind == selftest.MemCUDAIPC
				if c.Verified == refused || (refused && (c.Step != selftest.StepSetup ||
					c.Refused != "FAKE-libcuda (selftest/gpufake, no GPU) has no cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle")) {
					t.Errorf("%s: %+v", pmKey(c), c)
				}
			}
			holdsNothing(t, box)
		})
	}
	// The legacy name cuIpcOpenMemHandle serves where the _v2 one is gone.
	t.Run("cuIpcOpenMemHandle without _v2", func(t *testing.T) {
		inner := gpufake.New(cfg).CUDA()
		legacy := olderDriver{Library: aliasLib{inner, "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"}, gone: map[string]bool{"cuIpcOpenMemHandle_v2": true}}
		importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
			return cuda.RunImport(ctx, cuda.MemOptions{Library: olderDriver{Library: aliasLib{gpufake.New(cfg).CUDA(), "cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"},
				gone: map[string]bool{"cuIpcOpenMemHandle_v2": true}}}, fd, req)
		}
		for _, c := range run(t, legacy, importer, selftest.MemCUDAIPC).Checks {
			if !c.Verified {
				t.Errorf("%s: %+v", pmKey(c), c)
			}
		}
	})
	// An importing process whose driver cannot open a legacy handle refuses it.
	t.Run("importer without cuIpcOpenMemHandle", func(t *testing.T) {
		importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
			return cuda.RunImport(ctx, cuda.MemOptions{Library: olderDriver{Library: gpufake.New(cfg).CUDA(),
				gone: map[string]bool{"cuIpcOpenMemHandle_v2": true, "cuIpcOpenMemHandle": true}}}, fd, req)
		}
		for _, c := range run(t, gpufake.New(cfg).CUDA(), importer, selftest.MemCUDAIPC).Checks {
			if c.Verified || c.Step != selftest.StepSetup || c.Refused != "in the importing process: FAKE-libcuda (selftest/gpufake, no GPU) has no cuIpcOpenMemHandle" {
				t.Errorf("%s: %+v", pmKey(c), c)
			}
		}
	})
}

// aliasLib answers the symbol name with the library's symbol target.
type aliasLib struct {
	cuda.Library
	name, target string
}

func (l aliasLib) Bind(name string, fn any) error {
	if name == l.name {
		name = l.target
	}
	return l.Library.Bind(name, fn)
}

// zeroGranularity is the FAKE libcuda answering cuMemGetAllocationGranularity with 0.
type zeroGranularity struct{ cuda.Library }

func (l zeroGranularity) Bind(name string, fn any) error {
	if name != "cuMemGetAllocationGranularity" {
		return l.Library.Bind(name, fn)
	}
	*fn.(*func(g *uintptr, prop *cuda.MemProp, option int32) int32) = func(g *uintptr, prop *cuda.MemProp, option int32) int32 {
		*g = 0
		return 0
	}
	return nil
}

// A driver that answers a granularity of 0 gets the bytes as they are (no division
// by it): here the FAKE then refuses 112 bytes that are not a multiple of its own.
func TestPeerMemZeroGranularityOverFake(t *testing.T) {
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: zeroGranularity{gpufake.New(gpufake.FakeConfig{GPUs: gpus(1)}).CUDA()},
		Bytes: 100, Kinds: []string{selftest.MemVMM}})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Checks[0]; c.Verified || c.Refused != "cuMemCreate(112 B, pinned on GPU 0): CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("%+v", c)
	}
}

// A mismatch whose word cannot be read back is an error at its step, not a pass: on
// one GPU, the copy out is flipped and the fourth read from the GPU (after the three
// verifications' results) is the read-back of the bad word.
func TestPeerMemReadBackFailsOverFake(t *testing.T) {
	box := gpufake.New(gpufake.FakeConfig{GPUs: gpus(1), Faults: []gpufake.Fault{
		{Kind: gpufake.FaultFlip, Copy: "0->0", Offset: 16},
		{Kind: gpufake.FaultCode, Call: "cuMemcpyDtoH_v2", Code: 700, Nth: 4}}})
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10, Kinds: []string{selftest.MemManaged}})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Checks[0]; c.Verified || c.Step != selftest.StepPeerCopy || c.Error != "cuMemcpyDtoH_v2(4 B) on GPU 0: CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Errorf("%+v", c)
	}
}
