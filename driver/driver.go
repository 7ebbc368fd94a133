package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/compile"
	"github.com/peerboot/peerboot/kernel"
	"github.com/peerboot/peerboot/patch"
	"github.com/peerboot/peerboot/progress"
)

// Version is the driver stage's version: bump it when this code changes its output.
const Version = 3 // 3: NV_BUILD_USER/NV_BUILD_HOST (580+ id string); 2: KBUILD_BUILD_TIMESTAMP format (see compile.Env)

// Patch is one format-patch of the series, applied at the driver tree's root
// (paths like a/conftest.sh, a/nvidia/nv-pci.c).
type Patch struct {
	Name string
	Data []byte
}

// Options is everything the driver stage reads.
type Options struct {
	Source    string   // unpacked driver tree root: Kbuild, conftest.sh, nvidia/, ... (modified in place)
	KernelOut string   // the kernel stage's output directory (build/, modules/, release)
	Patches   []Patch  // applied in order
	Modules   []string // module names (nvidia, nvidia-uvm, ...): each must be built
	Epoch     int64    // SOURCE_DATE_EPOCH
	Jobs      int
	Log       io.Writer // progress lines
	LogFile   string    // full make output
}

// Result describes the built modules.
type Result struct {
	Modules []string // paths of the .ko files, relative to out
	Release string   // the kernel release they were built for
}

// ModulesDir is where the modules land, relative to the stage output:
// modules/lib/modules/<release>/updates/dkms/<name>.ko. It mirrors the kernel
// stage's modules/lib/modules/<release>/ so the modules stage overlays both trees
// onto / the same way, and updates/dkms is where Debian's DKMS packaging puts
// these very modules: depmod's default search order ("updates" before "built-in")
// then prefers them over anything of the same name in the kernel's own tree.
const ModulesDir = "modules"

// ModulePath is a module's path relative to the stage output.
func ModulePath(release, name string) string {
	return filepath.Join(ModulesDir, rootPath(release, name))
}

// rootPath is a module's path relative to the root of the booted system.
func rootPath(release, name string) string {
	return filepath.Join("lib", "modules", release, "updates", "dkms", name+".ko")
}

// stepsHint is roughly the number of steps of a 535-series build (376
// conftests, ~200 compiles and links), for the ETA. The tree is pinned per
// driver version, so a constant is close enough; a wrong value only skews the
// estimate.
const stepsHint int64 = 580

// fullTreeStepsHint adds the RM core and nvidia-modeset core compiles of the
// full tree (~915 + ~130 sources, printed as " [ nvidia ]  CC  ..." lines) to
// the kbuild steps.
const fullTreeStepsHint int64 = 1700

// Build applies the patches to opt.Source, builds the modules against the kernel
// stage's output in opt.KernelOut, checks them (vermagic, symbols, depmod) and
// writes the stripped modules to out.
func Build(ctx context.Context, opt Options, out string) (*Result, error) {
	src, err := filepath.Abs(opt.Source)
	if err != nil {
		return nil, err
	}
	kout, err := filepath.Abs(opt.KernelOut)
	if err != nil {
		return nil, err
	}
	if len(opt.Modules) == 0 {
		return nil, errors.New("driver: no modules to build (driver.modules is empty)")
	}
	// kdir is the kbuild tree (Kbuild, conftest.sh, <module>/<module>.Kbuild):
	// the source root for Debian's nvidia-open-kernel-source, kernel-open/ of
	// the full NVIDIA tree.
	full := IsFullTree(src)
	kdir := src
	if full {
		kdir = filepath.Join(src, "kernel-open")
	}
	for _, f := range []string{"Kbuild", "Makefile", "conftest.sh"} {
		if _, err := os.Stat(filepath.Join(kdir, f)); err != nil {
			return nil, fmt.Errorf("driver source %s does not look like NVIDIA's open kernel module tree (no %s): %w", src, f, err)
		}
	}
	for _, m := range opt.Modules {
		if m == "" || strings.Trim(m, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			return nil, fmt.Errorf("driver module name %q is not a module name (letters, digits, - and _)", m)
		}
		// NVIDIA's Kbuild includes <name>/<name>.Kbuild; check first so a typo in
		// the recipe is named plainly instead of failing inside make.
		if _, err := os.Stat(filepath.Join(kdir, m, m+".Kbuild")); err != nil {
			return nil, fmt.Errorf("driver module %q is not in the driver source (no %s/%s.Kbuild)", m, m, m)
		}
	}
	release, err := kernel.ReadRelease(kout)
	if err != nil {
		return nil, err
	}
	kbuild := filepath.Join(kout, kernel.BuildDir)
	if _, err := os.Stat(filepath.Join(kbuild, "Makefile")); err != nil {
		return nil, fmt.Errorf("the kernel stage output has no module build tree (%s): %w", kbuild, err)
	}

	// Exact: a driver series is written against the one tree its recipe pins, so
	// a hunk away from its recorded line is the wrong tree or, in NVIDIA's
	// generated HAL tables, whose slots look alike, the wrong slot.
	for _, p := range opt.Patches {
		if _, err := patch.ApplyExact(src, p.Name, p.Data); err != nil {
			return nil, err // patch.Error names patch, file, hunk and line
		}
	}

	logw := io.Discard
	if opt.LogFile != "" {
		f, err := os.Create(opt.LogFile)
		if err != nil {
			return nil, fmt.Errorf("creating the driver build log: %w", err)
		}
		defer f.Close()
		logw = f
	}
	progressw := opt.Log
	if progressw == nil {
		progressw = io.Discard
	}
	hint := stepsHint
	if full {
		hint = fullTreeStepsHint
	}
	r := &compile.Runner{Stage: "driver", Dir: src, Env: compile.Env(opt.Epoch), Log: logw, LogPath: opt.LogFile,
		Meter: progress.New(progressw, "driver compile", "steps", hint), IsStep: isStep}
	args := []string{
		"-C", src, "-j" + strconv.Itoa(max(opt.Jobs, 1)), "modules",
		// The headers tree is both source and output: it is what a
		// linux-headers package holds, a built tree with no separate objdir.
		"SYSSRC=" + kbuild, "SYSOUT=" + kbuild,
		"NV_KERNEL_MODULES=" + strings.Join(opt.Modules, " "),
		// Keep the scratch directories' paths out of __FILE__ strings and
		// whatever debug info survives: the bytes must not depend on where the
		// stage ran. Kbuild adds KCFLAGS to every module compile and NVIDIA's
		// conftest inherits it, so conftest sees the same flags.
		"KCFLAGS=-ffile-prefix-map=" + src + "=. -ffile-prefix-map=" + kbuild + "=kernel",
		// nvidia-peermem's Kbuild looks for a MLNX_OFED tree under
		// /usr/src/ofa_kernel on the build host and compiles against it when
		// present: a host-dependent build. Point it somewhere that never exists
		// so the module always uses the kernel's own RDMA headers (or none).
		"OFA_DIR=/nonexistent/peerboot-no-ofed",
	}
	if full {
		// The full tree's top-level Makefile first compiles the RM core
		// (src/nvidia -> nv-kernel.o) and nvidia-modeset's core, then runs the
		// same kbuild in kernel-open/ (command-line variables reach the
		// sub-makes). The core embeds "(user@host) date" in its id string
		// (/proc/driver/nvidia/version); pin all three to the build clock.
		// utils.mk reads WHOAMI and HOSTNAME up to 570 and NV_BUILD_USER and
		// NV_BUILD_HOST from 580 on (595.45.04 built with only the old names
		// read "(root@<build host>)"); pass both sets.
		args = append(args,
			"WHOAMI=echo peerboot", "HOSTNAME=peerboot",
			"NV_BUILD_USER=peerboot", "NV_BUILD_HOST=peerboot",
			"DATE=date -u -d @"+strconv.FormatInt(opt.Epoch, 10))
	}
	if err := r.Run(ctx, "compile", "make", args...); err != nil {
		return nil, err
	}
	r.Meter.Done()

	res := &Result{Release: release}
	var built []string
	for _, m := range opt.Modules {
		ko := filepath.Join(kdir, m+".ko")
		if _, err := os.Stat(ko); err != nil {
			return nil, fmt.Errorf("driver build finished but did not produce %s.ko; see %s", m, opt.LogFile)
		}
		rel := ModulePath(release, m)
		dst := filepath.Join(out, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		// Debug info is most of nvidia.ko (~185 MB unstripped) and nothing on a
		// booted node reads it; --strip-debug keeps the symbol table the module
		// loader and depmod need, as the kernel's INSTALL_MOD_STRIP=1 does.
		if err := r.Run(ctx, "strip", "strip", "--strip-debug", "-o", dst, ko); err != nil {
			return nil, err
		}
		built = append(built, dst)
		res.Modules = append(res.Modules, rel)
	}

	if err := Check(ctx, kout, release, built); err != nil {
		return nil, err
	}
	return res, nil
}

// IsFullTree reports whether src is NVIDIA's whole open-gpu-kernel-modules tree
// (kernel-open/ plus the RM core sources under src/nvidia), as a git source of
// github.com/NVIDIA/open-gpu-kernel-modules unpacks, rather than the kernel-open
// tree alone with prebuilt core objects that Debian's nvidia-open-kernel-source
// ships. Patches for a full tree name paths from its root (a/kernel-open/...,
// a/src/nvidia/...).
func IsFullTree(src string) bool {
	for _, f := range []string{"kernel-open/Kbuild", "src/nvidia/Makefile"} {
		if _, err := os.Stat(filepath.Join(src, f)); err != nil {
			return false
		}
	}
	return true
}

// isStep counts kbuild's lines and NVIDIA's conftest lines (" CONFTEST: ioremap_wc"):
// the conftests are a good part of the build's time.
func isStep(line string) bool {
	return strings.HasPrefix(line, " CONFTEST: ") || compile.KbuildStep(line) || nvCoreStep(line)
}

// nvCoreStep counts the quiet lines of NVIDIA's own makefiles (utils.mk), which
// build the full tree's RM and modeset cores: " [ nvidia             ]  CC  src/...".
func nvCoreStep(line string) bool {
	if !strings.HasPrefix(line, " [ ") {
		return false
	}
	_, rest, ok := strings.Cut(line, "]")
	if !ok {
		return false
	}
	f := strings.Fields(rest)
	if len(f) < 2 {
		return false
	}
	switch f[0] {
	case "CC", "CXX", "LD", "LINK":
		return true
	}
	return false
}
