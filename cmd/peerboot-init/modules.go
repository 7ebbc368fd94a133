package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// moduleLoader inserts one module file with a parameter string.
type moduleLoader interface {
	Load(path, params string) error
}

// finitLoader is the real loader: finit_module(2) on the open file, so the kernel reads
// (and, with MODULE_SIG, checks) the bytes itself.
type finitLoader struct{}

func (finitLoader) Load(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if compressedModule(path) {
		flags |= unix.MODULE_INIT_COMPRESSED_FILE // needs CONFIG_MODULE_DECOMPRESS
	}
	if err := unix.FinitModule(int(f.Fd()), params, flags); err != nil {
		return fmt.Errorf("finit_module %s: %w", path, err)
	}
	return nil
}

// moduleExts are the module file suffixes a kernel may load (compressed ones through
// MODULE_INIT_COMPRESSED_FILE).
func moduleExts() []string { return []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} }

func compressedModule(path string) bool { return !strings.HasSuffix(path, ".ko") }

// modName is the kernel's spelling of a module name: nvidia-uvm.ko registers as nvidia_uvm.
func modName(s string) string {
	base := filepath.Base(s)
	for _, ext := range moduleExts() {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.ReplaceAll(base, "-", "_")
}

// modIndex knows where each module of /lib/modules/<release> is and what it needs.
// modules.dep is the authority for in-tree modules; out-of-tree ones that depmod never
// saw are found by walking the tree and their needs read from their own .modinfo.
type modIndex struct {
	dir     string
	path    map[string]string   // module name -> file relative to dir
	deps    map[string][]string // from modules.dep, in its order (deepest last)
	builtin map[string]bool     // modules.builtin: in the kernel image, nothing to load
}

func loadModIndex(dir string) (*modIndex, error) {
	ix := &modIndex{dir: dir, path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.dep")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			file, rest, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			name := modName(file)
			ix.path[name] = file
			var deps []string
			for _, d := range strings.Fields(rest) {
				deps = append(deps, modName(d))
				if _, seen := ix.path[modName(d)]; !seen {
					ix.path[modName(d)] = d
				}
			}
			ix.deps[name] = deps
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			ix.builtin[modName(l)] = true
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable corner of the tree must not hide the rest
		}
		if d.IsDir() || !isModuleFile(p) {
			return nil
		}
		name := modName(p)
		if _, ok := ix.path[name]; !ok {
			rel, _ := filepath.Rel(dir, p)
			ix.path[name] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexing %s: %w", dir, err)
	}
	return ix, nil
}

func isModuleFile(p string) bool {
	for _, ext := range moduleExts() {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// dependsOf returns what name needs loaded first, nearest last: modules.dep's list if
// depmod knew the module, else the "depends=" of the file's .modinfo.
func (ix *modIndex) dependsOf(name string) []string {
	if d, ok := ix.deps[name]; ok {
		return d
	}
	rel, ok := ix.path[name]
	if !ok || compressedModule(rel) {
		return nil
	}
	return modinfoDepends(filepath.Join(ix.dir, rel))
}

// modinfoDepends reads "depends=a,b" from a module's .modinfo section.
func modinfoDepends(path string) []string {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var out []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					out = append(out, modName(d))
				}
			}
			return out
		}
	}
	return nil
}

// loadOrder is name's dependency closure, dependencies first, each once, name last.
func (ix *modIndex) loadOrder(name string) []string {
	var order []string
	seen := map[string]bool{}
	var visit func(n string, depth int)
	visit = func(n string, depth int) {
		if seen[n] || depth > 64 {
			return
		}
		seen[n] = true
		deps := ix.dependsOf(n)
		// modules.dep lists the deepest dependency last; load from the end.
		for i := len(deps) - 1; i >= 0; i-- {
			visit(deps[i], depth+1)
		}
		order = append(order, n)
	}
	visit(name, 0)
	return order
}

// moduleRun loads the recipe's modules in order and records every attempt.
type moduleRun struct {
	ix     *modIndex
	loader moduleLoader
	klog   kernelLog
	out    []selftest.Module
	state  map[string]string // module name -> result of its attempt
}

// loadModules loads each recipe module after its dependencies. A module whose
// dependency did not load is skipped, not attempted: its own error would only repeat
// the dependency's. The nvidia-* modules are taken to need nvidia even when neither
// modules.dep nor .modinfo says so (a compressed out-of-tree module).
func loadModules(ix *modIndex, loader moduleLoader, klog kernelLog, modules []string, params map[string]map[string]string) []selftest.Module {
	run := &moduleRun{ix: ix, loader: loader, klog: klog, out: []selftest.Module{}, state: map[string]string{}}
	for _, m := range modules {
		name := modName(m)
		order := ix.loadOrder(name)
		if name != "nvidia" && strings.HasPrefix(name, "nvidia_") && !contains(order, "nvidia") {
			order = append([]string{"nvidia"}, order...)
		}
		// A dependency that already failed rules the module out before anything more
		// is inserted for it; otherwise dependencies load in order until one fails.
		failed := ""
		for _, dep := range order[:len(order)-1] {
			if res, ok := run.state[dep]; ok && res != selftest.ModLoaded {
				failed = dep
				break
			}
		}
		for _, dep := range order[:len(order)-1] {
			if failed != "" {
				break
			}
			if res := run.ensure(dep, m); res != selftest.ModLoaded {
				failed = dep
			}
		}
		if failed != "" {
			run.record(selftest.Module{Name: m, Params: paramString(params[m]), Result: selftest.ModSkipped,
				Error: fmt.Sprintf("%s not loaded", displayName(failed, modules)), KernelLog: []string{}})
			run.state[name] = selftest.ModSkipped
			continue
		}
		run.state[name] = run.attempt(m, name, paramString(params[m]), "")
	}
	return run.out
}

// ensure loads a dependency once and returns its result.
func (r *moduleRun) ensure(name, requiredBy string) string {
	if res, ok := r.state[name]; ok {
		return res
	}
	if r.ix.builtin[name] {
		r.state[name] = selftest.ModLoaded
		return selftest.ModLoaded
	}
	res := r.attempt(name, name, "", requiredBy)
	r.state[name] = res
	return res
}

// attempt inserts one module and records the result with the kernel's messages.
func (r *moduleRun) attempt(display, name, params, requiredBy string) string {
	m := selftest.Module{Name: display, RequiredBy: requiredBy, Params: params}
	rel, ok := r.ix.path[name]
	if !ok {
		m.Result, m.Errno = selftest.ModError, int(unix.ENOENT)
		m.Error = fmt.Sprintf("%s.ko not found under %s", display, r.ix.dir)
		m.KernelLog = []string{}
		r.record(m)
		return m.Result
	}
	m.File = rel
	r.klog.Drain() // what came before belongs to someone else
	err := r.loader.Load(filepath.Join(r.ix.dir, rel), params)
	m.KernelLog = r.klog.Drain()
	var errno unix.Errno
	switch {
	case err == nil:
		m.Result = selftest.ModLoaded
	case errors.As(err, &errno) && errno == unix.EEXIST:
		m.Result, m.Error = selftest.ModLoaded, "already loaded"
	case errors.As(err, &errno) && errno == unix.ENODEV:
		m.Result, m.Errno, m.Error = selftest.ModENODEV, int(errno), errno.Error()
	case errors.As(err, &errno):
		m.Result, m.Errno, m.Error = selftest.ModError, int(errno), unix.ErrnoName(errno)+": "+errno.Error()
	default:
		m.Result, m.Error = selftest.ModError, err.Error()
	}
	r.record(m)
	return m.Result
}

func (r *moduleRun) record(m selftest.Module) { r.out = append(r.out, m) }

// displayName spells a module as the recipe does when it is one of the recipe's.
func displayName(name string, recipeModules []string) string {
	for _, m := range recipeModules {
		if modName(m) == name {
			return m
		}
	}
	return name
}

// paramString renders parameters as finit_module wants them, sorted for a stable report.
func paramString(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p[k]
	}
	return strings.Join(parts, " ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
