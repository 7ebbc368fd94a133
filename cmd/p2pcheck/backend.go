package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/nccl"
	"github.com/peerboot/peerboot/selftest/nvml"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// backend answers the phases. realBackend asks sysfs and the NVIDIA libraries;
// fakeBackend (tests only) replays a scenario file, because a box with eight broken
// GPUs cannot be had on demand. The precheck is always real: the tests point --root
// at a generated sysfs tree instead.
type backend interface {
	precheck(ctx context.Context, in *phaseInput) (*pcie.Result, error)
	nvml(ctx context.Context, in *phaseInput) (*nvmlOutput, error)
	cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error)
	nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error)
}

type realBackend struct{}

func (realBackend) precheck(_ context.Context, in *phaseInput) (*pcie.Result, error) {
	return pcie.Scan(in.Root)
}

func (realBackend) nvml(ctx context.Context, in *phaseInput) (*nvmlOutput, error) {
	res, err := nvml.Probe(ctx, in.NVMLLib)
	if res == nil {
		return nil, err
	}
	out := &nvmlOutput{NVML: res.NVML, GPUs: res.GPUs}
	for k, p := range res.Pairs {
		out.Pairs = append(out.Pairs, nvmlPair{A: k[0], B: k[1], Topology: p.Topology, Read: p.Read, Write: p.Write, NVLink: p.NVLink})
	}
	sort.Slice(out.Pairs, func(i, j int) bool {
		if out.Pairs[i].A != out.Pairs[j].A {
			return out.Pairs[i].A < out.Pairs[j].A
		}
		return out.Pairs[i].B < out.Pairs[j].B
	})
	return out, err
}

func (realBackend) cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error) {
	link := in.LinkGBps
	return cuda.Run(ctx, cuda.Options{
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

func (realBackend) nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error) {
	return nccl.Run(ctx, nccl.Options{
		Lib:      in.NCCLLib,
		CUDALib:  in.CUDALib,
		MinBytes: in.NCCLMin,
		MaxBytes: in.NCCLMax,
		Iters:    in.NCCLIter,
		Env:      in.Env,
		LogPath:  in.LogPath,
	})
}

// fakeScenario is a FAKE backend's script: the answers each phase gives, a phase that
// hangs, and kernel-log lines "printed" while the NVML phase runs. The answers use the
// very structures the real probes return, so the verdict cannot tell them apart.
type fakeScenario struct {
	Fake  string            `json:"fake"` // what it simulates, for the test log
	NVML  *nvmlOutput       `json:"nvml"`
	CUDA  *cuda.Result      `json:"cuda"`
	NCCL  *selftest.NCCL    `json:"nccl"`
	Hang  string            `json:"hang"` // phase that never returns
	Kmsg  []string          `json:"kmsg"`
	Error map[string]string `json:"error"` // phase -> error its probe returns
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

func (f *fakeBackend) nvml(ctx context.Context, in *phaseInput) (*nvmlOutput, error) {
	if len(f.s.Kmsg) > 0 && in.KmsgPath != "" {
		if err := appendLines(in.KmsgPath, f.s.Kmsg); err != nil {
			return nil, err
		}
	}
	if err := f.gate(ctx, selftest.PhaseNVML); err != nil {
		return f.s.NVML, err
	}
	if f.s.NVML == nil {
		return nil, fmt.Errorf("FAKE scenario has no nvml answer")
	}
	return f.s.NVML, nil
}

func (f *fakeBackend) cuda(ctx context.Context, _ *phaseInput) (*cuda.Result, error) {
	if err := f.gate(ctx, selftest.PhaseCUDA); err != nil {
		return f.s.CUDA, err
	}
	if f.s.CUDA == nil {
		return nil, fmt.Errorf("FAKE scenario has no cuda answer")
	}
	return f.s.CUDA, nil
}

func (f *fakeBackend) nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error) {
	if err := f.gate(ctx, selftest.PhaseNCCL); err != nil {
		return f.s.NCCL, err
	}
	if f.s.NCCL == nil {
		return nil, fmt.Errorf("FAKE scenario has no nccl answer")
	}
	n := *f.s.NCCL
	n.Env = in.Env
	return &n, nil
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
