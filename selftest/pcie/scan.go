// Package pcie is the self-test's pre-checks from sysfs: the NVIDIA GPUs on the PCI
// bus, their links and BAR1 sizes, the bridges between every pair with their ACS
// state, the topology class of each pair, and the IOMMU mode. It reads files only, so
// it answers before (and without) the NVIDIA driver. Package pcietest builds fake
// sysfs trees for its tests and for fault tests elsewhere.
package pcie

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// Result is what Scan found.
type Result struct {
	GPUs  []selftest.GPU  `json:"gpus"`  // sorted by BDF
	Pairs []selftest.Pair `json:"pairs"` // every unordered pair, A < B, in (A, B) order
	IOMMU selftest.IOMMU  `json:"iommu"`
}

var (
	bdfRE     = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	rootBusRE = regexp.MustCompile(`^pci[0-9a-f]{4,8}:[0-9a-f]{2}$`)
)

// Scan reads, under root (normally "/"), sys/bus/pci/devices and the device tree the
// entries link to, sys/class/iommu, sys/kernel/iommu_groups and proc/cmdline. A box
// without a PCI bus gives zero GPUs, not an error; files that cannot be read leave
// their fields at zero values (-1 for numbers where 0 is meaningful).
func Scan(root string) (*Result, error) {
	if root == "" {
		root = "/"
	}
	// Resolved once, so device paths (which the kernel links relative to sys/) can be
	// split into components below the root, whatever links lead to root itself.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("reading the PCI tree under %s: %w", root, err)
	}
	devices := filepath.Join(realRoot, "sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(devices)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	r := &Result{GPUs: []selftest.GPU{}, Pairs: []selftest.Pair{}}
	for _, e := range entries {
		if g, ok := scanGPU(realRoot, filepath.Join(devices, e.Name()), e.Name()); ok {
			r.GPUs = append(r.GPUs, g)
		}
	}
	sort.Slice(r.GPUs, func(i, j int) bool { return r.GPUs[i].BDF < r.GPUs[j].BDF })
	for i := range r.GPUs {
		for j := i + 1; j < len(r.GPUs); j++ {
			r.Pairs = append(r.Pairs, pairOf(r.GPUs, i, j))
		}
	}
	r.IOMMU = scanIOMMU(realRoot, r.GPUs)
	return r, nil
}

// IsGPUClass accepts VGA (0x0300xx) and 3D controllers (0x0302xx, headless SKUs);
// the cards' audio function (0x0403xx) is not a GPU.
func IsGPUClass(class string) bool {
	c := strings.ToLower(class)
	return len(c) == 8 && (strings.HasPrefix(c, "0x0300") || strings.HasPrefix(c, "0x0302"))
}

func scanGPU(realRoot, dir, bdf string) (selftest.GPU, bool) {
	vendor := strings.ToLower(readTrim(dir, "vendor"))
	class := strings.ToLower(readTrim(dir, "class"))
	if vendor != nvidiaVendor || !IsGPUClass(class) {
		return selftest.GPU{}, false
	}
	g := selftest.GPU{
		BDF:        bdf,
		Vendor:     vendor,
		Device:     strings.ToLower(readTrim(dir, "device")),
		Class:      class,
		NUMANode:   atoiOr(readTrim(dir, "numa_node"), -1),
		Link:       readLink(dir),
		Upstream:   []selftest.Bridge{},
		IOMMUGroup: iommuGroup(dir),
	}
	if res, err := os.ReadFile(filepath.Join(dir, "resource")); err == nil {
		g.BAR1Bytes = selftest.BAR1Size(string(res))
	}
	g.RootBus, g.Upstream = upstream(realRoot, dir)
	return g, true
}

// upstream resolves the device's sysfs link, e.g.
// sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:08.0/0000:1b:00.0, into its
// host bridge (the last pciDDDD:BB component, so a VMD domain nested below another
// device counts as its own root) and the bridges below it, root port first.
func upstream(realRoot, dir string) (string, []selftest.Bridge) {
	bridges := []selftest.Bridge{}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", bridges
	}
	rel, err := filepath.Rel(realRoot, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", bridges // the link leaves the tree we were asked to read
	}
	comps := strings.Split(filepath.ToSlash(rel), "/")
	if len(comps) < 2 {
		return "", bridges
	}
	above := comps[:len(comps)-1] // the last component is the GPU itself
	rootAt := -1
	for i, c := range above {
		if rootBusRE.MatchString(c) {
			rootAt = i
		}
	}
	rootBus := ""
	if rootAt >= 0 {
		rootBus = above[rootAt]
	}
	for i := rootAt + 1; i < len(above); i++ {
		if !bdfRE.MatchString(above[i]) {
			continue
		}
		bdir := filepath.Join(append([]string{realRoot}, above[:i+1]...)...)
		bridges = append(bridges, readBridge(bdir, above[i]))
	}
	return rootBus, bridges
}

// readBridge reads a port's link files and its ACS registers from config space. ACS
// stays nil when config space shows no ACS capability, including the 64-byte read a
// non-root process gets.
func readBridge(dir, bdf string) selftest.Bridge {
	br := selftest.Bridge{BDF: bdf, Link: readLink(dir)}
	if b, err := os.ReadFile(filepath.Join(dir, "config")); err == nil {
		if cfg, err := ParseConfig(b); err == nil {
			br.ACS = cfg.ACS
		}
	}
	return br
}

func readLink(dir string) selftest.Link {
	return selftest.Link{
		CurrentSpeed: readTrim(dir, "current_link_speed"),
		MaxSpeed:     readTrim(dir, "max_link_speed"),
		CurrentWidth: atoiOr(readTrim(dir, "current_link_width"), 0),
		MaxWidth:     atoiOr(readTrim(dir, "max_link_width"), 0),
	}
}

// iommuGroup is the number the iommu_group link points at, -1 without one.
func iommuGroup(dir string) int {
	target, err := os.Readlink(filepath.Join(dir, "iommu_group"))
	if err != nil {
		return -1
	}
	return atoiOr(filepath.Base(target), -1)
}

// pairOf classifies GPUs i and j by their deepest common ancestor, nvidia-smi's way:
// a common bridge with one port below it on each side is one switch (PIX), a deeper
// split is several switches (PXB); the same host bridge with no common port is PHB;
// different host bridges are NODE on one NUMA node (or when neither knows its node)
// and SYS otherwise, including when only one side knows, since the farther class is
// the one that changes what NCCL does.
func pairOf(gpus []selftest.GPU, i, j int) selftest.Pair {
	a, b := gpus[i], gpus[j]
	p := selftest.Pair{A: i, B: j, Path: []string{}, ACSOn: []string{}}
	sameRoot := a.RootBus != "" && a.RootBus == b.RootBus
	k := 0 // bridges shared from the root port down
	if sameRoot {
		for k < len(a.Upstream) && k < len(b.Upstream) && a.Upstream[k].BDF == b.Upstream[k].BDF {
			k++
		}
	}
	switch {
	case sameRoot && k > 0 && len(a.Upstream)-k <= 1 && len(b.Upstream)-k <= 1:
		p.Topology = selftest.TopoPIX
	case sameRoot && k > 0:
		p.Topology = selftest.TopoPXB
	case sameRoot:
		p.Topology = selftest.TopoPHB
	case a.NUMANode == b.NUMANode:
		p.Topology = selftest.TopoNODE
	default:
		p.Topology = selftest.TopoSYS
	}
	var path []selftest.Bridge
	for x := len(a.Upstream) - 1; x >= k; x-- { // up from A
		path = append(path, a.Upstream[x])
	}
	for x := k; x < len(b.Upstream); x++ { // down to B
		path = append(path, b.Upstream[x])
	}
	for _, br := range path {
		p.Path = append(p.Path, br.BDF)
		if br.ACS.Redirects() {
			p.ACSOn = append(p.ACSOn, br.BDF)
		}
	}
	return p
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

// nvidiaVendor is NVIDIA's PCI vendor id as sysfs spells it.
const nvidiaVendor = "0x10de"
