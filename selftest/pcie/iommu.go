package pcie

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// IOMMU modes (selftest.IOMMU.Mode).
const (
	IOMMUOff         = "off"         // no IOMMU unit registered
	IOMMUPassthrough = "passthrough" // identity domains: bus addresses are physical
	IOMMUTranslated  = "translated"  // DMA domains: peer BAR1 addresses must be mapped
	IOMMUMixed       = "mixed"       // GPU groups disagree
)

// scanIOMMU reads the units, each GPU's group type and the command line, and settles
// the mode from the GPUs' groups, which is what their peer traffic goes through.
func scanIOMMU(root string, gpus []selftest.GPU) selftest.IOMMU {
	io := selftest.IOMMU{Units: []string{}, Cmdline: []string{}, GroupTypes: make([]string, len(gpus))}
	if entries, err := os.ReadDir(filepath.Join(root, "sys", "class", "iommu")); err == nil {
		for _, e := range entries {
			io.Units = append(io.Units, e.Name())
		}
		sort.Strings(io.Units)
	}
	io.Active = len(io.Units) > 0
	if b, err := os.ReadFile(filepath.Join(root, "proc", "cmdline")); err == nil {
		io.Cmdline = IOMMUParams(string(b))
	}
	groups := filepath.Join(root, "sys", "kernel", "iommu_groups")
	var types []string
	for i, g := range gpus {
		if g.IOMMUGroup >= 0 {
			io.GroupTypes[i] = readTrim(filepath.Join(groups, strconv.Itoa(g.IOMMUGroup)), "type")
			types = append(types, io.GroupTypes[i])
		}
	}
	if len(gpus) == 0 { // nothing to ask about: the groups that exist stand for the box
		if entries, err := os.ReadDir(groups); err == nil {
			for _, e := range entries {
				types = append(types, readTrim(filepath.Join(groups, e.Name()), "type"))
			}
		}
	}
	io.Mode = iommuMode(root, io.Active, types, io.Cmdline)
	return io
}

// iommuMode: no unit is off; otherwise the group types decide, and without them (a
// kernel before 5.11 has no type file) the command line's passthrough switches do.
// "" means it cannot be told, e.g. sysfs is not mounted at all.
func iommuMode(root string, active bool, types, cmdline []string) string {
	if !active {
		if _, err := os.Stat(filepath.Join(root, "sys", "class")); err != nil {
			return ""
		}
		return IOMMUOff
	}
	var identity, translated bool
	for _, t := range types {
		switch t {
		case "identity":
			identity = true
		case "DMA", "DMA-FQ", "unmanaged", "blocked": // unmanaged: owned by VFIO, still translated
			translated = true
		}
	}
	switch {
	case identity && translated:
		return IOMMUMixed
	case identity:
		return IOMMUPassthrough
	case translated:
		return IOMMUTranslated
	}
	mode := ""
	for _, p := range cmdline { // later parameters win, as in the kernel
		switch p {
		case "iommu=pt", "iommu.passthrough=1", "iommu.passthrough=on", "iommu.passthrough=y":
			mode = IOMMUPassthrough
		case "iommu=nopt", "iommu.passthrough=0", "iommu.passthrough=off", "iommu.passthrough=n":
			mode = IOMMUTranslated
		}
	}
	return mode
}

// IOMMUParams picks the kernel parameters that shape IOMMU and ACS behaviour out of a
// command line: any whose name mentions iommu (intel_iommu=, amd_iommu=, iommu=,
// iommu.passthrough=, iommu.strict=, ...), pci= options that mention acs
// (disable_acs_redir=, config_acs=) and pcie_acs_override= from out-of-tree kernels.
// Parameters after "--" belong to init and are skipped.
func IOMMUParams(cmdline string) []string {
	out := []string{}
	for _, p := range splitCmdline(cmdline) {
		if p == "--" {
			break
		}
		name, value, _ := strings.Cut(p, "=")
		name = strings.ReplaceAll(strings.ToLower(name), "-", "_") // the kernel treats - and _ alike
		switch {
		case strings.Contains(name, "iommu"),
			name == "pcie_acs_override",
			name == "pci" && strings.Contains(strings.ToLower(value), "acs"):
			out = append(out, p)
		}
	}
	return out
}

// splitCmdline splits on blanks outside double quotes, keeping the quotes, so a
// quoted value with spaces stays one parameter as the kernel parses it.
func splitCmdline(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
