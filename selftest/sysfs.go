package selftest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// NVIDIAVendor is NVIDIA's PCI vendor id as sysfs spells it.
const NVIDIAVendor = "0x10de"

// ScanGPUs lists NVIDIA VGA (0x0300xx) and 3D (0x0302xx) controllers under
// pciDevices (normally /sys/bus/pci/devices), sorted by BDF. It needs no driver, so it
// is the one GPU count that does not depend on the thing under test. Audio and USB
// functions of the same cards are skipped by the class check.
func ScanGPUs(pciDevices string) ([]GPU, error) {
	entries, err := os.ReadDir(pciDevices)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return []GPU{}, nil // no PCI bus at all (some VMs): zero GPUs, not an error
		}
		return nil, fmt.Errorf("scanning GPUs: %w", err)
	}
	gpus := []GPU{}
	for _, e := range entries {
		dir := filepath.Join(pciDevices, e.Name())
		vendor := readTrim(dir, "vendor")
		class := readTrim(dir, "class")
		if !strings.EqualFold(vendor, NVIDIAVendor) || !isGPUClass(class) {
			continue
		}
		g := GPU{
			BDF:    e.Name(),
			Vendor: strings.ToLower(vendor),
			Device: strings.ToLower(readTrim(dir, "device")),
			Class:  strings.ToLower(class),
			Link: Link{
				CurrentSpeed: readTrim(dir, "current_link_speed"),
				MaxSpeed:     readTrim(dir, "max_link_speed"),
				CurrentWidth: atoiOr(readTrim(dir, "current_link_width"), 0),
				MaxWidth:     atoiOr(readTrim(dir, "max_link_width"), 0),
			},
			NUMANode: atoiOr(readTrim(dir, "numa_node"), -1),
		}
		if res, err := os.ReadFile(filepath.Join(dir, "resource")); err == nil {
			g.BAR1Bytes = BAR1Size(string(res))
		}
		gpus = append(gpus, g)
	}
	sort.Slice(gpus, func(i, j int) bool { return gpus[i].BDF < gpus[j].BDF })
	return gpus, nil
}

// isGPUClass accepts "0x0300xx" (VGA) and "0x0302xx" (3D controller, headless SKUs).
func isGPUClass(class string) bool {
	c := strings.ToLower(class)
	return len(c) == 8 && (strings.HasPrefix(c, "0x0300") || strings.HasPrefix(c, "0x0302"))
}

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

func readTrim(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
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
