package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/peerboot/peerboot/node/assemble/phases"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/nccl"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// backend answers the phases. realBackend asks sysfs and the NVIDIA libraries;
// fakeBackend (tests only) runs the same CUDA and NCCL code over the FAKE driver of
// selftest/gpufake and answers NVML from a scenario file's raw codes, because a box
// with eight broken GPUs cannot be had on demand. The precheck is always real: the
// tests point --root at a generated sysfs tree instead.
type backend interface {
	precheck(ctx context.Context, in *phaseInput) (*pcie.Result, error)
	nvml(ctx context.Context, in *phaseInput) (*phases.NVML, error)
	cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error)
	nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error)
	// bar1 asks NVML again after the copies, for the BAR1 figures.
	bar1(ctx context.Context, in *phaseInput) (*phases.NVML, error)
}

type realBackend struct{}

func (realBackend) precheck(_ context.Context, in *phaseInput) (*pcie.Result, error) {
	return pcie.Scan(in.Root)
}

func (b realBackend) nvml(ctx context.Context, in *phaseInput) (*phases.NVML, error) {
	out, err := b.nvmlWith(ctx, in, nil)
	if out != nil {
		out.NVML.LibraryFile = selftest.LibraryFile(in.Root, in.NVMLLib)
	}
	return out, err
}

// nvmlWith is the NVML probe over lib (nil: dlopen in.NVMLLib).
func (realBackend) nvmlWith(ctx context.Context, in *phaseInput, lib nvml.Library) (*phases.NVML, error) {
	var res *nvml.Result
	var err error
	if lib != nil {
		res, err = nvml.ProbeWith(ctx, lib)
	} else {
		res, err = nvml.Probe(ctx, in.NVMLLib)
	}
	if res == nil {
		return nil, err
	}
	out := &phases.NVML{NVML: res.NVML, GPUs: res.GPUs}
	for k, p := range res.Pairs {
		out.Pairs = append(out.Pairs, phases.Pair{A: k[0], B: k[1], Topology: p.Topology, Read: p.Read, Write: p.Write, NVLink: p.NVLink})
	}
	sort.Slice(out.Pairs, func(i, j int) bool {
		if out.Pairs[i].A != out.Pairs[j].A {
			return out.Pairs[i].A < out.Pairs[j].A
		}
		return out.Pairs[i].B < out.Pairs[j].B
	})
	return out, err
}

func (b realBackend) bar1(ctx context.Context, in *phaseInput) (*phases.NVML, error) {
	return b.nvmlWith(ctx, in, nil)
}

func (b realBackend) cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error) {
	r, err := b.cudaWith(ctx, in, nil)
	if r != nil {
		r.CUDA.LibraryFile = selftest.LibraryFile(in.Root, in.CUDALib)
	}
	return r, err
}

// cudaWith is the copy phase over lib (nil: dlopen in.CUDALib).
func (realBackend) cudaWith(ctx context.Context, in *phaseInput, lib cuda.Library) (*cuda.Result, error) {
	link := in.LinkGBps
	return cuda.Run(ctx, cuda.Options{
		Library:         lib,
		Lib:             in.CUDALib,
		CopyBytes:       in.CopyBytes,
		Warmup:          4,
		Loops:           16,
		Samples:         in.Samples,
		Verify:          in.Verify,
		SM:              in.SM,
		Bidir:           in.Bidir,
		HighMem:         in.HighMem,
		HighMemForce:    in.HighMemFrc,
		HighMemFakeBAR1: in.FakeBAR1,
		CorruptOnce:     in.Corrupt,
		LinkGBps: func(src, dst int) float64 {
			if src < len(link) && dst < len(link[src]) {
				return link[src][dst]
			}
			return 0
		},
	})
}

func (b realBackend) nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error) {
	r, err := b.ncclWith(ctx, in, nil, nil, nil)
	if r != nil {
		r.LibraryFile = selftest.LibraryFile(in.Root, in.NCCLLib)
	}
	return r, err
}

// ncclWith is the all-reduce phase over the given libraries (nil: dlopen).
func (realBackend) ncclWith(ctx context.Context, in *phaseInput, cudaLib, ncclLib cuda.Library, clock func() time.Time) (*selftest.NCCL, error) {
	return nccl.Run(ctx, nccl.Options{
		Clock:       clock,
		CUDALibrary: cudaLib,
		NCCLLibrary: ncclLib,
		Lib:         in.NCCLLib,
		CUDALib:     in.CUDALib,
		MinBytes:    in.NCCLMin,
		MaxBytes:    in.NCCLMax,
		Iters:       in.NCCLIter,
		Env:         in.Env,
		LogPath:     in.LogPath,
	})
}

// fakeScenario is a FAKE backend's script, in raw symptoms only: the numbers the
// FAKE libnvidia-ml's entry points return (nvmlReturn_t of nvmlInit_v2,
// nvmlGpuP2PStatus_t and nvmlGpuTopologyLevel_t per pair, run through the real
// selftest/nvml probe), the box the FAKE CUDA driver and NCCL of
// selftest/gpufake emulate (devices, rates, raw faults such as a flipped word or an
// error code, the NCCL INFO lines libnccl logs), kernel-log lines "printed" while the
// NVML phase runs, a phase that hangs. Nothing in it is a finding or an interpreted
// answer: the real CUDA engine, NCCL sweep, log parser, kernel-log classifier and
// verdict have to get from these to the report.
type fakeScenario struct {
	Fake  string              `json:"fake"` // what it simulates, for the test log
	NVML  *gpufake.FakeNVML   `json:"nvml"` // the FAKE libnvidia-ml
	Box   *gpufake.FakeConfig `json:"box"`  // the FAKE libcuda and libnccl
	Hang  string              `json:"hang"` // phase that never returns
	Kmsg  []string            `json:"kmsg"`
	Error map[string]string   `json:"error"` // phase -> error its probe returns
}

type fakeBackend struct{ s fakeScenario }

func loadFake(path string) (*fakeBackend, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("FAKE scenario: %w", err)
	}
	var fb fakeBackend
	if err := json.Unmarshal(b, &fb.s); err != nil {
		return nil, fmt.Errorf("FAKE scenario %s: %w", path, err)
	}
	return &fb, nil
}

func (f *fakeBackend) gate(ctx context.Context, phase string) error {
	if f.s.Hang == phase {
		<-ctx.Done() // only the parent's SIGKILL ends this
		select {}
	}
	if e := f.s.Error[phase]; e != "" {
		return fmt.Errorf("%s", e)
	}
	return nil
}

func (f *fakeBackend) precheck(ctx context.Context, in *phaseInput) (*pcie.Result, error) {
	if err := f.gate(ctx, selftest.PhasePrecheck); err != nil {
		return nil, err
	}
	return pcie.Scan(in.Root)
}

// nvml runs the real NVML probe over the FAKE libnvidia-ml.
func (f *fakeBackend) nvml(ctx context.Context, in *phaseInput) (*phases.NVML, error) {
	if len(f.s.Kmsg) > 0 && in.KmsgPath != "" {
		if err := appendLines(in.KmsgPath, f.s.Kmsg); err != nil {
			return nil, err
		}
	}
	if err := f.gate(ctx, selftest.PhaseNVML); err != nil {
		return nil, err
	}
	if f.s.NVML == nil {
		return nil, fmt.Errorf("FAKE scenario has no nvml answer")
	}
	return realBackend{}.nvmlWith(ctx, in, gpufake.NewNVML(*f.s.NVML))
}

// bar1 runs the real NVML probe over the FAKE libnvidia-ml as it answers after the copies.
func (f *fakeBackend) bar1(ctx context.Context, in *phaseInput) (*phases.NVML, error) {
	if err := f.gate(ctx, selftest.PhaseBAR1); err != nil {
		return nil, err
	}
	if f.s.NVML == nil {
		return nil, fmt.Errorf("FAKE scenario has no nvml answer")
	}
	return realBackend{}.nvmlWith(ctx, in, gpufake.NewNVML(f.s.NVML.After()))
}

// cuda runs the real copy phase over the FAKE driver.
func (f *fakeBackend) cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error) {
	if err := f.gate(ctx, selftest.PhaseCUDA); err != nil {
		return nil, err
	}
	if f.s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	return realBackend{}.cudaWith(ctx, in, gpufake.New(*f.s.Box).CUDA())
}

// nccl runs the real all-reduce phase over the FAKE driver and NCCL.
func (f *fakeBackend) nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error) {
	if err := f.gate(ctx, selftest.PhaseNCCL); err != nil {
		return nil, err
	}
	if f.s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	box := gpufake.New(*f.s.Box)
	return realBackend{}.ncclWith(ctx, in, box.CUDA(), box.NCCL(), box.Now)
}

func appendLines(path string, lines []string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("FAKE kernel log: %w", err)
	}
	defer fh.Close()
	for _, l := range lines {
		if _, err := fmt.Fprintln(fh, l); err != nil {
			return fmt.Errorf("FAKE kernel log: %w", err)
		}
	}
	return nil
}
