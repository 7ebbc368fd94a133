package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// version names the report's tool. A constant, not the VCS revision: p2pcheck is an
// image input, and a commit that does not touch it must not change the image.
const version = "2"

// baseInput is the part of every phase's input that comes from flags and recipe.
func baseInput(o *options, rc *recipe.Recipe) *phaseInput {
	def := defaults().Selftest
	in := &phaseInput{
		Root:      o.root,
		Fake:      o.fake,
		CUDALib:   o.cudaLib,
		NVMLLib:   o.nvmlLib,
		NCCLLib:   o.ncclLib,
		CopyBytes: int64(def.CopySize),
		Samples:   max(o.samples, 1),
		Verify:    def.Verify,
		SM:        !o.noSM,
		Bidir:     true,
		Corrupt:   o.corrupt == corruptCopy,
		MemBytes:  32 << 20,
		NCCLMin:   8, // without a recipe the sweep starts at NCCL's smallest all-reduce, not the recipes' nccl_min
		NCCLMax:   int64(def.NCCLMax),
		NCCLIter:  20,
		Env:       map[string]string{},
		KmsgPath:  o.kmsg,
	}
	if rc != nil {
		in.CopyBytes = int64(rc.Selftest.CopySize)
		in.Verify = rc.Selftest.Verify
		in.NCCLMin = int64(rc.Selftest.NCCLMin)
		in.NCCLMax = int64(rc.Selftest.NCCLMax)
		for k, v := range rc.Env {
			if strings.HasPrefix(k, "NCCL_") {
				in.Env[k] = v
			}
		}
	}
	// What the operator exported wins over the recipe: that is how a fix hint such as
	// "set NCCL_P2P_LEVEL=SYS" is tried before the recipe is changed.
	for _, kv := range os.Environ() {
		// NCCL_VERSION is what NVIDIA's containers export to name the installed NCCL,
		// not a setting.
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "NCCL_") && k != "NCCL_VERSION" {
			in.Env[k] = v
		}
	}
	if o.copySize > 0 {
		in.CopyBytes = int64(o.copySize)
	}
	if o.corrupt != corruptCopy {
		in.CorruptMem = string(o.corrupt)
	}
	// A peermem check moves its memory five times between kernels and a copy engine;
	// 32 MiB (16 of UVM's 2 MiB pages) is enough, and a smaller copy size (tests,
	// quick runs) makes it smaller too.
	in.MemBytes = min(in.MemBytes, in.CopyBytes)
	if o.ncclMax > 0 {
		in.NCCLMax = int64(o.ncclMax)
		in.NCCLMin = min(in.NCCLMin, int64(o.ncclMax))
	}
	return in
}

// phaseDeadlines maps the recipe's selftest.deadlines onto the phases.
func phaseDeadlines(rc *recipe.Recipe) map[string]time.Duration {
	byPhase := func(dl recipe.Deadlines) map[string]time.Duration {
		return map[string]time.Duration{
			selftest.PhasePrecheck: dl.Precheck.Std(),
			selftest.PhaseNVML:     dl.Driver.Std(),
			selftest.PhaseCUDA:     dl.CUDA.Std(),
			selftest.PhaseNCCL:     dl.NCCL.Std(),
			selftest.PhasePeerMem:  dl.CUDA.Std(), // the recipe's cuda deadline covers both
		}
	}
	d := byPhase(defaults().Selftest.Deadlines)
	if rc == nil {
		return d
	}
	for phase, v := range byPhase(rc.Selftest.Deadlines) {
		if v > 0 {
			d[phase] = v
		}
	}
	return d
}

// prepareCUDA tells the CUDA phase what the earlier phases learnt: how many GPUs to
// expect, each pair's link ceiling, and which cards need the above-BAR1 probe.
func prepareCUDA(o *options, in *phaseInput, r *selftest.Report, pre *pcie.Result) {
	in.WantGPUs = len(r.GPUs)
	in.LinkGBps = nil
	in.HighMem = nil
	if pre != nil {
		n := len(pre.GPUs)
		in.LinkGBps = make([][]float64, n)
		for a := range n {
			in.LinkGBps[a] = make([]float64, n)
			for b := range n {
				if a != b {
					in.LinkGBps[a][b] = pcie.PathLinkGBps(pre, a, b)
				}
			}
		}
	}
	for i, g := range r.GPUs {
		bar1 := g.BAR1Bytes
		if o.highMemBAR1 > 0 {
			bar1 = int64(o.highMemBAR1)
		}
		var vram int64
		if g.VRAMBytes != nil {
			vram = *g.VRAMBytes
		}
		if bar1 > 0 && vram > bar1 {
			in.HighMem = append(in.HighMem, cuda.HighMemTarget{Ordinal: i, BAR1: bar1, VRAM: vram})
		}
	}
	// A forced probe covers every CUDA device, also when sysfs shows none (a container
	// that passes the GPU through without its PCI tree).
	in.HighMemFrc = o.highMemBAR1 > 0
	in.FakeBAR1 = int64(o.highMemBAR1)
}

// wantPeerMem runs the peermem phase where CUDA is up with devices.
func wantPeerMem(o *options, r *selftest.Report) bool {
	if o.noPeerMem || r.CUDA.CuInit == nil || r.CUDA.CuInit.Code != selftest.CUDASuccess {
		return false
	}
	return len(r.CUDA.Devices) > 0
}

// corruptFlag is --inject-corruption: "" off, alone "copy", or the peermem form whose
// first check gets the corrupted word.
type corruptFlag string

const corruptCopy corruptFlag = "copy"

func (c *corruptFlag) String() string { return string(*c) }

// IsBoolFlag lets the flag stand alone, as it did before it took a value.
func (c *corruptFlag) IsBoolFlag() bool { return true }

func (c *corruptFlag) Set(s string) error {
	switch s {
	case "true", string(corruptCopy):
		*c = corruptCopy
	case "false":
		*c = ""
	case selftest.MemManaged, selftest.MemVMM, selftest.MemIPC, selftest.MemCUDAIPC:
		*c = corruptFlag(s)
	default:
		return fmt.Errorf("%q: want copy, managed, vmm, ipc or cudaipc", s)
	}
	return nil
}

// wantNCCL runs NCCL only where it can say something: CUDA up with devices. (Not
// sysfs' count: a container may pass GPUs through without their PCI tree.)
func wantNCCL(o *options, r *selftest.Report) bool {
	if o.noNCCL || r.CUDA.CuInit == nil || r.CUDA.CuInit.Code != selftest.CUDASuccess {
		return false
	}
	return len(r.CUDA.Devices) > 0
}
