package selftest

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/node/modinfo"
)

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// FillKoVersions sets KoVersion (and KoFile when it was not recorded) of every nvidia*
// module from its .ko under modDir, loaded or not: a module that failed to load still
// says which driver version the image carries.
func FillKoVersions(ms []Module, modDir string) {
	for i := range ms {
		m := &ms[i]
		if !strings.HasPrefix(m.Name, "nvidia") {
			continue
		}
		p := modinfo.FindKo(modDir, m.Name, m.File)
		if p == "" {
			continue
		}
		info, err := modinfo.Read(p)
		if err != nil {
			continue
		}
		m.KoVersion = info["version"]
		if rel, err := filepath.Rel(modDir, p); err == nil && m.File == "" {
			m.File = rel
		}
	}
}

// LibraryFile resolves a library name the way the report wants it named: the file the
// running process has mapped for it (from /proc/self/maps, after dlopen), else the end
// of the symlink chain of the first match in the usual library directories under root.
// "" when neither finds it.
func LibraryFile(root, name string) string {
	if p := mappedLibrary(filepath.Join(root, "proc", "self", "maps"), name); p != "" {
		return p
	}
	dirs := []string{"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib64", "lib64", "usr/lib", "lib"}
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			dirs = append([]string{strings.TrimPrefix(d, "/")}, dirs...)
		}
	}
	for _, d := range dirs {
		p := filepath.Join(root, d, filepath.Base(name))
		if r, err := filepath.EvalSymlinks(p); err == nil && fileExists(r) {
			return r
		}
	}
	return ""
}

// mappedLibrary finds the mapped file of a library: same stem before ".so".
func mappedLibrary(maps, name string) string {
	b, err := os.ReadFile(maps)
	if err != nil {
		return ""
	}
	stem, _, _ := strings.Cut(filepath.Base(name), ".so")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		base := filepath.Base(f[5])
		if s, _, ok := strings.Cut(base, ".so"); ok && s == stem {
			return f[5]
		}
	}
	return ""
}

// LibraryVersion is the version a library's file name carries: "550.163.01" for
// libcuda.so.550.163.01; "" for a bare soname such as libcuda.so.1.
func LibraryVersion(file string) string {
	_, v, ok := strings.Cut(filepath.Base(file), ".so.")
	if !ok || !strings.Contains(v, ".") {
		return ""
	}
	return v
}
