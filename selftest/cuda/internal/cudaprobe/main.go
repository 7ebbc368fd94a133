// Command cudaprobe runs the self-test's copy phase (selftest/cuda) and all-reduce
// phase (selftest/nccl) on the GPUs of the machine it runs on and prints the results
// as JSON. It is a development driver for trying the packages on a GPU host without
// building a boot image: build it with CGO_ENABLED=0 and copy the binary over.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/nccl"
)

type output struct {
	CUDA      *cuda.Result   `json:"cuda,omitempty"`
	CUDAError string         `json:"cuda_error,omitempty"`
	CUDAMS    int64          `json:"cuda_ms"`
	NCCL      *selftest.NCCL `json:"nccl,omitempty"`
	NCCLError string         `json:"nccl_error,omitempty"`
	NCCLMS    int64          `json:"nccl_ms"`
	Summary   []string       `json:"summary"`
}

func main() {
	var (
		lib      = flag.String("lib", "libcuda.so.1", "CUDA driver library")
		ncclLib  = flag.String("nccl-lib", "libnccl.so.2", "NCCL library")
		bytes    = flag.Int64("bytes", 256<<20, "bytes per copy")
		warmup   = flag.Int("warmup", 4, "warmup copies per sample (-1: none)")
		loops    = flag.Int("loops", 16, "timed copies per sample")
		samples  = flag.Int("samples", 3, "samples per copy")
		verify   = flag.Bool("verify", true, "verify destinations on the GPU")
		sm       = flag.Bool("sm", true, "also SM-kernel copies")
		bidir    = flag.Bool("bidir", true, "also bidirectional copies")
		force    = flag.Bool("highmem-force", false, "run the high-memory probe on every GPU with a fake BAR1 size")
		fakeBAR1 = flag.Int64("fake-bar1", 32<<30, "the fake BAR1 size for -highmem-force")
		corrupt  = flag.Bool("corrupt", false, "test hook: corrupt one destination word before verification")
		skipCUDA = flag.Bool("no-cuda", false, "skip the copy phase")
		runNCCL  = flag.Bool("nccl", false, "run the all-reduce phase")
		ncclMin  = flag.Int64("nccl-min", 8, "smallest all-reduce in bytes")
		ncclMax  = flag.Int64("nccl-max", 1<<30, "largest all-reduce in bytes")
		iters    = flag.Int("iters", 20, "timed all-reduce iterations per size")
		ncclLog  = flag.String("nccl-log", "", "NCCL debug log path")
		timeout  = flag.Duration("timeout", 5*time.Minute, "overall deadline")
		indent   = flag.Bool("json", true, "indented JSON")
		ncclEnv  = flag.String("nccl-env", "", "NCCL_* variables for the all-reduce, K=V,K=V")
		badPTX   = flag.Bool("bad-ptx", false, "only load a broken PTX text and print the JIT error log")
		dumpPTX  = flag.String("dump-ptx", "", "only write the hand-written PTX modules (cuda.ptx, nccl.ptx) into this folder, for ptxas")
	)
	flag.Parse()
	if *dumpPTX != "" {
		for name, text := range map[string]string{"cuda.ptx": cuda.PTX(), "nccl.ptx": nccl.PTX()} {
			if err := os.WriteFile(filepath.Join(*dumpPTX, name), []byte(text), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "cudaprobe:", err)
				os.Exit(1)
			}
		}
		return
	}
	if *badPTX {
		os.Exit(tryBadPTX(*lib))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	out := output{Summary: []string{}}
	rc := 0
	if !*skipCUDA {
		t0 := time.Now()
		r, err := cuda.Run(ctx, cuda.Options{
			Lib: *lib, CopyBytes: *bytes, Warmup: *warmup, Loops: *loops, Samples: *samples,
			Verify: *verify, SM: *sm, Bidir: *bidir, HighMemForce: *force, HighMemFakeBAR1: *fakeBAR1,
			CorruptOnce: *corrupt,
		})
		out.CUDAMS = time.Since(t0).Milliseconds()
		out.CUDA = r
		if err != nil {
			out.CUDAError = err.Error()
			rc = 1
		}
		if r != nil {
			for _, c := range r.Copies {
				s := fmt.Sprintf("copy %s %-5s %d->%d %s: %.1f GB/s verified=%v", c.Method, c.Direction, c.Src, c.Dst, cuda.Size(c.Bytes), c.GBps, c.Verified)
				if c.Mismatch != nil {
					s += fmt.Sprintf(" MISMATCH at byte %d want 0x%08x got 0x%08x (%d words)", c.Mismatch.Offset, c.Mismatch.Want, c.Mismatch.Got, c.Mismatch.Words)
				}
				if c.Error != "" {
					s += " ERROR " + c.Error
				}
				out.Summary = append(out.Summary, s)
			}
			for _, l := range r.Latencies {
				s := fmt.Sprintf("latency %-5s %d->%d %d B: %.3f us verified=%v", l.Direction, l.Src, l.Dst, l.Bytes, l.US, l.Verified)
				if l.Mismatch != nil {
					s += fmt.Sprintf(" MISMATCH at byte %d want 0x%08x got 0x%08x", l.Mismatch.Offset, l.Mismatch.Want, l.Mismatch.Got)
				}
				if l.Error != "" {
					s += " ERROR " + l.Error
				}
				out.Summary = append(out.Summary, s)
			}
			for _, h := range r.HighMem {
				out.Summary = append(out.Summary, fmt.Sprintf("highmem gpu %d peer %d ballast %d MiB va %s verified=%v mismatch=%v err=%q", h.GPU, h.Peer, h.BallastMiB, h.BufferVA, h.Verified, h.Mismatch != nil, h.Error))
			}
		}
	}
	if *runNCCL {
		t0 := time.Now()
		env := map[string]string{}
		for _, kv := range strings.Split(*ncclEnv, ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		n, err := nccl.Run(ctx, nccl.Options{Lib: *ncclLib, CUDALib: *lib, MinBytes: *ncclMin, MaxBytes: *ncclMax, Iters: *iters, Env: env, LogPath: *ncclLog})
		out.NCCLMS = time.Since(t0).Milliseconds()
		out.NCCL = n
		if err != nil {
			out.NCCLError = err.Error()
			rc = 1
		}
		if n != nil {
			for _, s := range n.Sizes {
				out.Summary = append(out.Summary, fmt.Sprintf("allreduce %12d B %10.1f us algbw %7.2f busbw %7.2f wrong %d", s.Bytes, s.TimeUS, s.AlgBW, s.BusBW, s.Wrong))
			}
		}
	}
	var b []byte
	var err error
	if *indent {
		b, err = json.MarshalIndent(out, "", "  ")
	} else {
		b, err = json.Marshal(out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cudaprobe:", err)
		os.Exit(2)
	}
	for _, s := range out.Summary {
		fmt.Fprintln(os.Stderr, s)
	}
	if out.CUDAError != "" {
		fmt.Fprintln(os.Stderr, "cuda error:", out.CUDAError)
	}
	if out.NCCLError != "" {
		fmt.Fprintln(os.Stderr, "nccl error:", out.NCCLError)
	}
	os.Stdout.Write(append(b, '\n'))
	os.Exit(rc)
}

// tryBadPTX shows what a JIT failure looks like through cuda.LoadModule.
func tryBadPTX(lib string) int {
	d, err := cuda.Load(lib)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer d.Close()
	if _, err := d.Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	const bad = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry broken()\n{\n\tbogus.u32 %r1;\n\tret;\n}\n"
	_, log, err := d.LoadModule(0, bad)
	fmt.Printf("bad PTX: err=%v code=%d\nlog=%q\n", err, cuda.Code(err), log)
	if err == nil {
		return 1
	}
	return 0
}
