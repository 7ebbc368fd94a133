package pcietest

import "encoding/binary"

// Configuration-space images. Offsets follow the PCI and PCIe specifications (and the
// kernel's pci_regs.h); capability lists are laid out like the real parts', including
// extended lists that do not run in address order.

const cfgSize = 4096

// Standard and extended capability ids.
const (
	capPM     = 0x01
	capMSI    = 0x05
	capVendor = 0x09
	capSSID   = 0x0d
	capPCIe   = 0x10

	extAER       = 0x0001
	extVC        = 0x0002
	extPwrBudget = 0x0004
	extVendor    = 0x000b
	extACS       = 0x000d
	extReBAR     = 0x0015
	extSecPCIe   = 0x0019
	extL1SS      = 0x001e
	extDLF       = 0x0025
	extPL16      = 0x0026
	extMargining = 0x0027
)

type cfg []byte

func newCfg(vendor, device uint16, class uint32, header byte) cfg {
	c := make(cfg, cfgSize)
	c.put16(0x00, vendor)
	c.put16(0x02, device)
	c.put16(0x04, 0x0007) // I/O, memory and bus master enabled, as firmware leaves them
	c.put16(0x06, 0x0010) // capability list present
	c.put32(0x08, class<<8|0xa1)
	c[0x0e] = header
	return c
}

func (c cfg) put16(off int, v uint16) { binary.LittleEndian.PutUint16(c[off:], v) }
func (c cfg) put32(off int, v uint32) { binary.LittleEndian.PutUint32(c[off:], v) }

// caps writes a standard list: each entry is (offset, id); the first goes in the
// capability pointer.
func (c cfg) caps(list ...[2]int) {
	c[0x34] = byte(list[0][0])
	for i, e := range list {
		next := 0
		if i+1 < len(list) {
			next = list[i+1][0]
		}
		c[e[0]] = byte(e[1])
		c[e[0]+1] = byte(next)
	}
}

// extCaps writes an extended list from 0x100 in the order given (offsets need not
// ascend). The header: id, version 1 (2 for AER), next offset in bits 20..31.
func (c cfg) extCaps(list ...[2]int) {
	for i, e := range list {
		next := 0
		if i+1 < len(list) {
			next = list[i+1][0]
		}
		ver := uint32(1)
		if e[1] == extAER {
			ver = 2
		}
		c.put32(e[0], uint32(e[1])|ver<<16|uint32(next)<<20)
	}
}

// pcie fills the PCIe capability at off: flags, LNKCAP, LNKSTA, LNKCAP2. Downstream
// facing ports (root and switch downstream) report a slot and an active data link.
func (c cfg) pcie(off, portType, portNum int, l Link) {
	flags := uint16(2 | portType<<4)
	downstream := portType == RootPort || portType == SwitchDown
	if downstream {
		flags |= 0x0100 // slot implemented
	}
	c.put16(off+2, flags)
	c.put32(off+4, 0x00008fc1) // DEVCAP: 256-byte max payload, role-based error reporting
	lnkcap := uint32(l.MaxSpeed&0xf) | uint32(l.MaxWidth&0x3f)<<4 | 3<<10 | uint32(portNum&0xff)<<24
	lnksta := uint16(l.Speed&0xf) | uint16(l.Width&0x3f)<<4 | 0x1000 // common clock
	if downstream {
		lnkcap |= 1 << 20 // data link layer active reporting
		lnksta |= 0x2000  // data link layer active
	}
	c.put32(off+0x0c, lnkcap)
	c.put16(off+0x12, lnksta)
	if l.MaxSpeed > 0 {
		c.put32(off+0x2c, uint32((1<<l.MaxSpeed)-1)<<1) // supported speeds vector
	}
}

// gpuConfig is an AD102 (RTX 4090) function 0: type-0 header with BAR0 (32-bit),
// BAR1 and BAR3 (64-bit prefetchable), BAR5 (I/O), the expansion ROM, and the caps an
// lspci -vvv of the card shows, down to the Resizable BAR capability at 0xbb0 whose
// BAR1 entry holds the current BAR1 size.
func gpuConfig(g GPU, bars [7]bar) cfg {
	c := newCfg(VendorNVIDIA, g.Device, g.Class, 0x80) // multi-function: audio at .1
	c.put32(0x10, uint32(bars[0].start))
	c.put32(0x14, uint32(bars[1].start)|0x0c) // 64-bit, prefetchable
	c.put32(0x18, uint32(bars[1].start>>32))
	c.put32(0x1c, uint32(bars[3].start)|0x0c)
	c.put32(0x20, uint32(bars[3].start>>32))
	c.put32(0x24, uint32(bars[5].start)|0x01) // I/O space
	c.put16(0x2c, VendorNVIDIA)
	c.put16(0x2e, 0x167c)
	c.put32(0x30, uint32(bars[6].start)) // ROM, disabled
	c[0x3c], c[0x3d] = 0xff, 0x01
	c.caps([2]int{0x60, capPM}, [2]int{0x68, capMSI}, [2]int{0x78, capPCIe}, [2]int{0xb4, capVendor})
	c.put16(0x62, 0x0603)        // PM version 3, D1/D2 no
	c.put16(0x6a, 0x0080)        // MSI: 64-bit address
	c.pcie(0x78, 0x1, 0, g.Link) // GeForce cards report a legacy endpoint
	c.extCaps([2]int{0x100, extVC}, [2]int{0x258, extL1SS}, [2]int{0x128, extPwrBudget},
		[2]int{0x420, extAER}, [2]int{0x600, extVendor}, [2]int{0x900, extSecPCIe},
		[2]int{0xbb0, extReBAR}, [2]int{0xc1c, extPL16}, [2]int{0xd00, extMargining},
		[2]int{0xe00, extDLF})
	// Resizable BAR: two entries, BAR1 (64 MiB .. at least 32 GiB, or its own size)
	// and BAR3 (32 MiB only); the entry count lives in the first control register.
	code1 := sizeCode(bars[1].size)
	c.put32(0xbb0+4, sizeMask(6, max(15, code1))<<4)
	c.put32(0xbb0+8, 1|2<<5|uint32(code1)<<8)
	code3 := sizeCode(bars[3].size)
	c.put32(0xbb0+12, sizeMask(code3, code3)<<4)
	c.put32(0xbb0+16, 3|uint32(code3)<<8)
	return c
}

// audioConfig is the card's HD-audio function (.1).
func audioConfig(l Link, bar0 uint64) cfg {
	c := newCfg(VendorNVIDIA, DeviceRTX4090Audio, 0x040300, 0x80)
	c.put32(0x10, uint32(bar0))
	c.caps([2]int{0x60, capPM}, [2]int{0x68, capMSI}, [2]int{0x78, capPCIe})
	c.put16(0x62, 0x0003)
	c.pcie(0x78, 0x0, 0, l)
	c.extCaps([2]int{0x100, extDLF})
	return c
}

// otherConfig is a plain endpoint with a PCIe capability.
func otherConfig(d Device, bar0 uint64) cfg {
	c := newCfg(d.Vendor, d.Device, d.Class, 0)
	c.put32(0x10, uint32(bar0))
	c.caps([2]int{0x40, capPM}, [2]int{0x50, capMSI}, [2]int{0x70, capPCIe})
	c.put16(0x42, 0x0003)
	c.pcie(0x70, 0x0, 0, d.Link)
	c.extCaps([2]int{0x100, extAER})
	return c
}

// window is a bridge's forwarding range; hi < lo means closed.
type window struct{ lo, hi uint64 }

// bridgeConfig is a type-1 header: bus numbers, the three forwarding windows and the
// port's caps. Root ports and switch ports differ in list layout as the real parts do;
// the ACS capability is there only when the layout gives it one.
func bridgeConfig(b Bridge, primary, secondary, subordinate int, io, mem, pref window) cfg {
	c := newCfg(b.Vendor, b.Device, 0x060400, 0x01)
	c.put16(0x04, 0x0407)
	c[0x18], c[0x19], c[0x1a] = byte(primary), byte(secondary), byte(subordinate)
	c[0x1c], c[0x1d] = 0xf0, 0x00 // closed unless set below
	if io.hi >= io.lo {
		c[0x1c], c[0x1d] = byte(io.lo>>8)&0xf0, byte(io.hi>>8)&0xf0
	}
	c.put16(0x20, 0xfff0)
	if mem.hi >= mem.lo {
		c.put16(0x20, uint16(mem.lo>>16)&0xfff0)
		c.put16(0x22, uint16(mem.hi>>16)&0xfff0)
	}
	c.put16(0x24, 0xfff1) // 64-bit prefetchable window, closed
	c.put16(0x26, 0x0001)
	if pref.hi >= pref.lo {
		c.put16(0x24, uint16(pref.lo>>16)&0xfff0|1)
		c.put16(0x26, uint16(pref.hi>>16)&0xfff0|1)
		c.put32(0x28, uint32(pref.lo>>32))
		c.put32(0x2c, uint32(pref.hi>>32))
	}
	c[0x3c], c[0x3d] = 0xff, 0x01
	portNum := devNum(b.BDF)
	acs := 0
	if b.ACSCap != 0 {
		acs = 0x148
	}
	if b.Type == RootPort {
		c.caps([2]int{0x40, capPCIe}, [2]int{0x80, capMSI}, [2]int{0x90, capSSID}, [2]int{0xa0, capPM})
		c.pcie(0x40, b.Type, portNum, b.Link)
		c.put16(0xa2, 0x0003) // PM version 3
	} else {
		c.put16(0x42, 0x0003)
		c.caps([2]int{0x40, capPM}, [2]int{0x48, capMSI}, [2]int{0x68, capPCIe}, [2]int{0xa4, capSSID})
		c.pcie(0x68, b.Type, portNum, b.Link)
	}
	list := [][2]int{{0x100, extAER}}
	if acs != 0 {
		list = append(list, [2]int{acs, extACS})
	}
	list = append(list, [2]int{0x200, extSecPCIe})
	c.extCaps(list...)
	if acs != 0 {
		c.put16(acs+4, b.ACSCap)
		c.put16(acs+6, b.ACSCtrl)
	}
	return c
}

// sizeCode is n for a size of 2^(n+20) bytes.
func sizeCode(size uint64) int {
	n := 0
	for size > 1<<20 {
		size >>= 1
		n++
	}
	return n
}

// sizeMask has bits lo..hi set.
func sizeMask(lo, hi int) uint32 {
	var m uint32
	for i := lo; i <= hi && i < 28; i++ {
		m |= 1 << i
	}
	return m
}
