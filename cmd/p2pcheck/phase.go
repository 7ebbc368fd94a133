package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/peerboot/peerboot/node/assemble/phases"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
)

// Each phase runs in a child process (this binary with --phase NAME): a call stuck in
// the driver (cuInit on a GPU that fell off the bus, NCCL init on a 48 GB card with a
// static-BAR1 driver) can then be killed at its deadline and named in the report, and
// the GPU state it leaves behind dies with the child instead of poisoning later phases.

// phaseInput is what the parent hands a phase child on stdin.
type phaseInput struct {
	Phase   string `json:"phase"`
	Root    string `json:"root"`
	Fake    string `json:"fake,omitempty"` // FAKE backend scenario file (tests only)
	CUDALib string `json:"cuda_lib"`
	NVMLLib string `json:"nvml_lib"`
	NCCLLib string `json:"nccl_lib"`

	// cuda phase
	CopyBytes  int64                `json:"copy_bytes"`
	Samples    int                  `json:"samples"`
	Verify     bool                 `json:"verify"`
	SM         bool                 `json:"sm"`
	Bidir      bool                 `json:"bidir"`
	LinkGBps   [][]float64          `json:"link_gbps"` // by CUDA ordinal = GPU index
	HighMem    []cuda.HighMemTarget `json:"high_mem"`
	HighMemFrc bool                 `json:"high_mem_force"`
	FakeBAR1   int64                `json:"fake_bar1"` // the pretended BAR1 of a forced probe
	Corrupt    bool                 `json:"corrupt"`
	WantGPUs   int                  `json:"want_gpus"`      // GPUs sysfs shows; 0 = only probe cuInit
	Seed       uint32               `json:"seed,omitempty"` // pattern seed (cuda.Options.Seed); a soak's rounds each have one

	// SoakRound is the soak round this phase runs in (from 1; 0: not soaking). Only the
	// FAKE backend reads it, to play a scenario's changes over time.
	SoakRound int `json:"soak_round,omitempty"`

	// peermem phase
	MemBytes   int64  `json:"mem_bytes"`
	CorruptMem string `json:"corrupt_mem,omitempty"` // the form the test hook corrupts
	// Import is the ipc form's request to its importing process (phaseImport).
	Import *cuda.ImportRequest `json:"import,omitempty"`

	// nccl phase
	NCCLMin  int64             `json:"nccl_min"`
	NCCLMax  int64             `json:"nccl_max"`
	NCCLIter int               `json:"nccl_iters"`
	Env      map[string]string `json:"env"`
	LogPath  string            `json:"log_path"`
	KmsgPath string            `json:"kmsg_path"` // the FAKE backend writes its kernel lines here
}

// phaseRun is how one child ended.
type phaseRun struct {
	out     *phases.Output
	stalled bool
	took    time.Duration
	err     error // the child crashed or printed no answer
}

// runPhase starts the child, feeds it in and waits at most limit. On the deadline the
// whole process group is killed; a child in uninterruptible sleep (D state, stuck in
// the kernel) cannot die, so the wait for it is abandoned after a grace period.
func runPhase(ctx context.Context, self string, in *phaseInput, limit time.Duration, stderr io.Writer) phaseRun {
	start := time.Now()
	body, err := json.Marshal(in)
	if err != nil {
		return phaseRun{err: fmt.Errorf("encoding phase input: %w", err)}
	}
	cmd := exec.Command(self, "--phase", in.Phase)
	cmd.Stdin = bytes.NewReader(body)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return phaseRun{err: fmt.Errorf("starting the %s phase: %w", in.Phase, err)}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(max(limit, 0))
	defer timer.Stop()
	select {
	case werr := <-done:
		run := phaseRun{took: time.Since(start)}
		var out phases.Output
		if derr := json.Unmarshal(stdout.Bytes(), &out); derr != nil {
			if werr == nil {
				werr = derr
			}
			run.err = fmt.Errorf("the %s phase died without an answer: %w", in.Phase, werr)
			return run
		}
		run.out = &out
		return run
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		fmt.Fprintf(stderr, "p2pcheck: the %s phase (pid %d) does not die; it is probably stuck in the kernel\n", in.Phase, cmd.Process.Pid)
	}
	return phaseRun{stalled: true, took: time.Since(start)}
}

// childMain is the --phase side: read the input, run the one phase, print the answer.
// The answer is always JSON on stdout; a failure inside the phase is its Error field.
func childMain(phase string, stdin io.Reader, stdout, stderr io.Writer) int {
	var in phaseInput
	if err := json.NewDecoder(stdin).Decode(&in); err != nil {
		fmt.Fprintf(stderr, "p2pcheck --phase %s: reading input: %v\n", phase, err)
		return exitUsage
	}
	in.Phase = phase
	var b backend = realBackend{}
	if in.Fake != "" {
		fb, err := loadFake(in.Fake)
		if err != nil {
			fmt.Fprintf(stderr, "p2pcheck --phase %s: %v\n", phase, err)
			return exitUsage
		}
		b = fb
	}
	if phase == phaseImport {
		return importMain(b, &in, stdout, stderr)
	}
	out := runBackend(context.Background(), b, &in)
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintf(stderr, "p2pcheck --phase %s: writing answer: %v\n", phase, err)
		return exitFail
	}
	return exitPass
}

func runBackend(ctx context.Context, b backend, in *phaseInput) *phases.Output {
	out := &phases.Output{}
	var err error
	switch in.Phase {
	case selftest.PhasePrecheck:
		out.Precheck, err = b.precheck(ctx, in)
	case selftest.PhaseNVML:
		out.NVML, err = b.nvml(ctx, in)
	case selftest.PhaseCUDA:
		out.CUDA, err = b.cuda(ctx, in)
	case selftest.PhaseNCCL:
		out.NCCL, err = b.nccl(ctx, in)
	case selftest.PhasePeerMem:
		out.PeerMem, err = b.peerMem(ctx, in)
	case selftest.PhaseBAR1:
		out.BAR1, err = b.bar1(ctx, in)
	default:
		err = fmt.Errorf("unknown phase %q", in.Phase)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// selfPath is this executable, for the phase children.
func selfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding p2pcheck's own path for the phase processes: %w", err)
	}
	return p, nil
}

// phaseImport is the ipc form's second process: started by the peermem child with the
// exported descriptor as fd 3 (importFD) and the request in phaseInput.Import, it
// answers a cuda.ImportResult on stdout. It is part of the peermem phase, killed with
// it (same process group) at its deadline.
const (
	phaseImport = "peermem-import"
	importFD    = 3
)

// importMain is the --phase peermem-import side.
func importMain(b backend, in *phaseInput, stdout, stderr io.Writer) int {
	if in.Import == nil {
		fmt.Fprintf(stderr, "p2pcheck --phase %s: no import request\n", phaseImport)
		return exitUsage
	}
	res, err := b.peerImport(context.Background(), in, importFD)
	if res == nil {
		res = &cuda.ImportResult{}
	}
	if err != nil && res.Error == "" && res.Refused == "" {
		res.Error = err.Error()
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintf(stderr, "p2pcheck --phase %s: writing answer: %v\n", phaseImport, err)
		return exitFail
	}
	return exitPass
}

// importer runs the ipc and cudaipc forms' peer side in a second process: this binary
// with --phase peermem-import, the exported descriptor (ipc) passed as its fd 3.
func importer(in *phaseInput) func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
	return func(ctx context.Context, fd int, req cuda.ImportRequest) (*cuda.ImportResult, error) {
		self, err := selfPath()
		if err != nil {
			return nil, err
		}
		sub := *in
		sub.Phase, sub.Import = phaseImport, &req
		body, err := json.Marshal(&sub)
		if err != nil {
			return nil, fmt.Errorf("encoding the import request: %w", err)
		}
		cmd := exec.CommandContext(ctx, self, "--phase", phaseImport)
		cmd.Stdin = bytes.NewReader(body)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if fd >= 0 { // the cudaipc form passes a handle in the request instead
			dup, err := syscall.Dup(fd)
			if err != nil {
				return nil, fmt.Errorf("passing the exported descriptor: %w", err)
			}
			f := os.NewFile(uintptr(dup), "exported-cumem")
			defer f.Close()
			cmd.ExtraFiles = []*os.File{f} // fd 3 in the child
		}
		werr := cmd.Run()
		var res cuda.ImportResult
		if derr := json.Unmarshal(stdout.Bytes(), &res); derr != nil {
			if werr == nil {
				werr = derr
			}
			return nil, fmt.Errorf("the importing process died without an answer: %w", werr)
		}
		return &res, nil
	}
}
