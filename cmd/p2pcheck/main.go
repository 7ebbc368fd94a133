// Command p2pcheck is the boot-time P2P self-test. In four phases, each a child process
// under its own deadline, it reads the PCIe topology from sysfs (precheck), asks NVML
// for P2P status and topology (nvml), times and verifies local and peer copies through
// the CUDA driver API (cuda) and runs verified all-reduces through NCCL (nccl); all
// libraries are dlopened without cgo (purego). It judges the result against the recipe
// and prints a schema-2 report. peerboot-init runs it on every boot; it also runs by
// hand on any Linux box with an NVIDIA driver.
//
// Exit status: 0 pass, 9 fail (the report is printed either way), 2 usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/node/assemble"
	"github.com/peerboot/peerboot/node/assemble/phases"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/kmsg"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/verdict"
)

// Exit statuses.
const (
	exitPass  = 0
	exitUsage = 2
	exitFail  = 9
)

type options struct {
	version     bool // --version: print the tool version and exit
	json        bool
	out         string
	recipePath  string
	modulesJSON string
	deadline    time.Duration
	cudaLib     string
	nvmlLib     string
	ncclLib     string
	root        string // prefix for /sys and /proc, for tests on a fake tree
	kmsg        string
	logDir      string
	copySize    recipe.Size // sizes as recipes write them: 256MiB, 1GiB
	samples     int
	ncclMax     recipe.Size
	noNCCL      bool
	noSM        bool
	noPeerMem   bool
	corrupt     corruptFlag
	highMemBAR1 recipe.Size
	fake        string
	phase       string
	soak        soakOptions
	set         map[string]bool // flags given on the command line: they win over the recipe
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fl := flagSet(&o, stderr)
	if err := fl.Parse(args); err != nil {
		return exitUsage
	}
	o.set = map[string]bool{}
	fl.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "p2pcheck: unexpected arguments %v\n", fl.Args())
		return exitUsage
	}
	if o.version {
		fmt.Fprintf(stdout, "p2pcheck %s\n", version)
		return 0
	}
	if o.soak.duration < 0 || o.soak.rounds < 0 || o.soak.corruptRound < 0 || o.soak.aerMax < 0 || o.soak.driftPct < 0 || o.soak.driftPct >= 100 {
		fmt.Fprintf(stderr, "p2pcheck: --soak %s, --soak-rounds %d, --soak-inject-corruption %d, --soak-drift %g: want a duration, counts >= 0 and a drift in [0, 100)\n", o.soak.duration, o.soak.rounds, o.soak.corruptRound, o.soak.driftPct)
		return exitUsage
	}
	if o.phase != "" {
		return childMain(o.phase, os.Stdin, stdout, stderr)
	}
	if o.fake != "" {
		// A scenario that cannot be read, or a binary without the FAKE backend (the
		// image's), is a usage error here, not four crashed phases.
		if _, err := loadFake(o.fake); err != nil {
			fmt.Fprintf(stderr, "p2pcheck: %v\n", err)
			return exitUsage
		}
	}
	r := check(&o, stderr)
	return emit(&o, r, stdout, stderr)
}

// flagSet declares p2pcheck's flags over o.
func flagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fl := flag.NewFlagSet("p2pcheck", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.BoolVar(&o.json, "json", false, "write the report JSON to stdout instead of the rendered report")
	fl.StringVar(&o.out, "out", "", "also write the report JSON to this file")
	fl.StringVar(&o.recipePath, "recipe", "", "resolved recipe (/etc/peerboot/recipe.toml); without it the box is judged by what it shows")
	fl.StringVar(&o.modulesJSON, "modules-json", "", "module outcomes recorded by peerboot-init, merged into the report")
	fl.DurationVar(&o.deadline, "deadline", defaults().Selftest.Deadlines.Total.Std(), "bound on the whole self-test; a phase still running then is a fail (default: the recipes' default selftest.deadlines.total)")
	fl.StringVar(&o.cudaLib, "cuda-lib", "libcuda.so.1", "CUDA driver library to dlopen")
	fl.StringVar(&o.nvmlLib, "nvml-lib", "libnvidia-ml.so.1", "NVML library to dlopen")
	fl.StringVar(&o.ncclLib, "nccl-lib", "libnccl.so.2", "NCCL library to dlopen (e.g. the one in a PyTorch wheel)")
	fl.StringVar(&o.root, "root", "/", "root under which /sys and /proc are read (tests)")
	fl.StringVar(&o.kmsg, "kmsg", "/dev/kmsg", "kernel log to watch for Xid, IOMMU faults and firmware errors during the run")
	fl.StringVar(&o.logDir, "log-dir", "", "directory for NCCL's debug log (default: a temporary directory, removed)")
	fl.TextVar(&o.copySize, "copy-size", recipe.Size(0), "size of each timed copy, written as in recipes: 64MiB (default: the recipe's selftest.copy_size, else 256MiB)")
	fl.IntVar(&o.samples, "samples", 3, "timed samples per copy; the median is reported")
	fl.TextVar(&o.ncclMax, "nccl-max", recipe.Size(0), "largest all-reduce, written as in recipes: 256MiB (default: the recipe's selftest.nccl_max, else 1GiB)")
	fl.BoolVar(&o.noNCCL, "no-nccl", false, "skip the NCCL phase")
	fl.BoolVar(&o.noSM, "no-sm", false, "skip the SM-kernel copies")
	fl.BoolVar(&o.noPeerMem, "no-peer-mem", false, "skip the peermem phase (managed, VMM and exported-handle memory between GPUs)")
	fl.Var(&o.corrupt, "inject-corruption", "test hook: flip one word, to prove the verification catches it (the run must fail): alone or =copy after the first copy; =managed, =vmm, =ipc or =cudaipc in the first peermem check of that form")
	fl.TextVar(&o.highMemBAR1, "high-mem-bar1", recipe.Size(0), "run the above-BAR1 probe as if BAR1 were this size, e.g. 32GiB (to exercise it on a card with a large BAR1)")
	fl.StringVar(&o.fake, "fake", "", "FAKE backend: replay the NVML/CUDA/NCCL answers of this scenario file (tests only; in binaries built with -tags gpufake)")
	fl.DurationVar(&o.soak.duration, "soak", 0, "burn-in: after the self-test, repeat verified copies (new pattern and size each round), all-reduces and NVML samples for this long, e.g. 8h (docs/burn-in.md)")
	fl.IntVar(&o.soak.rounds, "soak-rounds", 0, "with --soak: stop after this many rounds at the latest (0: only the duration bounds it; default: the recipe's selftest.soak.rounds)")
	fl.Float64Var(&o.soak.driftPct, "soak-drift", 10, "with --soak: warn when a copy's bandwidth ends this many percent below its start (0: not checked; default: the recipe's selftest.soak.max_drift_pct, else 10)")
	fl.Int64Var(&o.soak.aerMax, "soak-aer-correctable", 0, "with --soak: correctable PCIe AER errors a device may gain before soak.aer warns (default: the recipe's selftest.soak.max_aer_correctable, else 0: any gain warns)")
	fl.StringVar(&o.soak.progress, "soak-progress", "", "with --soak: rewrite this file with the soak's progress (JSON: state, rounds, faults, bandwidth now against the start, GPU sensors, a downsampled series for a plot) after the first round, at most every 10 s, and at the end")
	fl.IntVar(&o.soak.corruptRound, "soak-inject-corruption", 0, "test hook, with --soak: flip one copied word in this round (the soak must fail there, naming it)")
	fl.StringVar(&o.phase, "phase", "", "internal: run one phase as a child process")
	fl.BoolVar(&o.version, "version", false, "print p2pcheck's version (the report's tool field) and exit")
	return fl
}

// defaults is what p2pcheck assumes without a recipe: the recipes' own defaults
// (recipe/defaults.toml), so a bare run and a default recipe agree.
func defaults() recipe.Recipe {
	d, err := recipe.Defaults()
	if err != nil {
		panic(err) // compiled in and decoded by recipe's TestDefaults
	}
	return d
}

// check runs the phases in order, each in a child under its deadline, and judges.
func check(o *options, stderr io.Writer) *selftest.Report {
	start := time.Now()
	// A soak's rounds come after the one-shot's phases, each under its phase deadline;
	// the whole run's bound grows by the soak's duration.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(o.deadline+o.soak.duration))
	defer cancel()
	var res *recipe.Resolved
	var recipeErr error
	if o.recipePath != "" {
		res, recipeErr = recipe.Load(o.recipePath)
	}
	r := assemble.Base(start, selftest.ReadKernel(filepath.Join(o.root, "proc")), res)
	r.Tool = "p2pcheck " + version
	var rc *recipe.Recipe
	if recipeErr != nil {
		r.Add(selftest.SevFail, "recipe", fmt.Sprintf("cannot load %s: %v", o.recipePath, recipeErr), "the image's recipe is written by the rootfs stage; rebuild the image")
	} else if res != nil {
		rc = &res.Recipe
	}
	mergeModules(o, r)

	// Xid and IOMMU faults that appear while we drive the GPUs are the strongest
	// evidence there is; watch the kernel log from now on.
	watch, werr := kmsg.Start(o.kmsg)
	if werr != nil {
		r.Add(selftest.SevInfo, "kernel.log", "kernel log not watched: "+werr.Error(), "run as root to read /dev/kmsg")
	}

	self, err := selfPath()
	if err != nil {
		r.Add(selftest.SevFail, "p2pcheck.self", err.Error(), "")
		return finish(o, r, rc, watch)
	}
	in := baseInput(o, rc)
	deadlines := phaseDeadlines(rc)
	logDir := o.logDir
	if logDir == "" {
		d, err := os.MkdirTemp("", "p2pcheck-")
		if err == nil {
			logDir = d
			defer os.RemoveAll(d)
		}
	}
	in.LogPath = filepath.Join(logDir, "nccl-debug.log")

	var pre *pcie.Result
	for _, phase := range []string{selftest.PhasePrecheck, selftest.PhaseNVML, selftest.PhaseCUDA, selftest.PhaseNCCL, selftest.PhasePeerMem} {
		if phase == selftest.PhaseNCCL && !wantNCCL(o, r) {
			continue
		}
		if phase == selftest.PhasePeerMem && !wantPeerMem(o, r) {
			continue
		}
		if phase == selftest.PhaseCUDA {
			prepareCUDA(o, in, r, pre)
		}
		in.Phase = phase
		limit := min(deadlines[phase], time.Until(start.Add(o.deadline)))
		res := runPhase(ctx, self, in, limit, stderr)
		r.Durations = append(r.Durations, selftest.Duration{Phase: phase, MS: res.took.Milliseconds()})
		if res.stalled {
			r.DeadlineExceeded = phase
			r.Stall = &selftest.Stall{Phase: phase, AfterMS: res.took.Milliseconds(), Cause: stallCause[phase]}
			fmt.Fprintf(stderr, "p2pcheck: %s did not finish within %s; killed it\n", phase, limit.Round(time.Millisecond))
			break
		}
		if res.err != nil {
			r.Add(selftest.SevFail, "p2pcheck."+phase, res.err.Error(), "a p2pcheck crash: its stderr is on the console; report it with this JSON")
			continue
		}
		if res.out.Precheck != nil {
			pre = res.out.Precheck
		}
		phases.Merge(r, res.out)
		if res.out.Precheck != nil {
			markBootVGA(o.root, r)
		}
		phaseError(r, phase, res.out)
	}
	// BAR1 again now that every copy's process is gone: what is still used is BAR1 the
	// driver did not give back (bar1.leak).
	if r.DeadlineExceeded == "" && len(r.BAR1) > 0 && (r.CUDA.Loaded || r.NCCL != nil) {
		in.Phase = selftest.PhaseBAR1
		limit := min(deadlines[selftest.PhaseNVML], time.Until(start.Add(o.deadline)))
		res := runPhase(ctx, self, in, limit, stderr)
		r.Durations = append(r.Durations, selftest.Duration{Phase: selftest.PhaseBAR1, MS: res.took.Milliseconds()})
		switch {
		case res.stalled:
			r.DeadlineExceeded = selftest.PhaseBAR1
			r.Stall = &selftest.Stall{Phase: selftest.PhaseBAR1, AfterMS: res.took.Milliseconds(), Cause: stallCause[selftest.PhaseNVML]}
		case res.err != nil:
			r.Add(selftest.SevFail, "p2pcheck.bar1", res.err.Error(), "a p2pcheck crash: its stderr is on the console; report it with this JSON")
		case res.out.Error != "":
			r.Add(selftest.SevInfo, "bar1.read", "reading BAR1 after the copies: "+res.out.Error, "")
		default:
			phases.Merge(r, res.out)
		}
	}
	if o.soak.duration > 0 {
		switch {
		case r.DeadlineExceeded == "" && r.CUDA.CuInit != nil && r.CUDA.CuInit.Code == selftest.CUDASuccess && len(r.CUDA.Devices) > 0:
			soak(ctx, rc, soakSettings(o, rc), r, self, in, deadlines, watch, stderr)
		case rc != nil && rc.Platform.GPUs == 0 && len(r.GPUs) == 0:
			// A GPU-less recipe on a GPU-less box (a VM, the default image): nothing to
			// burn in, and nothing wrong either.
			msg := fmt.Sprintf("the %s soak was skipped: the recipe expects no GPUs (platform.gpus = 0) and the box has none", o.soak.duration)
			r.Add(selftest.SevInfo, "soak.skipped", msg, "a burn-in needs GPUs: boot a platform recipe's image on the box to soak its cards")
			newProgressWriter(o.soak.progress, stderr).notStarted(r, o.soak.duration, selftest.SoakSkipped, msg)
		default:
			msg := "the soak did not start: the self-test's copy phase did not reach the GPUs"
			r.Add(selftest.SevFail, "soak.start", msg, "the findings above say why; a burn-in needs the self-test to reach the GPUs first")
			newProgressWriter(o.soak.progress, stderr).notStarted(r, o.soak.duration, selftest.SoakFailed, msg)
		}
	}
	if o.corrupt != "" && r.CUDA.CuInit != nil && r.CUDA.CuInit.Code == selftest.CUDASuccess && !hasFinding(r, "test.injected") {
		where := "the copy phase"
		if o.corrupt != corruptCopy {
			where = "the peermem phase's " + string(o.corrupt) + " checks"
		}
		r.Add(selftest.SevFail, "test.injected", fmt.Sprintf("--inject-corruption=%s was given but %s corrupted nothing", o.corrupt, where),
			"the test hook did not run: the data check is unproven; report it with this JSON")
	}
	return finish(o, r, rc, watch)
}

// markP2PModes puts the BAR1 P2P mode the patched driver logged for each GPU
// (kmsg.P2PMode) on the GPU. The driver logs it when it sets a GPU up, which may be
// before this run (a driver loaded by the init, a GPU opened by nvidia-persistenced),
// so the whole kernel log is read, and the lines the init kept beside each module load
// first (the ring buffer of a long-running box may have lost them).
func markP2PModes(o *options, r *selftest.Report) {
	var lines []string
	for _, m := range r.Modules {
		lines = append(lines, m.KernelLog...)
	}
	if backlog, err := kmsg.Backlog(o.kmsg); err == nil {
		lines = append(lines, backlog...)
	}
	modes := kmsg.P2PModes(lines)
	for i := range r.GPUs {
		if m, ok := modes[strings.ToLower(r.GPUs[i].BDF)]; ok {
			r.GPUs[i].P2PMode, r.GPUs[i].P2PModeLine = m.Mode, m.Line
		}
	}
}

// markBootVGA reads each GPU's sysfs boot_vga: 1 marks the card the firmware set up as
// the console, which is a display GPU for the P2P forks (gpu.display).
func markBootVGA(root string, r *selftest.Report) {
	for i := range r.GPUs {
		b, err := os.ReadFile(filepath.Join(root, "sys", "bus", "pci", "devices", r.GPUs[i].BDF, "boot_vga"))
		r.GPUs[i].BootVGA = err == nil && strings.TrimSpace(string(b)) == "1"
	}
}

func hasFinding(r *selftest.Report, id string) bool {
	for _, f := range r.Findings {
		if f.ID == id {
			return true
		}
	}
	return false
}

// stallCause says what a phase was doing, for the report; the verdict adds the likely
// reason from what else it knows (BAR1 vs VRAM, the driver branch, kernel log).
var stallCause = map[string]string{
	selftest.PhasePrecheck: "reading PCI config space from sysfs",
	selftest.PhaseNVML:     "NVML init or a per-GPU query",
	selftest.PhaseCUDA:     "cuInit, peer access or a timed copy",
	selftest.PhaseNCCL:     "NCCL communicator init or an all-reduce",
	selftest.PhasePeerMem:  "managed, VMM or exported-handle memory between GPUs (allocation, a peer kernel or copy)",
}

func finish(o *options, r *selftest.Report, rc *recipe.Recipe, watch *kmsg.Watch) *selftest.Report {
	markP2PModes(o, r)
	if watch != nil {
		evs, err := watch.Events()
		if err != nil {
			r.Add(selftest.SevInfo, "kernel.log", "reading the kernel log: "+err.Error(), "")
		}
		r.KernelEvents = append(r.KernelEvents, evs...)
		watch.Close()
	}
	verdict.Judge(r, verdict.FromRecipe(rc))
	return r
}

// phaseError files a phase's error where the verdict looks for it: in the library's
// own section when the phase answered one (the rules there know what a missing
// libcuda or an NVML init failure means), else as a finding of its own.
func phaseError(r *selftest.Report, phase string, out *phases.Output) {
	if out.Error == "" {
		return
	}
	var slot *string
	switch {
	case out.NVML != nil:
		slot = &r.NVML.Error
	case out.CUDA != nil:
		slot = &r.CUDA.Error
	case out.NCCL != nil:
		slot = &r.NCCL.Error
	}
	if slot == nil {
		r.Add(selftest.SevFail, phase+".error", out.Error, "")
		return
	}
	if *slot == "" {
		*slot = out.Error
	}
}

func mergeModules(o *options, r *selftest.Report) {
	// Each nvidia module's version from its own .ko, loaded or not (ENODEV on a
	// GPU-less box leaves no /sys/module/nvidia/version to read).
	defer func() { selftest.FillKoVersions(r.Modules, filepath.Join(o.root, "lib", "modules", r.Kernel.Release)) }()
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
		return
	}
	// Run by hand on a box that booted its own way: the driver is whatever the running
	// kernel has loaded already.
	var names []string
	for _, m := range recipe.DefaultModules() {
		names = append(names, strings.ReplaceAll(m, "-", "_")) // the kernel's spelling
	}
	r.Modules = selftest.LoadedModules(filepath.Join(o.root, "sys", "module"), names)
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
		_, err = io.WriteString(stdout, selftest.Render(r))
	}
	if err != nil {
		fmt.Fprintf(stderr, "p2pcheck: writing report: %v\n", err)
	}
	if r.Verdict == selftest.Pass {
		return exitPass
	}
	return exitFail
}
