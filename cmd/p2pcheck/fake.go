//go:build gpufake

package main

// The FAKE backend, for tests only: built into p2pcheck with -tags gpufake (the
// tests' binary), never into the image's (make builds without the tag, so the
// 2,000 lines of selftest/gpufake are not linked; nofake.go answers --fake there).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/peerboot/peerboot/node/assemble/phases"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/gpufake"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// hasFake says this binary carries the FAKE backend.
const hasFake = true

type fakeBackend struct{ s gpufake.Scenario }

// loadFake reads a --fake scenario file.
func loadFake(path string) (backend, error) {
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

// at is the scenario as it stands in the input's soak round (the one-shot: as written);
// the round's kernel lines are "printed" when its copy phase runs.
func (f *fakeBackend) at(in *phaseInput) (gpufake.Scenario, error) {
	s, kmsg := f.s.AtRound(in.SoakRound)
	if len(kmsg) > 0 && in.Phase == selftest.PhaseCUDA && in.KmsgPath != "" {
		if err := appendLines(in.KmsgPath, kmsg); err != nil {
			return s, err
		}
	}
	return s, nil
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
	s, err := f.at(in)
	if err != nil {
		return nil, err
	}
	if s.NVML == nil {
		return nil, fmt.Errorf("FAKE scenario has no nvml answer")
	}
	return realBackend{}.nvmlWith(ctx, in, gpufake.NewNVML(s.NVML.After()))
}

// cuda runs the real copy phase over the FAKE driver.
func (f *fakeBackend) cuda(ctx context.Context, in *phaseInput) (*cuda.Result, error) {
	if err := f.gate(ctx, selftest.PhaseCUDA); err != nil {
		return nil, err
	}
	s, err := f.at(in)
	if err != nil {
		return nil, err
	}
	if s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	return realBackend{}.cudaWith(ctx, in, gpufake.New(*s.Box).CUDA())
}

// peerMem runs the real peermem phase over the FAKE driver.
func (f *fakeBackend) peerMem(ctx context.Context, in *phaseInput) (*cuda.MemResult, error) {
	if err := f.gate(ctx, selftest.PhasePeerMem); err != nil {
		return nil, err
	}
	if f.s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	return realBackend{}.peerMemWith(ctx, in, gpufake.New(*f.s.Box).CUDA())
}

// peerImport runs the ipc form's import side over a FAKE driver of its own: only the
// exported descriptor's pages are shared with the peermem child, as between processes.
func (f *fakeBackend) peerImport(ctx context.Context, in *phaseInput, fd int) (*cuda.ImportResult, error) {
	if err := f.gate(ctx, phaseImport); err != nil {
		return nil, err
	}
	if f.s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	return realBackend{}.peerImportWith(ctx, in, gpufake.New(*f.s.Box).CUDA(), fd)
}

// nccl runs the real all-reduce phase over the FAKE driver and NCCL.
func (f *fakeBackend) nccl(ctx context.Context, in *phaseInput) (*selftest.NCCL, error) {
	if err := f.gate(ctx, selftest.PhaseNCCL); err != nil {
		return nil, err
	}
	s, err := f.at(in)
	if err != nil {
		return nil, err
	}
	if s.Box == nil {
		return nil, fmt.Errorf("FAKE scenario has no box")
	}
	box := gpufake.New(*s.Box)
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
