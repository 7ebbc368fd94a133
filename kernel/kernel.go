package kernel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/patch"
	"github.com/peerboot/peerboot/progress"
)

// Version is the kernel stage's version: bump it when this code changes its output.
const Version = 1

// Options is everything the kernel stage reads.
type Options struct {
	Source    string     // unpacked kernel tree (modified in place)
	Base      string     // "tinyconfig" or "x86_64_defconfig"
	Fragments []Fragment // merged in order
	Patches   []Fragment // applied in order
	// ModuleSigCert is a PEM certificate the kernel's built-in keyring trusts for
	// module signatures; "" builds a kernel with signature support and no key.
	// Never a generated key: that would make every build different.
	ModuleSigCert string
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

// Env is the environment of every make call: one clock, one identity, C locale.
func Env(epoch int64) []string {
	env := []string{
		"KBUILD_BUILD_TIMESTAMP=@" + strconv.FormatInt(epoch, 10),
		"KBUILD_BUILD_USER=peerboot",
		"KBUILD_BUILD_HOST=peerboot",
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(epoch, 10),
		"LC_ALL=C", "TZ=UTC",
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", "HOME", "TMPDIR":
			env = append(env, kv)
		}
	}
	return env
}

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
	m := &maker{dir: src, env: Env(opt.Epoch), log: logf, progress: opt.Log}
	// -ffile-prefix-map keeps the scratch directory's path out of every object.
	prefixMap := "KCFLAGS=-ffile-prefix-map=" + src + "=."
	if err := m.run(ctx, "config", opt.Base); err != nil {
		return nil, err
	}
	fragDir := filepath.Join(src, ".peerboot")
	if err := os.MkdirAll(fragDir, 0o755); err != nil {
		return nil, err
	}
	sigKey := ""
	if opt.ModuleSigCert != "" {
		sigKey = opt.ModuleSigCert
	}
	all := append(append([]Fragment{}, opt.Fragments...), Fragment{
		Name: "peerboot-signing.config",
		Data: []byte(fmt.Sprintf("CONFIG_MODULE_SIG_KEY=%q\n", sigKey)),
	})
	args := []string{"-m", ".config"}
	for i, f := range all {
		p := filepath.Join(fragDir, fmt.Sprintf("%02d-%s", i, filepath.Base(f.Name)))
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return nil, err
		}
		args = append(args, p)
	}
	if err := m.cmd(ctx, "merge", filepath.Join(src, "scripts/kconfig/merge_config.sh"), args...); err != nil {
		return nil, err
	}
	if err := m.run(ctx, "config", "olddefconfig"); err != nil {
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
	m.meter = progress.New(opt.Log, "kernel compile", "steps", opt.ObjectsHint)
	if err := m.run(ctx, "compile", "-j"+jobs, prefixMap, "bzImage", "modules"); err != nil {
		return nil, err
	}
	m.meter.Done()
	steps := m.steps
	m.meter = nil
	rel, err := m.output(ctx, "-s", "kernelrelease")
	if err != nil {
		return nil, err
	}
	if err := m.run(ctx, "install", "-j"+jobs, "modules_install", "INSTALL_MOD_PATH="+filepath.Join(out, ModulesDir), "INSTALL_MOD_STRIP=1"); err != nil {
		return nil, err
	}
	modDir := filepath.Join(out, ModulesDir, "lib", "modules", rel)
	for _, link := range []string{"build", "source"} { // they point into the scratch tree
		os.Remove(filepath.Join(modDir, link))
	}
	for src2, dst := range map[string]string{
		"arch/x86/boot/bzImage": ImageFile, "System.map": SystemMap, ".config": ConfigFile,
	} {
		if err := copyFile(filepath.Join(src, src2), filepath.Join(out, dst)); err != nil {
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

// maker runs make in the tree, logging everything and keeping the tail for errors.
type maker struct {
	dir      string
	env      []string
	log      io.Writer
	progress io.Writer
	meter    *progress.Meter
	steps    int64
}

func (m *maker) run(ctx context.Context, what string, args ...string) error {
	return m.cmd(ctx, what, "make", append([]string{"-C", m.dir}, args...)...)
}

func (m *maker) output(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "make", append([]string{"-C", m.dir}, args...)...)
	cmd.Env = m.env
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("make %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (m *maker) cmd(ctx context.Context, what, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = m.dir
	cmd.Env = m.env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(m.log, "\n$ %s %s\n", name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return err
	}
	tail := newTail(50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(m.log, line)
			tail.add(line)
			if m.meter != nil && isStep(line) {
				m.steps++
				m.meter.Add(1)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return ctx.Err()
		}
		logPath := ""
		if f, ok := m.log.(*os.File); ok {
			logPath = f.Name()
		}
		return fmt.Errorf("kernel %s step failed (%s %s): %w\nlast lines of output:\n%s\nfull log: %s",
			what, name, strings.Join(args, " "), err, tail.String(), logPath)
	}
	return nil
}

// isStep recognises kbuild's quiet-mode lines ("  CC      kernel/fork.o").
func isStep(line string) bool {
	if len(line) < 4 || line[0] != ' ' || line[1] != ' ' {
		return false
	}
	f := strings.Fields(line)
	if len(f) < 2 {
		return false
	}
	switch f[0] {
	case "CC", "AS", "LD", "AR", "HOSTCC", "HOSTLD":
		return true
	}
	return false
}

type tail struct {
	lines []string
	n     int
}

func newTail(n int) *tail { return &tail{n: n} }
func (t *tail) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[1:]
	}
}
func (t *tail) String() string { return strings.Join(t.lines, "\n") }

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
