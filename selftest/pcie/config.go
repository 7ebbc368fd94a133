package pcie

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/peerboot/peerboot/selftest"
)

// Config-space offsets and ids used below (Linux include/uapi/linux/pci_regs.h).
const (
	cfgVendor        = 0x00
	cfgDevice        = 0x02
	cfgStatus        = 0x06
	cfgClassRev      = 0x08
	cfgHeaderType    = 0x0e
	cfgSecondaryBus  = 0x19
	cfgSubordinate   = 0x1a
	cfgCapPtr        = 0x34 // type 0 and type 1 headers
	cfgCardBusCapPtr = 0x14 // type 2 header
	statusCapList    = 0x0010

	capIDPCIe = 0x10

	extCapStart  = 0x100
	extCapACS    = 0x000d
	extCapReBAR  = 0x0015
	maxCfgSize   = 4096
	minCfgSize   = 64
	stdCapTTL    = 48                       // the kernel's PCI_FIND_CAP_TTL
	extCapTTL    = (maxCfgSize - 0x100) / 8 // the kernel's bound: one header per 8 bytes
	acsRR        = 0x04
	acsCR        = 0x08
	acsEC        = 0x20
	rebarSizeBit = 20 // size bit n (and size code n) means 2^(n+20) bytes
)

// PCIe device/port types (PCIe capability flags bits 4..7).
const (
	PortEndpoint       = 0x0
	PortLegacyEndpoint = 0x1 // what GeForce cards report
	PortRootPort       = 0x4
	PortSwitchUp       = 0x5
	PortSwitchDown     = 0x6
	PortPCIeToPCI      = 0x7
	PortPCIToPCIe      = 0x8
	PortRCEndpoint     = 0x9
	PortRCEventColl    = 0xa
)

// ErrNoDevice means config space reads as all ones: nothing answers at that address
// (a device that fell off the bus reads this way).
var ErrNoDevice = errors.New("no device answers there (vendor id reads 0xffff)")

// Config is what ParseConfig found in a device's configuration space.
type Config struct {
	Vendor     uint16
	Device     uint16
	Class      uint32 // 24 bits: base class, subclass, programming interface
	HeaderType uint8  // 0 endpoint, 1 PCI-PCI bridge, 2 CardBus; the multi-function bit stripped
	MultiFunc  bool
	// Bus numbers behind a bridge (type 1 only).
	SecondaryBus   uint8
	SubordinateBus uint8
	Caps           []Cap         // standard capabilities, in list order
	ExtCaps        []Cap         // extended capabilities, in list order
	PCIe           *PCIeCap      // nil: no PCIe capability (or it lies past the bytes given)
	ACS            *selftest.ACS // nil: no ACS capability in the bytes given
	ReBAR          []ReBAR       // Resizable BAR entries, one per resizable BAR
	// Loop is set when a capability list pointed back into itself or ran past the
	// kernel's hop limit; the walk stopped there and what came before is kept.
	Loop bool
	// Short is set when a pointer led past the bytes given, as it does on the 64 bytes
	// an unprivileged reader gets from sysfs.
	Short bool
}

// Cap is one capability header.
type Cap struct {
	ID      uint16
	Offset  int
	Version uint8 // extended capabilities only
}

// PCIeCap is the PCI Express capability (id 0x10): port type and the link registers.
// Speeds are the register codes 1..6 (2.5, 5, 8, 16, 32, 64 GT/s); 0 when unread.
type PCIeCap struct {
	Offset       int
	Version      int
	PortType     int // Port* constants
	LinkCapSpeed int // LNKCAP: the most this port can do
	LinkCapWidth int
	LinkSpeed    int // LNKSTA: what the link trained to
	LinkWidth    int
}

// ReBAR is one entry of the Resizable BAR capability (extended id 0x15).
type ReBAR struct {
	BAR   int    // BAR index 0..5
	Sizes uint32 // supported sizes, bit n = 2^(n+20) bytes (1 MiB at bit 0)
	Bytes int64  // current size
}

// ParseConfig decodes PCI configuration space as read from sysfs "config": 64 bytes
// for an unprivileged reader, 256 for conventional PCI, 4096 for PCIe. Bytes beyond
// 4096 are ignored. Malformed lists end the walk, never the parse: ParseConfig returns
// what it could read and flags Loop or Short. It errors only when there is no header.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	if len(b) < minCfgSize {
		return c, fmt.Errorf("config space is %d bytes, a header needs %d", len(b), minCfgSize)
	}
	if len(b) > maxCfgSize {
		b = b[:maxCfgSize]
	}
	c.Vendor = le16(b, cfgVendor)
	if c.Vendor == 0xffff {
		return c, ErrNoDevice
	}
	c.Device = le16(b, cfgDevice)
	c.Class = le32(b, cfgClassRev) >> 8
	c.HeaderType = b[cfgHeaderType] & 0x7f
	c.MultiFunc = b[cfgHeaderType]&0x80 != 0

	capPtr := -1
	switch c.HeaderType {
	case 0:
		capPtr = cfgCapPtr
	case 1:
		capPtr = cfgCapPtr
		c.SecondaryBus = b[cfgSecondaryBus]
		c.SubordinateBus = b[cfgSubordinate]
	case 2:
		capPtr = cfgCardBusCapPtr
	}
	if capPtr >= 0 && le16(b, cfgStatus)&statusCapList != 0 {
		c.walkCaps(b, int(b[capPtr]))
	}
	if len(b) >= extCapStart+4 {
		c.walkExtCaps(b)
	}
	return c, nil
}

// walkCaps follows the standard list from ptr. Pointers are dword aligned and below
// 0x40 they would point into the header, which ends the list as it does in the kernel.
func (c *Config) walkCaps(b []byte, ptr int) {
	seen := map[int]bool{}
	for hops := 0; ; hops++ {
		ptr &^= 3
		if ptr < 0x40 {
			return
		}
		if seen[ptr] || hops >= stdCapTTL {
			c.Loop = true
			return
		}
		seen[ptr] = true
		if ptr+2 > len(b) {
			c.Short = true
			return
		}
		id := b[ptr]
		if id == 0xff { // all ones: the rest of the space does not answer
			return
		}
		c.Caps = append(c.Caps, Cap{ID: uint16(id), Offset: ptr})
		if id == capIDPCIe && c.PCIe == nil {
			c.parsePCIe(b, ptr)
		}
		ptr = int(b[ptr+1])
	}
}

// parsePCIe reads flags (+2), LNKCAP (+0x0c) and LNKSTA (+0x12).
func (c *Config) parsePCIe(b []byte, off int) {
	if off+0x14 > len(b) {
		c.Short = true
		return
	}
	flags := le16(b, off+2)
	lnkcap := le32(b, off+0x0c)
	lnksta := le16(b, off+0x12)
	c.PCIe = &PCIeCap{
		Offset:       off,
		Version:      int(flags & 0xf),
		PortType:     int(flags>>4) & 0xf,
		LinkCapSpeed: int(lnkcap & 0xf),
		LinkCapWidth: int(lnkcap>>4) & 0x3f,
		LinkSpeed:    int(lnksta & 0xf),
		LinkWidth:    int(lnksta>>4) & 0x3f,
	}
}

// walkExtCaps follows the extended list from 0x100: id bits 0..15, version 16..19,
// next offset bits 20..31 (dword aligned). A zero or all-ones header means none.
func (c *Config) walkExtCaps(b []byte) {
	seen := map[int]bool{}
	ptr := extCapStart
	for hops := 0; ; hops++ {
		if seen[ptr] || hops >= extCapTTL {
			c.Loop = true
			return
		}
		seen[ptr] = true
		if ptr+4 > len(b) {
			c.Short = true
			return
		}
		hdr := le32(b, ptr)
		if hdr == 0 || hdr == 0xffffffff {
			return
		}
		id := uint16(hdr)
		c.ExtCaps = append(c.ExtCaps, Cap{ID: id, Offset: ptr, Version: uint8(hdr>>16) & 0xf})
		switch id {
		case extCapACS:
			if c.ACS == nil {
				c.parseACS(b, ptr)
			}
		case extCapReBAR:
			if c.ReBAR == nil {
				c.parseReBAR(b, ptr)
			}
		}
		next := int(hdr>>20) & 0xffc
		if next < extCapStart {
			return
		}
		ptr = next
	}
}

// parseACS reads the capability (+4) and control (+6) registers.
func (c *Config) parseACS(b []byte, off int) {
	if off+8 > len(b) {
		c.Short = true
		return
	}
	ctrl := le16(b, off+6)
	c.ACS = &selftest.ACS{
		Cap:                le16(b, off+4),
		Ctrl:               ctrl,
		RequestRedirect:    ctrl&acsRR != 0,
		CompletionRedirect: ctrl&acsCR != 0,
		EgressControl:      ctrl&acsEC != 0,
	}
}

// parseReBAR reads each (capability, control) dword pair. The first control register
// says how many there are (bits 5..7); its BAR index is bits 0..2 and the current size
// code bits 8..13.
func (c *Config) parseReBAR(b []byte, off int) {
	if off+12 > len(b) {
		c.Short = true
		return
	}
	n := int(le32(b, off+8)>>5) & 7
	if n == 0 { // 0 is reserved; read the one entry that must be there
		n = 1
	}
	for i := 0; i < n; i++ {
		p := off + 4 + 8*i
		if p+8 > len(b) {
			c.Short = true
			return
		}
		capReg := le32(b, p)
		ctrl := le32(b, p+4)
		code := int(ctrl>>8) & 0x3f
		var bytes int64
		if code+rebarSizeBit < 63 {
			bytes = int64(1) << (code + rebarSizeBit)
		}
		c.ReBAR = append(c.ReBAR, ReBAR{BAR: int(ctrl & 7), Sizes: capReg >> 4, Bytes: bytes})
	}
}

func le16(b []byte, off int) uint16 { return binary.LittleEndian.Uint16(b[off:]) }
func le32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
