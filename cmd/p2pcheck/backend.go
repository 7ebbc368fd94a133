package main

import (
	"context"
	"sort"
	"time"

	"github.com/peerboot/peerboot/node/assemble/phases"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/nccl"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// backend answers the phases. realBackend asks sysfs and the NVIDIA libraries;
// fakeBackend (tests only, fake.go, compiled in with -tags gpufake so the image's
// p2pcheck carries no FAKE code) runs the same CUDA and NCCL code over the FAKE driver
// of selftest/gpufake and answers NVML from a scenario file's raw codes, because a box
// with eight broken GPUs cannot be had on demand. The precheck is always real: the
// tests point --root at a generated sysfs tree instead.
type backend interface {
	precheck(ctx context.Context, in *phaseInput) (*pcie.Result, error)
	nvml(ctx context.Context, in *phaseInput) (*phases.NVML, error)
	cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error)
	nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error)
	peerMem(ctx context.Context, in *phaseInput) (*cuda.MemResult, error)
	// peerImport is the ipc form's second process (phaseImport), fd the descriptor.
	peerImport(ctx context.Context, in *phaseInput, fd int) (*cuda.ImportResult, error)
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
		Seed:            in.Seed,
		LinkGBps: func(src, dst int) float64 {
			if src < len(link) && dst < len(link[src]) {
				return link[src][dst]
			}
			return 0
		},
	})
}

func (b realBackend) peerMem(ctx context.Context, in *phaseInput) (*cuda.MemResult, error) {
	r, err := b.peerMemWith(ctx, in, nil)
	if r != nil {
		r.CUDA.LibraryFile = selftest.LibraryFile(in.Root, in.CUDALib)
	}
	return r, err
}

// peerMemWith is the peermem phase over lib (nil: dlopen in.CUDALib).
func (realBackend) peerMemWith(ctx context.Context, in *phaseInput, lib cuda.Library) (*cuda.MemResult, error) {
	return cuda.RunPeerMem(ctx, cuda.MemOptions{Library: lib, Lib: in.CUDALib, Bytes: in.MemBytes, Corrupt: in.CorruptMem, Importer: importer(in)})
}

func (b realBackend) peerImport(ctx context.Context, in *phaseInput, fd int) (*cuda.ImportResult, error) {
	return b.peerImportWith(ctx, in, nil, fd)
}

// peerImportWith is the import side over lib (nil: dlopen in.CUDALib).
func (realBackend) peerImportWith(ctx context.Context, in *phaseInput, lib cuda.Library, fd int) (*cuda.ImportResult, error) {
	return cuda.RunImport(ctx, cuda.MemOptions{Library: lib, Lib: in.CUDALib}, fd, *in.Import)
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
