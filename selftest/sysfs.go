package selftest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseResource reads a sysfs "resource" file: one "start end flags" line per resource,
// BARs first. It returns each resource's size (0 for an unassigned one). On NVIDIA GPUs
// BAR1, the VRAM aperture that P2P maps through, is resource 1: the 64-bit BAR0 would
// shift it, but BAR0 is 32-bit on these chips.
func ParseResource(s string) []int64 {
	var sizes []int64
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		start, err1 := strconv.ParseUint(f[0], 0, 64)
		end, err2 := strconv.ParseUint(f[1], 0, 64)
		if err1 != nil || err2 != nil || end < start || (start == 0 && end == 0) {
			sizes = append(sizes, 0)
			continue
		}
		size := end - start + 1
		if size > 1<<62 { // nonsense from a corrupt file; keep the int64 positive
			size = 0
		}
		sizes = append(sizes, int64(size))
	}
	return sizes
}

// BAR1Size is the size of what NVIDIA calls BAR1, the VRAM aperture peers map: the
// first assigned resource after BAR0. On an RTX 4090 BAR0 is 32-bit, so BAR1 is
// resource line 1; on an H100/H200 BAR0 is 64-bit and takes lines 0 and 1, which moves
// BAR1 to line 2. 0 when there is none.
func BAR1Size(resource string) int64 {
	sizes := ParseResource(resource)
	for i := 1; i < len(sizes) && i < 6; i++ {
		if sizes[i] > 0 {
			return sizes[i]
		}
	}
	return 0
}

// LoadedModules reports, for a box not booted by peerboot-init, which of names
// the running kernel already has (from /sys/module/<name>), with their version and
// the parameters they hold now.
func LoadedModules(sysModule string, names []string) []Module {
	var out []Module
	for _, n := range names {
		dir := filepath.Join(sysModule, n)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		m := Module{Name: strings.ReplaceAll(n, "_", "-"), Result: ModLoaded}
		if v, err := os.ReadFile(filepath.Join(dir, "version")); err == nil {
			m.Version = strings.TrimSpace(string(v))
		}
		m.Parameters = moduleParameters(filepath.Join(dir, "parameters"))
		out = append(out, m)
	}
	return out
}

// moduleParameters reads /sys/module/<name>/parameters: one file per parameter, its
// current value inside. Parameters declared write-only (mode 0200) or that fail to
// read are left out; nil when the module has no parameters directory.
func moduleParameters(dir string) map[string]string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	params := map[string]string{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		params[e.Name()] = strings.TrimSpace(string(b))
	}
	return params
}
