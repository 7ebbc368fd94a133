package gpufake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
)

// The peermem phase's real host code (selftest/cuda/peermem.go) over the FAKE
// driver: managed memory, VMM mappings and an exported-and-imported handle, each
// written and read by both GPUs' kernels and copied out by the peer's copy engine.

func runMem(t *testing.T, cfg gpufake.FakeConfig, corrupt string) *cuda.MemResult {
	t.Helper()
	box := gpufake.New(cfg)
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 96 << 10, Corrupt: corrupt})
	if err != nil {
		t.Fatalf("RunPeerMem over the FAKE driver: %v", err)
	}
	return r
}

func checkOf(t *testing.T, r *cuda.MemResult, kind string, owner, peer int) selftest.PeerMem {
	t.Helper()
	for _, c := range r.Checks {
		if c.Kind == kind && c.Owner == owner && c.Peer == peer {
			return c
		}
	}
	t.Fatalf("no %s check %d->%d in %+v", kind, owner, peer, r.Checks)
	return selftest.PeerMem{}
}

func TestPeerMemHealthy(t *testing.T) {
	r := runMem(t, twoGPUs(), "")
	if len(r.Checks) != 6 {
		t.Fatalf("%d checks, want 3 forms x 2 ordered pairs: %+v", len(r.Checks), r.Checks)
	}
	for _, c := range r.Checks {
		if !c.Verified || c.Mismatch != nil || c.Error != "" || c.Refused != "" || c.Step != "" {
			t.Errorf("%s %d->%d: %+v", c.Kind, c.Owner, c.Peer, c)
		}
	}
	calls := strings.Join(checkOf(t, r, selftest.MemManaged, 0, 1).Calls, "; ")
	for _, want := range []string{"cuMemAllocManaged(96 KiB, CU_MEM_ATTACH_GLOBAL) on GPU 0", "cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0)", "cuMemAdvise(SET_ACCESSED_BY, GPU 1)", "cuMemcpyAsync(96 KiB) on GPU 1"} {
		if !strings.Contains(calls, want) {
			t.Errorf("managed calls %q lack %q", calls, want)
		}
	}
	ipc := checkOf(t, r, selftest.MemIPC, 1, 0)
	if calls := strings.Join(ipc.Calls, "; "); !strings.Contains(calls, "cuMemImportFromShareableHandle(POSIX fd)") || !strings.Contains(calls, "cuMemSetAccess(GPU 1 read-write, GPU 0 read-write)") {
		t.Errorf("ipc calls %q", calls)
	}
	// VMM sizes follow the granularity (64 KiB here): 96 KiB becomes 128 KiB.
	if ipc.Bytes != 128<<10 || checkOf(t, r, selftest.MemManaged, 1, 0).Bytes != 96<<10 {
		t.Errorf("bytes: ipc %d, managed %d", ipc.Bytes, checkOf(t, r, selftest.MemManaged, 1, 0).Bytes)
	}
}

// With one GPU every form runs locally (owner = peer).
func TestPeerMemOneGPU(t *testing.T) {
	r := runMem(t, gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}}}, "")
	if len(r.Checks) != 3 {
		t.Fatalf("%+v", r.Checks)
	}
	for _, c := range r.Checks {
		if c.Owner != 0 || c.Peer != 0 || !c.Verified {
			t.Errorf("%+v", c)
		}
	}
}

func TestPeerMemFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     gpufake.FakeConfig
		corrupt string
		check   func(t *testing.T, r *cuda.MemResult)
	}{
		{"advise refused", twoGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuMemAdvise", Code: 801}), "", func(t *testing.T, r *cuda.MemResult) {
			c := checkOf(t, r, selftest.MemManaged, 0, 1)
			if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "cuMemAdvise(SET_PREFERRED_LOCATION, GPU 0): CUDA_ERROR_NOT_SUPPORTED") || c.Error != "" {
				t.Errorf("%+v", c)
			}
			if v := checkOf(t, r, selftest.MemVMM, 0, 1); !v.Verified {
				t.Errorf("vmm should not care: %+v", v)
			}
		}},
		{"managed peer writes lost", twoGPUs(gpufake.Fault{Kind: gpufake.FaultLost, GPU: 0, Mem: gpufake.MemManaged, Offset: 4096, Bytes: 8}), "", func(t *testing.T, r *cuda.MemResult) {
			c := checkOf(t, r, selftest.MemManaged, 0, 1)
			if c.Verified || c.Step != selftest.StepPeerWrite || c.Mismatch == nil || c.Mismatch.Offset != 4096 || c.Mismatch.Words != 2 ||
				c.Mismatch.Got != cuda.Pattern(1024, 0x0A11CE55) {
				t.Errorf("%+v %+v", c, c.Mismatch)
			}
			if o := checkOf(t, r, selftest.MemManaged, 1, 0); !o.Verified {
				t.Errorf("GPU 1's managed memory is not faulted: %+v", o)
			}
		}},
		{"vmm peer kernel mmu fault", twoGPUs(gpufake.Fault{Kind: gpufake.FaultMMU, GPU: 1, Mem: gpufake.MemVMM}), "", func(t *testing.T, r *cuda.MemResult) {
			c := checkOf(t, r, selftest.MemVMM, 1, 0)
			if c.Verified || c.Step != selftest.StepPeerRead || !strings.Contains(c.Error, "CUDA_ERROR_ILLEGAL_ADDRESS") {
				t.Errorf("%+v", c)
			}
		}},
		{"no p2p: local forms only", gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}}, CanAccess: [][]bool{{false, false}, {false, false}}}, "", func(t *testing.T, r *cuda.MemResult) {
			// cuDeviceCanAccessPeer answers 0: no pair is tried, GPU 0 runs the local forms.
			if len(r.Checks) != 3 || r.Checks[0].Owner != 0 || r.Checks[0].Peer != 0 || !r.Checks[2].Verified {
				t.Errorf("%+v", r.Checks)
			}
		}},
		{"set access refused", twoGPUs(gpufake.Fault{Kind: gpufake.FaultCode, Call: "cuMemSetAccess", Code: 217}), "", func(t *testing.T, r *cuda.MemResult) {
			c := checkOf(t, r, selftest.MemIPC, 0, 1)
			if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "cuMemSetAccess(GPU 0 read-write, GPU 1 read-write): CUDA_ERROR_PEER_ACCESS_UNSUPPORTED") {
				t.Errorf("%+v", c)
			}
		}},
		{"corrupt hook", twoGPUs(), selftest.MemManaged, func(t *testing.T, r *cuda.MemResult) {
			c := checkOf(t, r, selftest.MemManaged, 0, 1)
			if c.Verified || c.Step != selftest.StepPeerWrite || c.Mismatch == nil || c.Mismatch.Words != 1 || !strings.Contains(r.Injected, "in the managed check GPU 0 -> GPU 1") {
				t.Errorf("%+v %q", c, r.Injected)
			}
			if o := checkOf(t, r, selftest.MemManaged, 1, 0); !o.Verified {
				t.Errorf("the hook corrupts one check only: %+v", o)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, runMem(t, tc.cfg, tc.corrupt)) })
	}
}

// With an importer the cross-process forms run on a ring of the four GPUs (each
// exports once, imports once); managed and vmm on all 12 ordered pairs.
func TestPeerMemImporterRing(t *testing.T) {
	cfg := gpufake.FakeConfig{GPUs: []gpufake.FakeGPU{{MemBytes: 4 << 30}, {MemBytes: 4 << 30}, {MemBytes: 4 << 30}, {MemBytes: 4 << 30}}}
	imports := 0
	importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
		imports++
		return cuda.RunImport(ctx, cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, fd, req)
	}
	r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: gpufake.New(cfg).CUDA(), Bytes: 64 << 10, Importer: importer})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, c := range r.Checks {
		kinds[c.Kind]++
		if !c.Verified {
			t.Errorf("%+v", c)
		}
	}
	if imports != 8 || kinds[selftest.MemManaged] != 12 || kinds[selftest.MemVMM] != 12 || kinds[selftest.MemIPC] != 4 || kinds[selftest.MemCUDAIPC] != 4 {
		t.Errorf("%d imports, checks by form %v", imports, kinds)
	}
	checkOf(t, r, selftest.MemCUDAIPC, 3, 0)
}

// The ipc form with its peer side in "another process": the importer runs RunImport
// over a FakeBox of its own (its own contexts and allocations; only the exported
// descriptor's pages are shared, as between two processes), and a fault there shows.
func TestPeerMemImporter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kind   string
		faults []gpufake.Fault
		check  func(t *testing.T, c selftest.PeerMem)
	}{
		{"healthy", selftest.MemIPC, nil, func(t *testing.T, c selftest.PeerMem) {
			calls := strings.Join(c.Calls, "; ")
			if !c.Verified || !strings.Contains(calls, "importer: cuMemImportFromShareableHandle(POSIX fd) in process") || !strings.Contains(calls, "importer: cuMemSetAccess(GPU 1 read-write)") {
				t.Errorf("%+v", c)
			}
		}},
		{"importer's writes lost", selftest.MemIPC, []gpufake.Fault{{Kind: gpufake.FaultLost, GPU: 0, Mem: gpufake.MemVMM}}, func(t *testing.T, c selftest.PeerMem) {
			if c.Verified || c.Step != selftest.StepPeerWrite || c.Mismatch == nil || c.Mismatch.Words != c.Bytes/4 {
				t.Errorf("%+v %+v", c, c.Mismatch)
			}
		}},
		{"import refused", selftest.MemIPC, []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuMemImportFromShareableHandle", Code: 801}}, func(t *testing.T, c selftest.PeerMem) {
			if c.Verified || c.Step != selftest.StepSetup || c.Error != "" || !strings.Contains(c.Refused, "in the importing process: cuMemImportFromShareableHandle(POSIX fd) in process") || !strings.Contains(c.Refused, "CUDA_ERROR_NOT_SUPPORTED") {
				t.Errorf("%+v", c)
			}
		}},
		{"cudaipc healthy", selftest.MemCUDAIPC, nil, func(t *testing.T, c selftest.PeerMem) {
			calls := strings.Join(c.Calls, "; ")
			if !c.Verified || !strings.Contains(calls, "cuMemAlloc_v2(64 KiB) on GPU 0; cuIpcGetMemHandle; importer: cuIpcOpenMemHandle(LAZY_ENABLE_PEER_ACCESS) on GPU 1 in process") {
				t.Errorf("%+v", c)
			}
		}},
		{"cudaipc open refused", selftest.MemCUDAIPC, []gpufake.Fault{{Kind: gpufake.FaultCode, Call: "cuIpcOpenMemHandle_v2", Code: 205}}, func(t *testing.T, c selftest.PeerMem) {
			if c.Verified || c.Step != selftest.StepSetup || !strings.Contains(c.Refused, "CUDA_ERROR_MAP_FAILED") {
				t.Errorf("%+v", c)
			}
		}},
		{"cudaipc importer kernel faults", selftest.MemCUDAIPC, []gpufake.Fault{{Kind: gpufake.FaultMMU, GPU: 0, Mem: gpufake.MemDevice}}, func(t *testing.T, c selftest.PeerMem) {
			if c.Verified || c.Step != selftest.StepPeerRead || !strings.Contains(c.Error, "the importing process: cuStreamSynchronize on GPU 1: CUDA_ERROR_ILLEGAL_ADDRESS") {
				t.Errorf("%+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := twoGPUs(tc.faults...)
			imports := 0
			importer := func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
				imports++
				return cuda.RunImport(ctx, cuda.MemOptions{Library: gpufake.New(cfg).CUDA()}, fd, req)
			}
			box := gpufake.New(cfg)
			r, err := cuda.RunPeerMem(context.Background(), cuda.MemOptions{Library: box.CUDA(), Bytes: 64 << 10, Kinds: []string{tc.kind}, Importer: importer})
			if err != nil {
				t.Fatal(err)
			}
			if imports != 2 || len(r.Checks) != 2 {
				t.Fatalf("%d imports, checks %+v", imports, r.Checks)
			}
			tc.check(t, checkOf(t, r, tc.kind, 0, 1))
		})
	}
}
