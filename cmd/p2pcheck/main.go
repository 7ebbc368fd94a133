// Command p2pcheck is the boot-time self-test: it reads the GPUs from sysfs, loads
// libcuda and libnvidia-ml without cgo (purego), judges the result against the recipe
// and prints a schema-1 report. peerboot-init runs it on every boot; it also runs by
// hand on an installed box.
//
// Exit status: 0 pass, 9 fail (the report is printed either way), 2 usage.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

// Exit statuses.
const (
	exitPass  = 0
	exitUsage = 2
	exitFail  = 9
)

type options struct {
	json        bool
	out         string
	recipePath  string
	modulesJSON string
	deadline    time.Duration
	cudaLib     string
	nvmlLib     string
	root        string // prefix for /sys and /proc, for tests on a fake tree
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fl := flag.NewFlagSet("p2pcheck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.BoolVar(&o.json, "json", false, "write the report JSON to stdout instead of the summary")
	fl.StringVar(&o.out, "out", "", "also write the report JSON to this file")
	fl.StringVar(&o.recipePath, "recipe", "", "resolved recipe (/etc/peerboot/recipe.toml); without it the GPU count is not checked")
	fl.StringVar(&o.modulesJSON, "modules-json", "", "module outcomes recorded by peerboot-init, merged into the report")
	fl.DurationVar(&o.deadline, "deadline", 60*time.Second, "bound on the whole self-test; a phase still running then is a fail")
	fl.StringVar(&o.cudaLib, "cuda-lib", "libcuda.so.1", "CUDA driver library to dlopen")
	fl.StringVar(&o.nvmlLib, "nvml-lib", "libnvidia-ml.so.1", "NVML library to dlopen")
	fl.StringVar(&o.root, "root", "/", "root under which /sys and /proc are read (tests)")
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "p2pcheck: unexpected arguments %v\n", fl.Args())
		return exitUsage
	}
	r := check(&o, stderr)
	return emit(&o, r, stdout, stderr)
}

// check runs the phases in order under their deadlines and judges the result.
func check(o *options, stderr io.Writer) *selftest.Report {
	start := time.Now()
	end := start.Add(o.deadline)
	r := selftest.New()
	r.StartedAt = start.UTC().Format(time.RFC3339)
	r.Kernel = selftest.ReadKernel(filepath.Join(o.root, "proc"))

	var platform *recipe.Platform
	var dl recipe.Deadlines
	if o.recipePath != "" {
		rc, err := recipe.Load(o.recipePath)
		if err != nil {
			r.Add(selftest.SevFail, "recipe", fmt.Sprintf("cannot load %s: %v", o.recipePath, err), "the image's recipe is written by the rootfs stage; rebuild the image")
		} else {
			r.Recipe = selftest.RecipeRef{Name: rc.Name, Digest: rc.Digest}
			platform = &rc.Platform
			dl = rc.Selftest.Deadlines
		}
	}
	if o.modulesJSON != "" {
		b, err := os.ReadFile(o.modulesJSON)
		var rec *selftest.InitRecord
		if err == nil {
			rec, err = selftest.ParseInitRecord(b)
		}
		if err != nil {
			r.Add(selftest.SevFail, "modules", fmt.Sprintf("module outcomes: %v", err), "")
		} else {
			r.Merge(rec)
		}
	} else {
		// Run by hand on a box that booted its own way: the driver is whatever the
		// running kernel has loaded already.
		r.Modules = selftest.LoadedModules(filepath.Join(o.root, "sys", "module"), []string{"nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem"})
	}

	ph := phases{report: r, end: end, log: stderr}
	sysPCI := filepath.Join(o.root, "sys", "bus", "pci", "devices")
	if !ph.run(selftest.PhasePrecheck, dl.Precheck.Std(), func() (func(), error) {
		gpus, err := selftest.ScanGPUs(sysPCI)
		return func() { r.GPUs = gpus }, err
	}) {
		return finish(r, platform)
	}
	if !ph.run(selftest.PhaseCUDA, dl.CUDA.Std(), func() (func(), error) {
		c := probeCUDA(o.cudaLib)
		return func() { r.CUDA = c }, nil
	}) {
		return finish(r, platform)
	}
	ph.run(selftest.PhaseNVML, dl.Driver.Std(), func() (func(), error) {
		n := probeNVML(o.nvmlLib)
		return func() { r.NVML = n }, nil
	})
	return finish(r, platform)
}

func finish(r *selftest.Report, platform *recipe.Platform) *selftest.Report {
	selftest.Judge(r, platform)
	return r
}

// phases runs each phase in its own goroutine so that a call stuck in the driver (a
// cuInit that never returns) cannot stop the report: the phase is abandoned, the
// report says where it stalled, and the process exits with the goroutine still stuck.
type phases struct {
	report *selftest.Report
	end    time.Time // the overall deadline
	log    io.Writer
}

// run runs fn within min(limit, time left overall). fn returns a function that applies
// its results to the report; it is called only if fn finished in time, so an abandoned
// phase never writes to the report behind our back. It returns false on a stall.
func (p *phases) run(name string, limit time.Duration, fn func() (apply func(), err error)) bool {
	left := time.Until(p.end)
	if limit <= 0 || limit > left {
		limit = left
	}
	type result struct {
		apply func()
		err   error
	}
	done := make(chan result, 1) // buffered: a late phase must not block forever on send
	start := time.Now()
	go func() {
		a, err := fn()
		done <- result{a, err}
	}()
	timer := time.NewTimer(max(limit, 0))
	defer timer.Stop()
	select {
	case res := <-done:
		p.report.Durations = append(p.report.Durations, selftest.Duration{Phase: name, MS: time.Since(start).Milliseconds()})
		if res.err != nil {
			p.report.Add(selftest.SevFail, name, res.err.Error(), "")
		}
		if res.apply != nil {
			res.apply()
		}
		return true
	case <-timer.C:
		p.report.Durations = append(p.report.Durations, selftest.Duration{Phase: name, MS: time.Since(start).Milliseconds()})
		p.report.DeadlineExceeded = name
		fmt.Fprintf(p.log, "p2pcheck: %s did not finish within %s; giving up on it\n", name, limit)
		return false
	}
}

// emit prints the report and picks the exit status.
func emit(o *options, r *selftest.Report, stdout, stderr io.Writer) int {
	js, err := selftest.Encode(r)
	if err != nil {
		fmt.Fprintf(stderr, "p2pcheck: %v\n", err)
		return exitFail
	}
	if o.out != "" {
		if err := os.WriteFile(o.out, js, 0o644); err != nil {
			fmt.Fprintf(stderr, "p2pcheck: writing report: %v\n", err)
		}
	}
	if o.json {
		_, err = stdout.Write(js)
	} else {
		_, err = io.WriteString(stdout, selftest.Summary(r))
	}
	if err != nil {
		fmt.Fprintf(stderr, "p2pcheck: writing report: %v\n", err)
	}
	if r.Verdict == selftest.Pass {
		return exitPass
	}
	return exitFail
}
