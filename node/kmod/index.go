// Package kmod finds and loads kernel modules the way the peerboot init needs: the
// module index of /lib/modules/<release> (modules.dep, modules.builtin, and the
// out-of-tree modules depmod never saw), each module after its dependencies in one
// fixed order, by finit_module(2), and modules.alias matched against a device's
// modalias. It is ours rather than u-root's pkg/kmodule: that one (v0.16.0) gave
// three different load orders in 200 dry runs, used init_module instead of
// finit_module, and dropped the ignore-vermagic flag.
package kmod

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Exts are the module file suffixes a kernel may load (compressed ones through
// MODULE_INIT_COMPRESSED_FILE).
func Exts() []string { return []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} }

// Compressed says whether the kernel must decompress the file (CONFIG_MODULE_DECOMPRESS).
func Compressed(path string) bool { return !strings.HasSuffix(path, ".ko") }

// Name is the kernel's spelling of a module name: nvidia-uvm.ko registers as nvidia_uvm.
func Name(s string) string {
	base := filepath.Base(s)
	for _, ext := range Exts() {
		base = strings.TrimSuffix(base, ext)
	}
	return strings.ReplaceAll(base, "-", "_")
}

// Index knows where each module of /lib/modules/<release> is and what it needs.
// modules.dep is the authority for in-tree modules; out-of-tree ones that depmod never
// saw are found by walking the tree and their needs read from their own .modinfo.
type Index struct {
	Dir     string
	path    map[string]string   // module name -> file relative to Dir
	deps    map[string][]string // from modules.dep, in its order (deepest last)
	builtin map[string]bool     // modules.builtin: in the kernel image, nothing to load
}

// EmptyIndex knows no module: every load through it is "not found under dir".
func EmptyIndex(dir string) *Index {
	return &Index{Dir: dir, path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
}

// LoadIndex reads modules.dep and modules.builtin (either may be missing) and walks dir.
func LoadIndex(dir string) (*Index, error) {
	ix := EmptyIndex(dir)
	if b, err := os.ReadFile(filepath.Join(dir, "modules.dep")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			file, rest, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			name := Name(file)
			ix.path[name] = file
			var deps []string
			for _, d := range strings.Fields(rest) {
				deps = append(deps, Name(d))
				if _, seen := ix.path[Name(d)]; !seen {
					ix.path[Name(d)] = d
				}
			}
			ix.deps[name] = deps
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			ix.builtin[Name(l)] = true
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // an unreadable corner of the tree must not hide the rest
		}
		if d.IsDir() || !isModuleFile(p) {
			return nil
		}
		name := Name(p)
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
	for _, ext := range Exts() {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// dependsOf returns what name needs loaded first, nearest last: modules.dep's list if
// depmod knew the module, else the "depends=" of the file's .modinfo.
func (ix *Index) dependsOf(name string) []string {
	if d, ok := ix.deps[name]; ok {
		return d
	}
	rel, ok := ix.path[name]
	if !ok || Compressed(rel) {
		return nil
	}
	return modinfoDepends(filepath.Join(ix.Dir, rel))
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
					out = append(out, Name(d))
				}
			}
			return out
		}
	}
	return nil
}

// LoadOrder is name's dependency closure, dependencies first, each once, name last.
func (ix *Index) LoadOrder(name string) []string {
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
