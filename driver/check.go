package driver

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/kernel"
)

// Check runs every post-build check on the built modules (paths of .ko files):
// vermagic, symbol resolution against the kernel's Module.symvers, and depmod on
// the kernel's module tree with the modules added. A module that fails any of
// them would be refused by the kernel at boot, far from the build that made it.
func Check(ctx context.Context, kernelOut, release string, mods []string) error {
	for _, m := range mods {
		if err := CheckVermagic(m, release); err != nil {
			return err
		}
	}
	symversPath := filepath.Join(kernelOut, kernel.BuildDir, "Module.symvers")
	f, err := os.Open(symversPath)
	if err != nil {
		return fmt.Errorf("reading the kernel's exported symbols: %w", err)
	}
	defer f.Close()
	if err := CheckSymbols(mods, f); err != nil {
		return err
	}
	return CheckDepmod(ctx, kernelOut, release, mods)
}

// moduleName is how errors name a module: its file name without .ko.
func moduleName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".ko")
}

// Modinfo reads a module's .modinfo section: NUL-separated key=value strings.
// A key may repeat (alias, import_ns, depends), so every value is kept in order.
func Modinfo(path string) (map[string][]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: not a readable ELF object: %w", moduleName(path), err)
	}
	defer f.Close()
	return modinfo(f, path)
}

func modinfo(f *elf.File, path string) (map[string][]string, error) {
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("module %s has no .modinfo section: not a kernel module", moduleName(path))
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("module %s: reading .modinfo: %w", moduleName(path), err)
	}
	info := map[string][]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok {
			info[k] = append(info[k], v)
		}
	}
	return info, nil
}

// CheckVermagic checks that the module at path was built for the kernel release:
// the kernel refuses a module whose vermagic does not start with its own release.
func CheckVermagic(path, release string) error {
	info, err := Modinfo(path)
	if err != nil {
		return err
	}
	vm := info["vermagic"]
	if len(vm) == 0 {
		return fmt.Errorf("module %s has no vermagic: it was not built by kbuild and the kernel will refuse it", moduleName(path))
	}
	if !strings.HasPrefix(vm[0], release+" ") {
		got, _, _ := strings.Cut(vm[0], " ")
		return fmt.Errorf("module %s was built for kernel %q, not %q (vermagic %q): the kernel will refuse to load it",
			moduleName(path), got, release, vm[0])
	}
	return nil
}

// Export is one line of a Module.symvers file.
type Export struct {
	CRC       string
	Module    string // "vmlinux" or the path of the in-tree module exporting it
	Type      string // EXPORT_SYMBOL or EXPORT_SYMBOL_GPL
	Namespace string // "" outside a symbol namespace
}

// ParseSymvers reads a Module.symvers file: crc, symbol, module, export type and
// namespace, tab-separated (the namespace column may be empty or absent).
func ParseSymvers(r io.Reader) (map[string]Export, error) {
	exports := map[string]Export{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r") // a file edited on Windows
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) < 4 || len(f) > 5 || f[1] == "" {
			//lint:ignore ST1005 Module.symvers is a file name
			return nil, fmt.Errorf("Module.symvers line %d: want crc, symbol, module, export type and namespace separated by tabs, got %q", n, line)
		}
		e := Export{CRC: f[0], Module: f[2], Type: f[3]}
		if len(f) == 5 {
			e.Namespace = f[4]
		}
		exports[f[1]] = e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading Module.symvers: %w", err)
	}
	return exports, nil
}

// notImported are undefined symbols the module loader does not resolve from
// exports: the linker's GOT anchor and powerpc's TOC base are handled by the
// arch relocation code, and __this_module comes from the module's own .mod.o.
var notImported = map[string]bool{"_GLOBAL_OFFSET_TABLE_": true, ".TOC.": true, "__this_module": true}

// gplCompatible mirrors the kernel's license_is_gpl_compatible(): only these
// licenses may use EXPORT_SYMBOL_GPL symbols.
var gplCompatible = map[string]bool{"GPL": true, "GPL v2": true, "GPL and additional rights": true,
	"Dual BSD/GPL": true, "Dual MIT/GPL": true, "Dual MPL/GPL": true}

type moduleSyms struct {
	name      string
	undefined []string
	exports   []string
	license   string
	importNS  map[string]bool
}

func readModuleSyms(path string) (*moduleSyms, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("module %s: not a readable ELF object: %w", moduleName(path), err)
	}
	defer f.Close()
	info, err := modinfo(f, path)
	if err != nil {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("module %s: reading the symbol table: %w", moduleName(path), err)
	}
	m := &moduleSyms{name: moduleName(path), importNS: map[string]bool{}}
	if l := info["license"]; len(l) > 0 {
		m.license = l[0]
	}
	for _, ns := range info["import_ns"] {
		m.importNS[ns] = true
	}
	for _, s := range syms {
		switch elf.ST_TYPE(s.Info) {
		case elf.STT_FILE, elf.STT_SECTION:
			continue
		}
		if s.Name == "" {
			continue
		}
		if s.Section == elf.SHN_UNDEF {
			// An unresolved weak reference loads as 0; the loader accepts it.
			if elf.ST_BIND(s.Info) == elf.STB_GLOBAL && !notImported[s.Name] {
				m.undefined = append(m.undefined, s.Name)
			}
			continue
		}
		// EXPORT_SYMBOL(x) emits a __ksymtab_x entry; it stays in the symbol
		// table after --strip-debug, so it works on stripped modules too.
		if sym, ok := strings.CutPrefix(s.Name, "__ksymtab_"); ok && sym != "" {
			m.exports = append(m.exports, sym)
		}
	}
	return m, nil
}

// CheckSymbols checks that every symbol the modules (paths of .ko files) import
// is exported by the kernel (symvers, its Module.symvers) or by one of the
// modules themselves, that namespaced symbols' namespaces are imported, and that
// GPL-only symbols are used only by GPL-compatible modules: the kernel refuses to
// load a module that breaks any of these.
func CheckSymbols(mods []string, symvers io.Reader) error {
	kexp, err := ParseSymvers(symvers)
	if err != nil {
		return err
	}
	var all []*moduleSyms
	sibling := map[string]string{} // symbol -> exporting module
	for _, p := range mods {
		m, err := readModuleSyms(p)
		if err != nil {
			return err
		}
		all = append(all, m)
		for _, s := range m.exports {
			sibling[s] = m.name
		}
	}
	var problems []string
	for _, m := range all {
		for _, s := range m.undefined {
			if _, ok := sibling[s]; ok {
				continue
			}
			e, ok := kexp[s]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("module %s needs symbol %s, which neither the kernel nor the other driver modules export", m.name, s))
			case e.Namespace != "" && !m.importNS[e.Namespace]:
				problems = append(problems, fmt.Sprintf("module %s uses %s from namespace %s without MODULE_IMPORT_NS(%s)", m.name, s, e.Namespace, e.Namespace))
			case e.Type == "EXPORT_SYMBOL_GPL" && !gplCompatible[m.license]:
				problems = append(problems, fmt.Sprintf("module %s (license %q) uses GPL-only symbol %s", m.name, m.license, s))
			}
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	const show = 40
	more := ""
	if len(problems) > show {
		more = fmt.Sprintf("\n  ... and %d more", len(problems)-show)
		problems = problems[:show]
	}
	return fmt.Errorf("driver modules would not load on this kernel (a kernel config option they need may be off, or a module they depend on is missing from driver.modules):\n  %s%s",
		strings.Join(problems, "\n  "), more)
}

// CheckDepmod runs the host's depmod over a copy of the kernel stage's module
// tree with the driver modules added where the modules stage will put them, and
// fails on any unresolved symbol it reports: this is the same index the booted
// node will load modules through, so it also catches dependencies between the
// driver modules and the kernel's own modules.
func CheckDepmod(ctx context.Context, kernelOut, release string, mods []string) error {
	depmod, err := findDepmod()
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "peerboot-depmod-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	kmods := filepath.Join(kernelOut, kernel.ModulesDir, "lib", "modules", release)
	dst := filepath.Join(root, "lib", "modules", release)
	if err := linkTree(kmods, dst); err != nil {
		return fmt.Errorf("copying the kernel's modules for depmod: %w", err)
	}
	for _, m := range mods {
		if err := linkOrCopy(m, filepath.Join(root, rootPath(release, moduleName(m)))); err != nil {
			return fmt.Errorf("copying module %s for depmod: %w", moduleName(m), err)
		}
	}
	args := []string{"-a", "-e", "-b", root}
	// With Module.symvers depmod checks symbol CRCs too (when the kernel has
	// CONFIG_MODVERSIONS); System.map only gives it names.
	if p := filepath.Join(kernelOut, kernel.BuildDir, "Module.symvers"); exists(p) {
		args = append(args, "-E", p)
	} else if p := filepath.Join(kernelOut, kernel.SystemMap); exists(p) {
		args = append(args, "-F", p)
	} else {
		return fmt.Errorf("the kernel stage output has neither build/Module.symvers nor %s for depmod", kernel.SystemMap)
	}
	args = append(args, release)
	cmd := exec.CommandContext(ctx, depmod, args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var problems []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "needs unknown symbol") || strings.Contains(line, "disagrees about version of symbol") {
			problems = append(problems, strings.Replace(line, root, "", 1))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("depmod found unresolved symbols in the kernel's and driver's modules:\n  %s", strings.Join(problems, "\n  "))
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("depmod on the kernel's and driver's modules failed: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// findDepmod finds kmod's depmod, which lives in /sbin, often off a user's PATH.
func findDepmod() (string, error) {
	if p, err := exec.LookPath("depmod"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/depmod", "/sbin/depmod"} {
		if exists(p) {
			return p, nil
		}
	}
	return "", errors.New("depmod is not installed (Debian package kmod); the driver stage needs it to check the modules")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// linkTree recreates src under dst: .ko files hard-linked (the tree can be large),
// everything else copied, since depmod rewrites its modules.* index files and
// must not write through a link into the kernel stage's output. Symlinks are
// skipped: build/source links would point outside the tree.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular():
			return nil
		case strings.HasSuffix(path, ".ko"):
			return linkOrCopy(path, target)
		default:
			return fsutil.CopyFile(path, target, 0o644)
		}
	})
}

func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	return fsutil.CopyFile(src, dst, 0o644)
}
