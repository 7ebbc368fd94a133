package kernel

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/compile"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/patch"
	"github.com/peerboot/peerboot/progress"
)

// Version is the kernel stage's version: bump it when this code changes its output.
const Version = 4 // 2: readable build timestamp; 3: host tools with the prefix map; 4: objtool without debug info and build id

// Options is everything the kernel stage reads.
type Options struct {
	Source    string     // unpacked kernel tree (modified in place)
	Base      string     // "tinyconfig" or "x86_64_defconfig"
	Fragments []Fragment // merged in order
	Patches   []Fragment // applied in order
	// ModuleSigCert is the PEM text of the certificate(s) the kernel's built-in
	// keyring trusts for module signatures; nil builds a kernel with signature
	// support and no key. Never a generated key: that would make every build
	// different.
	ModuleSigCert []byte
	Epoch         int64 // SOURCE_DATE_EPOCH
	Jobs          int
	Log           io.Writer // progress lines
	LogFile       string    // full make output
	ObjectsHint   int64     // compile steps of a previous build, for the ETA; 0 if unknown
}

// Result describes a built kernel.
type Result struct {
	Release string
	Steps   int64 // compile steps counted, the next build's ObjectsHint
}

// Output layout, relative to the stage output directory.
const (
	ImageFile   = "bzImage"
	SystemMap   = "System.map"
	ConfigFile  = "config"
	ReleaseFile = "release"
	ModulesDir  = "modules" // modules/lib/modules/<release>/
	BuildDir    = "build"   // what out-of-tree modules build against
)

// How the kernel comes to trust the module-signing certificate (read from 6.1's
// certs/Kconfig and certs/Makefile):
//
//   - CONFIG_MODULE_SIG_KEY names a PEM file holding the private key AND the
//     certificate; kbuild extracts the certificate into the built-in keyring and,
//     with MODULE_SIG_ALL, signs every in-tree module with the key during
//     modules_install. Left at its default "certs/signing_key.pem", the build
//     generates a fresh random key when the file is missing, so no two builds
//     would be the same. We set it to "": extract-cert then writes an empty
//     signing_key.x509, nothing is generated and no private key is read.
//   - CONFIG_SYSTEM_TRUSTED_KEYS names a PEM file of certificates only, compiled
//     into the built-in (.builtin_trusted_keys) keyring, which module signature
//     checks use. That is how the module certificate gets in: the kernel stage
//     sees the certificate, never the key; modules are signed later, in the
//     modules stage (MODULE_SIG_ALL stays off, see configs/base.config).
//
// The path is relative to the tree (kbuild runs there), so the scratch
// directory's name stays out of .config.
var signingConfig = []byte("CONFIG_MODULE_SIG_KEY=\"\"\n")

// TrustedCertsFile is where the module certificate is written in the source
// tree, as CONFIG_SYSTEM_TRUSTED_KEYS names it.
const TrustedCertsFile = ".peerboot/trusted-certs.pem"

// Build configures and compiles the kernel in opt.Source and writes the stage
// output to out.
func Build(ctx context.Context, opt Options, out string) (*Result, error) {
	src := opt.Source
	for _, p := range opt.Patches {
		if _, err := patch.Apply(src, p.Name, p.Data); err != nil {
			return nil, err
		}
	}
	logf, err := os.Create(opt.LogFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	m := &compile.Runner{Stage: "kernel", Dir: src, Env: compile.Env(opt.Epoch), Log: logf, LogPath: opt.LogFile, IsStep: compile.KbuildStep}
	mk := func(what string, args ...string) error {
		return m.Run(ctx, what, "make", append([]string{"-C", src}, args...)...)
	}
	// -ffile-prefix-map keeps the scratch directory's path out of every object,
	// including host tools: objtool ships in the build/ tree with debug info.
	prefixMap := "-ffile-prefix-map=" + src + "=."
	if err := mk("config", opt.Base); err != nil {
		return nil, err
	}
	fragDir := filepath.Join(src, ".peerboot")
	if err := os.MkdirAll(fragDir, 0o755); err != nil {
		return nil, err
	}
	all := append(append([]Fragment{}, opt.Fragments...), Fragment{Name: "peerboot-signing.config", Data: signingConfig})
	if opt.ModuleSigCert != nil {
		if err := os.WriteFile(filepath.Join(src, TrustedCertsFile), opt.ModuleSigCert, 0o644); err != nil {
			return nil, err
		}
		all = append(all, Fragment{Name: "peerboot-trusted-keys.config", Data: []byte(fmt.Sprintf("CONFIG_SYSTEM_TRUSTED_KEYS=%q\n", TrustedCertsFile))})
	}
	args := []string{"-m", ".config"}
	for i, f := range all {
		p := filepath.Join(fragDir, fmt.Sprintf("%02d-%s", i, filepath.Base(f.Name)))
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return nil, err
		}
		args = append(args, p)
	}
	if err := m.Run(ctx, "merge", filepath.Join(src, "scripts/kconfig/merge_config.sh"), args...); err != nil {
		return nil, err
	}
	if err := mk("config", "olddefconfig"); err != nil {
		return nil, err
	}
	final, err := os.ReadFile(filepath.Join(src, ".config"))
	if err != nil {
		return nil, err
	}
	if dropped := CheckConfig(all, string(final)); len(dropped) > 0 {
		ExplainDropped(src, dropped)
		var lines []string
		for _, d := range dropped {
			lines = append(lines, "  "+d.String())
		}
		return nil, fmt.Errorf("kernel config: %d fragment options did not survive olddefconfig:\n%s", len(dropped), strings.Join(lines, "\n"))
	}
	jobs := strconv.Itoa(max(opt.Jobs, 1))
	m.Meter = progress.New(opt.Log, "kernel compile", "steps", opt.ObjectsHint)
	if err := mk("compile", "-j"+jobs, "KCFLAGS="+prefixMap, "HOSTCFLAGS="+prefixMap, "bzImage", "modules"); err != nil {
		return nil, err
	}
	m.Meter.Done()
	steps := m.Steps
	m.Meter = nil
	rel, err := m.Output(ctx, "make", "-C", src, "-s", "kernelrelease")
	if err != nil {
		return nil, err
	}
	if err := mk("install", "-j"+jobs, "KCFLAGS="+prefixMap, "HOSTCFLAGS="+prefixMap, "modules_install", "INSTALL_MOD_PATH="+filepath.Join(out, ModulesDir), "INSTALL_MOD_STRIP=1"); err != nil {
		return nil, err
	}
	modDir := filepath.Join(out, ModulesDir, "lib", "modules", rel)
	for _, link := range []string{"build", "source"} { // they point into the scratch tree
		os.Remove(filepath.Join(modDir, link))
	}
	for src2, dst := range map[string]string{
		"arch/x86/boot/bzImage": ImageFile, "System.map": SystemMap, ".config": ConfigFile,
	} {
		if err := fsutil.CopyFile(filepath.Join(src, src2), filepath.Join(out, dst), 0); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(out, ReleaseFile), []byte(rel+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := CopyHeaders(src, filepath.Join(out, BuildDir)); err != nil {
		return nil, fmt.Errorf("copying the module build tree: %w", err)
	}
	return &Result{Release: rel, Steps: steps}, nil
}

// ReadRelease reads the kernel release the kernel stage recorded in out (its
// ReleaseFile): the one reader, for the driver and modules stages.
func ReadRelease(out string) (string, error) {
	b, err := os.ReadFile(filepath.Join(out, ReleaseFile))
	if err != nil {
		return "", fmt.Errorf("reading the kernel release from the kernel stage output: %w", err)
	}
	rel := strings.TrimSpace(string(b))
	if rel == "" || strings.ContainsAny(rel, " /\n") {
		return "", fmt.Errorf("the kernel stage output's %s holds %q, not a kernel release", ReleaseFile, rel)
	}
	return rel, nil
}
