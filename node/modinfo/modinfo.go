// Package modinfo reads a kernel module's .modinfo (the "key=value" strings
// modinfo(8) prints) from its .ko, an ELF object, loaded or not, and finds a
// module's .ko under /lib/modules/<release>: what the self-test reports as the
// driver version an image carries.
package modinfo

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Parse splits a kernel module's .modinfo section: NUL-separated "key=value"
// strings (modinfo(8) reads the same). Repeated keys (alias, depends on some builds)
// keep their first value; entries without "=" and empty ones are skipped.
func Parse(sec []byte) map[string]string {
	out := map[string]string{}
	for _, e := range bytes.Split(sec, []byte{0}) {
		k, v, ok := bytes.Cut(e, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		if _, seen := out[string(k)]; !seen {
			out[string(k)] = string(v)
		}
	}
	return out
}

// Read reads the .modinfo of a .ko file, loaded or not. Compressed modules
// (.ko.xz, .ko.zst, .ko.gz) are refused with an error naming the file: peerboot's
// images carry plain .ko files.
func Read(path string) (map[string]string, error) {
	if !strings.HasSuffix(path, ".ko") {
		return nil, fmt.Errorf("reading modinfo of %s: not an uncompressed .ko", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading modinfo of %s: %w", path, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("reading modinfo of %s: no .modinfo section", path)
	}
	b, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("reading modinfo of %s: %w", path, err)
	}
	return Parse(b), nil
}

// FindKo finds module name's .ko under modDir (/lib/modules/<release>): rel, the path
// the init recorded, first; else DKMS's updates/ tree, then the whole tree. Module
// names match with - and _ alike, as modprobe does. "" when there is none.
func FindKo(modDir, name, rel string) string {
	if rel != "" {
		if p := filepath.Join(modDir, rel); fileExists(p) {
			return p
		}
	}
	want := map[string]bool{strings.ReplaceAll(name, "-", "_") + ".ko": true, strings.ReplaceAll(name, "_", "-") + ".ko": true}
	for _, dir := range []string{filepath.Join(modDir, "updates"), modDir} {
		found := ""
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || found != "" {
				return filepath.SkipDir
			}
			if !d.IsDir() && want[d.Name()] {
				found = p
				return filepath.SkipAll
			}
			return nil
		})
		if found != "" {
			return found
		}
	}
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
