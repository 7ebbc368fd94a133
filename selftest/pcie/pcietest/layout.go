// Package pcietest writes fake sysfs and proc trees of GPU boxes for tests: real
// directories, the kernel's relative symlinks, attribute files as the kernel prints
// them and real configuration-space bytes. A Layout is plain data, so a test takes
// Xeon8GPU or EPYC4GPU, changes a field (an ACS bit, a link, a BAR1 size, the IOMMU
// mode, the command line) and builds the faulty box.
//
// It does not import package pcie on purpose: it encodes registers from the PCIe
// specification on its own, so a test that parses what it wrote cross-checks both.
package pcietest

import "fmt"

// PCIe port types (PCIe capability flags bits 4..7).
const (
	RootPort   = 0x4
	SwitchUp   = 0x5
	SwitchDown = 0x6
)

// ACS control and capability bits.
const (
	ACSSV = 0x01 // source validation
	ACSTB = 0x02 // translation blocking
	ACSRR = 0x04 // P2P request redirect
	ACSCR = 0x08 // P2P completion redirect
	ACSUF = 0x10 // upstream forwarding
	ACSEC = 0x20 // P2P egress control
	ACSDT = 0x40 // direct translated P2P
)

// Vendor and device ids the constructors use. The bridge ids are representative of
// the parts named, for realism only; nothing reads meaning into them.
const (
	VendorNVIDIA   = 0x10de
	VendorIntel    = 0x8086
	VendorAMD      = 0x1022
	VendorBroadcom = 0x1000 // PEX880xx Gen4 switches
	VendorASPEED   = 0x1a03
	VendorSamsung  = 0x144d

	DeviceRTX4090      = 0x2684
	DeviceRTX4090Audio = 0x22ba
	DevicePEX880xx     = 0xc010
	DeviceSPRRootPort  = 0x352a
	DeviceRomeGPPPort  = 0x1483
	DeviceAST2x00VGA   = 0x2000
	DeviceSamsungNVMe  = 0xa80a
)

// Layout is a whole box.
type Layout struct {
	Roots   []Root   // host bridges (root buses)
	Bridges []Bridge // root ports and switch ports
	GPUs    []GPU    // each also gets its HD-audio function at .1, as real cards have
	Others  []Device // endpoints that are not NVIDIA GPUs (BMC VGA, NVMe)
	IOMMU   IOMMU
	Cmdline string // /proc/cmdline, without the newline
	// ConfigSize is how many bytes each config file holds: 0 means 4096, what root
	// reads; 64 is what a process without CAP_SYS_ADMIN gets.
	ConfigSize int
}

// Root is a host bridge, sys/devices/pciDDDD:BB; every device below it gets its
// NUMA node (-1: none).
type Root struct {
	Name string // "pci0000:17"
	NUMA int
}

// Bridge is a root port or a switch port.
type Bridge struct {
	BDF    string // "0000:19:08.0"
	Parent string // a Root's Name or another Bridge's BDF
	Type   int    // RootPort, SwitchUp, SwitchDown
	Vendor uint16
	Device uint16
	Link   Link // the link this port's PCIe capability reports
	// ACSCap 0: no ACS capability at all. ACSCtrl holds the enabled bits (ACS*).
	ACSCap  uint16
	ACSCtrl uint16
}

// GPU is an NVIDIA GPU (function 0) with its audio function.
type GPU struct {
	BDF    string // function 0, "0000:1b:00.0"
	Parent string // the port above it
	Device uint16 // 0 means DeviceRTX4090
	Class  uint32 // 0 means 0x030000 (VGA)
	Link   Link
	BAR1   int64 // bytes, a power of two of at least 1 MiB
	// GroupType overrides IOMMU.GroupType for this GPU's group ("identity", "DMA").
	GroupType string
}

// Device is any other endpoint.
type Device struct {
	BDF    string
	Parent string
	Vendor uint16
	Device uint16
	Class  uint32
	Link   Link
}

// Link is a PCIe link in register codes: speed 1..6 = 2.5, 5, 8, 16, 32, 64 GT/s
// (0: unknown), width in lanes.
type Link struct {
	Speed    int // trained now (LNKSTA, current_link_*)
	Width    int
	MaxSpeed int // capable of (LNKCAP, max_link_*)
	MaxWidth int
}

// Gen4x16 is a healthy RTX 4090 link.
var Gen4x16 = Link{Speed: 4, Width: 16, MaxSpeed: 4, MaxWidth: 16}

// IOMMU is the translation state. No units means no IOMMU driver is active: no groups
// are written then.
type IOMMU struct {
	Units []string // sys/class/iommu entries: dmar0.. on Intel, ivhd0.. on AMD
	// GroupType is every group's default domain type ("identity", "DMA", "DMA-FQ");
	// "" writes no type file, as kernels before 5.11 do.
	GroupType string
}

// Bridge returns the bridge with that BDF, nil if there is none, for tests to change.
func (l *Layout) Bridge(bdf string) *Bridge {
	for i := range l.Bridges {
		if l.Bridges[i].BDF == bdf {
			return &l.Bridges[i]
		}
	}
	return nil
}

// GPU returns the GPU with that BDF, nil if there is none.
func (l *Layout) GPU(bdf string) *GPU {
	for i := range l.GPUs {
		if l.GPUs[i].BDF == bdf {
			return &l.GPUs[i]
		}
	}
	return nil
}

// Train sets the trained speed and width of the link above device bdf (a GPU, another
// endpoint or a bridge), on both of its ends: the device and the port it hangs from,
// since sysfs shows one physical link from both sides. Max values stay.
func (l *Layout) Train(bdf string, speed, width int) error {
	var parent string
	switch {
	case l.GPU(bdf) != nil:
		g := l.GPU(bdf)
		g.Link.Speed, g.Link.Width, parent = speed, width, g.Parent
	case l.Bridge(bdf) != nil:
		b := l.Bridge(bdf)
		b.Link.Speed, b.Link.Width, parent = speed, width, b.Parent
	default:
		found := false
		for i := range l.Others {
			if l.Others[i].BDF == bdf {
				l.Others[i].Link.Speed, l.Others[i].Link.Width, parent = speed, width, l.Others[i].Parent
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no device %s in the layout", bdf)
		}
	}
	// A switch upstream port's own link is the one above it, not the one below.
	if p := l.Bridge(parent); p != nil && p.Type != SwitchUp {
		p.Link.Speed, p.Link.Width = speed, width
	}
	return nil
}

// Xeon8GPU is Platform A: two Xeon sockets, four RTX 4090 48 GB cards per socket
// (BAR1 32 GiB, Gen4 x16), two per Broadcom PEX880xx switch, each switch on its own
// root port and host bridge (one IIO stack each):
//
//	socket 0 (numa 0): pci0000:17 17:00.0 > 18:00.0 > 19:00.0 > GPU 1a:00.0
//	                                                > 19:08.0 > GPU 1b:00.0
//	                   pci0000:38 38:00.0 > 39:00.0 > 3a:00.0 > GPU 3b:00.0
//	                                                > 3a:08.0 > GPU 3c:00.0
//	socket 1 (numa 1): pci0000:98 (GPUs 9b, 9c) and pci0000:b8 (GPUs bb, bc) alike
//
// so pairs on one switch are PIX, on two switches of one socket NODE (different host
// bridges, same node) and across sockets SYS. The kernel was asked to clear ACS
// redirect on the switch ports (pci=disable_acs_redir=pci:1000:c010); root ports keep
// the RR/CR that intel_iommu=on turns on. Groups are translated (DMA-FQ). An ASPEED
// BMC VGA (not NVIDIA) sits on pci0000:00.
func Xeon8GPU() Layout {
	l := Layout{
		Roots: []Root{{"pci0000:00", 0}, {"pci0000:17", 0}, {"pci0000:38", 0}, {"pci0000:98", 1}, {"pci0000:b8", 1}},
		IOMMU: IOMMU{Units: []string{"dmar0", "dmar1", "dmar2", "dmar3", "dmar4"}, GroupType: "DMA-FQ"},
		Cmdline: "console=ttyS0,115200 panic=-1 intel_iommu=on " +
			"pci=disable_acs_redir=pci:1000:c010 nvidia.NVreg_EnableResizableBar=1",
	}
	l.Bridges = append(l.Bridges, Bridge{BDF: "0000:00:1c.0", Parent: "pci0000:00", Type: RootPort,
		Vendor: VendorIntel, Device: DeviceSPRRootPort, Link: Link{1, 1, 1, 1}})
	l.Others = append(l.Others, Device{BDF: "0000:01:00.0", Parent: "0000:00:1c.0",
		Vendor: VendorASPEED, Device: DeviceAST2x00VGA, Class: 0x030000, Link: Link{1, 1, 1, 1}})
	for _, s := range []int{0x17, 0x38, 0x98, 0xb8} {
		rp := bdf(s, 0, 0)
		usp := bdf(s+1, 0, 0)
		l.Bridges = append(l.Bridges,
			Bridge{BDF: rp, Parent: fmt.Sprintf("pci0000:%02x", s), Type: RootPort, Vendor: VendorIntel,
				Device: DeviceSPRRootPort, Link: Gen4x16, ACSCap: 0x5f, ACSCtrl: ACSSV | ACSRR | ACSCR | ACSUF},
			Bridge{BDF: usp, Parent: rp, Type: SwitchUp, Vendor: VendorBroadcom, Device: DevicePEX880xx, Link: Gen4x16})
		for i, dev := range []int{0x00, 0x08} {
			dsp := bdf(s+2, dev, 0)
			l.Bridges = append(l.Bridges, Bridge{BDF: dsp, Parent: usp, Type: SwitchDown, Vendor: VendorBroadcom,
				Device: DevicePEX880xx, Link: Gen4x16, ACSCap: 0x7f, ACSCtrl: ACSSV | ACSUF})
			l.GPUs = append(l.GPUs, GPU{BDF: bdf(s+3+i, 0, 0), Parent: dsp, Link: Gen4x16, BAR1: 32 << 30})
		}
	}
	return l
}

// EPYC4GPU is Platform B: one EPYC 7002 socket in NPS1 (numa 0), four RTX 4090 48 GB
// cards (BAR1 32 GiB, Gen4 x16), each on a root port of its own host bridge:
//
//	pci0000:00 00:01.1 > GPU 01:00.0
//	pci0000:20 20:01.1 > GPU 21:00.0   (20:03.1 > NVMe 22:00.0)
//	pci0000:40 40:01.1 > GPU 41:00.0
//	pci0000:60 60:01.1 > GPU 61:00.0
//
// so every pair is NODE. AMD-Vi is on in passthrough (identity groups) and ACS
// redirect is off on the root ports.
func EPYC4GPU() Layout {
	l := Layout{
		IOMMU: IOMMU{Units: []string{"ivhd0", "ivhd1", "ivhd2", "ivhd3"}, GroupType: "identity"},
		Cmdline: "console=ttyS0,115200 panic=-1 amd_iommu=on iommu=pt " +
			"pci=disable_acs_redir=pci:1022:1483 nvidia.NVreg_EnableResizableBar=1",
	}
	for _, s := range []int{0x00, 0x20, 0x40, 0x60} {
		root := fmt.Sprintf("pci0000:%02x", s)
		rp := bdf(s, 1, 1)
		l.Roots = append(l.Roots, Root{root, 0})
		l.Bridges = append(l.Bridges, Bridge{BDF: rp, Parent: root, Type: RootPort, Vendor: VendorAMD,
			Device: DeviceRomeGPPPort, Link: Gen4x16, ACSCap: 0x5f, ACSCtrl: ACSSV | ACSUF})
		l.GPUs = append(l.GPUs, GPU{BDF: bdf(s+1, 0, 0), Parent: rp, Link: Gen4x16, BAR1: 32 << 30})
	}
	l.Bridges = append(l.Bridges, Bridge{BDF: "0000:20:03.1", Parent: "pci0000:20", Type: RootPort, Vendor: VendorAMD,
		Device: DeviceRomeGPPPort, Link: Link{4, 4, 4, 4}, ACSCap: 0x5f, ACSCtrl: ACSSV | ACSUF})
	l.Others = append(l.Others, Device{BDF: "0000:22:00.0", Parent: "0000:20:03.1", Vendor: VendorSamsung,
		Device: DeviceSamsungNVMe, Class: 0x010802, Link: Link{4, 4, 4, 4}})
	return l
}

func bdf(bus, dev, fn int) string { return fmt.Sprintf("0000:%02x:%02x.%d", bus, dev, fn) }
