package pcietest

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
)

var (
	bdfRE  = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	rootRE = regexp.MustCompile(`^pci[0-9a-f]{4}:[0-9a-f]{2}$`)
)

// speedNames are the kernel's strings for link speed codes (pci_speed_string).
var speedNames = map[int]string{1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
	4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

func speedName(code int) string {
	if s, ok := speedNames[code]; ok {
		return s
	}
	return "Unknown"
}

// Resource flags as sysfs prints them (linux/ioport.h plus the BAR's low bits).
const (
	flagMem32   = 0x00040200 // memory, size-aligned
	flagMem64PF = 0x0014220c // 64-bit, prefetchable
	flagIO      = 0x00040101
	flagROM     = 0x00046200 // read-only, prefetchable
	flagWinIO   = 0x00000101
	flagWinMem  = 0x00000200
	flagWinPref = 0x00102201
)

type bar struct{ start, size, flags uint64 }

const (
	kindBridge = iota
	kindGPU
	kindAudio
	kindOther
)

type node struct {
	bdf, parent string
	kind        int
	bridge      *Bridge
	gpu         *GPU
	other       *Device
	link        Link
	path        string // below dir: sys/devices/pci0000:17/.../<bdf>
	numa        int
	bars        [7]bar // BAR0..5 and the ROM
	group       int    // -1: none
	children    []*node
}

// Build writes l as a sysfs and proc tree under dir: sys/devices/pciDDDD:BB/...,
// sys/bus/pci/devices links, sys/class/iommu, sys/kernel/iommu_groups and
// proc/cmdline. It refuses a dir that has anything in it, so a mistaken path cannot
// mix a fixture into real files.
func Build(dir string, l Layout) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("building the fake sysfs: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("building the fake sysfs: %s is not empty", dir)
	}
	nodes, err := plan(l)
	if err != nil {
		return fmt.Errorf("building the fake sysfs: %w", err)
	}
	w := writer{dir: dir}
	for _, r := range l.Roots {
		w.mkdir(filepath.Join("sys", "devices", r.Name))
	}
	w.mkdir(filepath.Join("sys", "bus", "pci", "devices"))
	w.mkdir(filepath.Join("sys", "class", "iommu")) // present, empty, when no IOMMU runs
	for _, n := range nodes {
		w.device(n, l.ConfigSize)
	}
	w.iommu(l.IOMMU, nodes)
	w.mkdir("proc")
	w.file(filepath.Join("proc", "cmdline"), l.Cmdline+"\n")
	return w.err
}

// plan checks the layout and works out each device's path, NUMA node, BARs and IOMMU
// group, sorted by BDF.
func plan(l Layout) ([]*node, error) {
	roots := map[string]Root{}
	for _, r := range l.Roots {
		if !rootRE.MatchString(r.Name) {
			return nil, fmt.Errorf("root %q is not named like pci0000:00", r.Name)
		}
		roots[r.Name] = r
	}
	byBDF := map[string]*node{}
	var nodes []*node
	add := func(n *node) error {
		if !bdfRE.MatchString(n.bdf) {
			return fmt.Errorf("device %q is not a lower-case DDDD:BB:DD.F address", n.bdf)
		}
		if byBDF[n.bdf] != nil {
			return fmt.Errorf("device %s is in the layout twice", n.bdf)
		}
		byBDF[n.bdf] = n
		nodes = append(nodes, n)
		return nil
	}
	for i := range l.Bridges {
		b := &l.Bridges[i]
		if err := add(&node{bdf: b.BDF, parent: b.Parent, kind: kindBridge, bridge: b, link: b.Link}); err != nil {
			return nil, err
		}
	}
	for i := range l.GPUs {
		g := l.GPUs[i] // a copy, defaults filled
		if g.Device == 0 {
			g.Device = DeviceRTX4090
		}
		if g.Class == 0 {
			g.Class = 0x030000
		}
		if g.BAR1 < 1<<20 || g.BAR1&(g.BAR1-1) != 0 {
			return nil, fmt.Errorf("GPU %s: BAR1 of %d bytes is not a power of two of at least 1 MiB", g.BDF, g.BAR1)
		}
		if !strings.HasSuffix(g.BDF, ".0") {
			return nil, fmt.Errorf("GPU %s: give function 0, the audio function takes .1", g.BDF)
		}
		if err := add(&node{bdf: g.BDF, parent: g.Parent, kind: kindGPU, gpu: &g, link: g.Link}); err != nil {
			return nil, err
		}
		audio := strings.TrimSuffix(g.BDF, ".0") + ".1"
		if err := add(&node{bdf: audio, parent: g.Parent, kind: kindAudio, link: g.Link}); err != nil {
			return nil, err
		}
	}
	for i := range l.Others {
		d := &l.Others[i]
		if err := add(&node{bdf: d.BDF, parent: d.Parent, kind: kindOther, other: d, link: d.Link}); err != nil {
			return nil, err
		}
	}
	for _, n := range nodes {
		if err := resolve(n, byBDF, roots, 0); err != nil {
			return nil, err
		}
		if p := byBDF[n.parent]; p != nil {
			if p.kind != kindBridge {
				return nil, fmt.Errorf("device %s hangs from %s, which is not a bridge", n.bdf, n.parent)
			}
			p.children = append(p.children, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].bdf < nodes[j].bdf })
	assignBARs(nodes)
	group := 0
	for _, n := range nodes {
		n.group = -1
		if len(l.IOMMU.Units) == 0 {
			continue
		}
		if n.kind == kindAudio { // shares function 0's group, which sorts just before it
			n.group = byBDF[strings.TrimSuffix(n.bdf, ".1")+".0"].group
			continue
		}
		n.group = group
		group++
	}
	return nodes, nil
}

// resolve sets n.path and n.numa from its parent chain; depth guards against cycles.
func resolve(n *node, byBDF map[string]*node, roots map[string]Root, depth int) error {
	if n.path != "" {
		return nil
	}
	if depth > len(byBDF) {
		return fmt.Errorf("device %s: its parents form a loop", n.bdf)
	}
	if r, ok := roots[n.parent]; ok {
		n.path = filepath.Join("sys", "devices", r.Name, n.bdf)
		n.numa = r.NUMA
		return nil
	}
	p := byBDF[n.parent]
	if p == nil {
		return fmt.Errorf("device %s: parent %q is neither a root nor a bridge in the layout", n.bdf, n.parent)
	}
	if err := resolve(p, byBDF, roots, depth+1); err != nil {
		return err
	}
	n.path = filepath.Join(p.path, n.bdf)
	n.numa = p.numa
	return nil
}

// assignBARs places each GPU's BARs without overlap: BAR0 (16 MiB) and the ROM below
// 4 GiB, BAR1 and BAR3 in a 64-bit slot aligned to the slot size, BAR5 in I/O space.
// Other endpoints get one 1 MiB BAR0.
func assignBARs(nodes []*node) {
	slot := uint64(64 << 30)
	for _, n := range nodes {
		for n.kind == kindGPU && uint64(n.gpu.BAR1)*2 > slot {
			slot <<= 1
		}
	}
	var gpu, other uint64
	var audioBase = map[string]uint64{}
	for _, n := range nodes {
		switch n.kind {
		case kindGPU:
			low := 0x90000000 + gpu*0x02000000
			high := 0x200000000000 + gpu*slot
			n.bars[0] = bar{low, 16 << 20, flagMem32}
			n.bars[1] = bar{high, uint64(n.gpu.BAR1), flagMem64PF}
			n.bars[3] = bar{high + slot/2, 32 << 20, flagMem64PF}
			n.bars[5] = bar{0x3000 + gpu*0x1000, 128, flagIO}
			n.bars[6] = bar{low + 16<<20, 512 << 10, flagROM}
			audioBase[n.bdf] = low + 17<<20
			gpu++
		case kindAudio:
			n.bars[0] = bar{audioBase[strings.TrimSuffix(n.bdf, ".1")+".0"], 16 << 10, flagMem32}
		case kindOther:
			n.bars[0] = bar{0xc0000000 + other*(1<<20), 1 << 20, flagMem32}
			other++
		}
	}
}

// windows spans every BAR below bridge n, by kind: I/O, 32-bit memory (with ROMs),
// 64-bit prefetchable. A window with hi < lo is closed.
func windows(n *node) (io, mem, pref window) {
	io, mem, pref = window{lo: ^uint64(0)}, window{lo: ^uint64(0)}, window{lo: ^uint64(0)}
	widen := func(w *window, lo, hi uint64) {
		w.lo, w.hi = min(w.lo, lo), max(w.hi, hi)
	}
	var walk func(*node)
	walk = func(c *node) {
		for _, b := range c.bars {
			if b.size == 0 {
				continue
			}
			end := b.start + b.size - 1
			switch b.flags {
			case flagIO:
				widen(&io, b.start&^0xfff, end|0xfff)
			case flagMem64PF:
				widen(&pref, b.start&^0xfffff, end|0xfffff)
			default:
				widen(&mem, b.start&^0xfffff, end|0xfffff)
			}
		}
		for _, k := range c.children {
			walk(k)
		}
	}
	for _, k := range n.children {
		walk(k)
	}
	return
}

// busRange is the secondary and subordinate bus of bridge n: the bus its children
// sit on and the highest bus below it.
func busRange(n *node) (int, int) {
	own := busNum(n.bdf)
	if len(n.children) == 0 {
		return own + 1, own + 1
	}
	sec, sub := 0xff, 0
	var walk func(*node)
	walk = func(c *node) {
		sub = max(sub, busNum(c.bdf))
		for _, k := range c.children {
			walk(k)
		}
	}
	for _, k := range n.children {
		sec = min(sec, busNum(k.bdf))
		walk(k)
	}
	return sec, sub
}

func busNum(bdf string) int {
	v, _ := strconv.ParseUint(bdf[5:7], 16, 8)
	return int(v)
}

func devNum(bdf string) int {
	v, _ := strconv.ParseUint(bdf[8:10], 16, 8)
	return int(v)
}

// writer keeps the first error, so the many small writes read as a list.
type writer struct {
	dir string
	err error
}

func (w *writer) mkdir(rel string) {
	if w.err == nil {
		w.err = os.MkdirAll(filepath.Join(w.dir, rel), 0o755)
	}
}

func (w *writer) file(rel, content string) {
	if w.err == nil {
		w.err = os.WriteFile(filepath.Join(w.dir, rel), []byte(content), 0o644)
	}
}

// symlink makes rel point at target (both below dir) with a relative link, as the
// kernel's are, so the tree can be moved or read under any root.
func (w *writer) symlink(target, rel string) {
	if w.err != nil {
		return
	}
	from := filepath.Dir(filepath.Join(w.dir, rel))
	to, err := filepath.Rel(from, filepath.Join(w.dir, target))
	if err != nil {
		w.err = err
		return
	}
	w.err = os.Symlink(to, filepath.Join(w.dir, rel))
}

func (w *writer) device(n *node, configSize int) {
	w.mkdir(n.path)
	at := func(name string) string { return filepath.Join(n.path, name) }
	var vendor, device uint16
	var class uint32
	var config cfg
	var res strings.Builder // BAR0..5, ROM, six SR-IOV BARs; bridges add four windows
	for _, b := range n.bars {
		res.WriteString(resLine(b.start, b.size, b.flags))
	}
	for i := 7; i < 13; i++ {
		res.WriteString(resLine(0, 0, 0))
	}
	switch n.kind {
	case kindGPU:
		vendor, device, class = VendorNVIDIA, n.gpu.Device, n.gpu.Class
		config = gpuConfig(*n.gpu, n.bars)
		w.file(at("resource1_resize"), fmt.Sprintf("%016x\n", sizeMask(6, max(15, sizeCode(n.bars[1].size)))))
	case kindAudio:
		vendor, device, class = VendorNVIDIA, DeviceRTX4090Audio, 0x040300
		config = audioConfig(n.link, n.bars[0].start)
	case kindOther:
		vendor, device, class = n.other.Vendor, n.other.Device, n.other.Class
		config = otherConfig(*n.other, n.bars[0].start)
	case kindBridge:
		b := n.bridge
		vendor, device, class = b.Vendor, b.Device, 0x060400
		sec, sub := busRange(n)
		io, mem, pref := windows(n)
		config = bridgeConfig(*b, busNum(n.bdf), sec, sub, io, mem, pref)
		w.file(at("secondary_bus_number"), fmt.Sprintf("%d\n", sec))
		w.file(at("subordinate_bus_number"), fmt.Sprintf("%d\n", sub))
		for _, x := range []struct {
			w     window
			flags uint64
		}{{io, flagWinIO}, {mem, flagWinMem}, {pref, flagWinPref}, {window{lo: 1}, 0}} {
			if x.w.hi >= x.w.lo {
				res.WriteString(resLine(x.w.lo, x.w.hi-x.w.lo+1, x.flags))
			} else {
				res.WriteString(resLine(0, 0, 0))
			}
		}
	}
	w.file(at("vendor"), fmt.Sprintf("0x%04x\n", vendor))
	w.file(at("device"), fmt.Sprintf("0x%04x\n", device))
	w.file(at("class"), fmt.Sprintf("0x%06x\n", class))
	w.file(at("subsystem_vendor"), fmt.Sprintf("0x%04x\n", vendor))
	w.file(at("revision"), "0xa1\n")
	w.file(at("numa_node"), fmt.Sprintf("%d\n", n.numa))
	w.file(at("current_link_speed"), speedName(n.link.Speed)+"\n")
	w.file(at("current_link_width"), fmt.Sprintf("%d\n", n.link.Width))
	w.file(at("max_link_speed"), speedName(n.link.MaxSpeed)+"\n")
	w.file(at("max_link_width"), fmt.Sprintf("%d\n", n.link.MaxWidth))
	w.file(at("resource"), res.String())
	size := configSize
	if size <= 0 || size > cfgSize {
		size = cfgSize
	}
	w.file(at("config"), string(config[:size]))
	w.symlink(n.path, filepath.Join("sys", "bus", "pci", "devices", n.bdf))
}

// resLine is one line of a resource file; an unused resource is all zeros.
func resLine(start, size, flags uint64) string {
	if size == 0 {
		start, flags = 0, 0
	}
	end := uint64(0)
	if size > 0 {
		end = start + size - 1
	}
	return fmt.Sprintf("0x%016x 0x%016x 0x%016x\n", start, end, flags)
}

// iommu writes the units (links into devices/virtual/iommu, as the kernel has them)
// and one group per device with its devices/ links, type file and the devices'
// iommu_group links.
func (w *writer) iommu(io IOMMU, nodes []*node) {
	for _, u := range io.Units {
		w.mkdir(filepath.Join("sys", "devices", "virtual", "iommu", u))
		w.symlink(filepath.Join("sys", "devices", "virtual", "iommu", u), filepath.Join("sys", "class", "iommu", u))
	}
	if len(io.Units) == 0 {
		return
	}
	typed := map[int]string{}
	for _, n := range nodes {
		if n.group < 0 {
			continue
		}
		g := filepath.Join("sys", "kernel", "iommu_groups", strconv.Itoa(n.group))
		w.mkdir(filepath.Join(g, "devices"))
		w.symlink(n.path, filepath.Join(g, "devices", n.bdf))
		w.symlink(g, filepath.Join(n.path, "iommu_group"))
		t := io.GroupType
		if n.kind == kindGPU && n.gpu.GroupType != "" {
			t = n.gpu.GroupType
		}
		if _, done := typed[n.group]; !done && t != "" {
			typed[n.group] = t
			w.file(filepath.Join(g, "type"), t+"\n")
		}
	}
}
