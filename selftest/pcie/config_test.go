package pcie

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

// space is handcrafted config space: a header with the capability-list bit set.
func space(n int, headerType byte) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint16(b[0:], 0x10de)
	binary.LittleEndian.PutUint16(b[2:], 0x2684)
	binary.LittleEndian.PutUint32(b[8:], 0x030000a1)
	binary.LittleEndian.PutUint16(b[6:], 0x0010)
	b[0x0e] = headerType
	return b
}

func put16(b []byte, off int, v uint16) { binary.LittleEndian.PutUint16(b[off:], v) }
func put32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }

// extHdr is an extended capability header.
func extHdr(id uint16, next int) uint32 { return uint32(id) | 1<<16 | uint32(next)<<20 }

func capOffsets(cs []Cap) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.Offset)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		bytes   func() []byte
		wantErr bool
		check   func(t *testing.T, c Config)
	}{
		{"shorter than a header", func() []byte { return space(63, 0) }, true, nil},
		{"nothing answers", func() []byte {
			b := space(256, 0)
			put16(b, 0, 0xffff)
			return b
		}, true, nil},
		{"header fields", func() []byte { return space(64, 0x80) }, false, func(t *testing.T, c Config) {
			if c.Vendor != 0x10de || c.Device != 0x2684 || c.Class != 0x030000 || c.HeaderType != 0 || !c.MultiFunc {
				t.Errorf("header = %04x:%04x class %06x type %d mf %v", c.Vendor, c.Device, c.Class, c.HeaderType, c.MultiFunc)
			}
		}},
		{"64 bytes, list beyond them", func() []byte {
			b := space(64, 0)
			b[0x34] = 0x60
			return b
		}, false, func(t *testing.T, c Config) {
			if !c.Short || c.PCIe != nil || c.ACS != nil || len(c.Caps) != 0 {
				t.Errorf("Short %v PCIe %v ACS %v caps %v", c.Short, c.PCIe, c.ACS, c.Caps)
			}
		}},
		{"no capability list bit", func() []byte {
			b := space(256, 0)
			put16(b, 6, 0)
			b[0x34], b[0x40] = 0x40, capIDPCIe
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.Caps) != 0 || c.PCIe != nil {
				t.Errorf("caps %v read without the status bit", c.Caps)
			}
		}},
		{"PCIe link registers", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x41 // low bits are reserved and ignored
			b[0x40], b[0x41] = 0x01, 0x60
			b[0x60], b[0x61] = capIDPCIe, 0
			put16(b, 0x62, 0x0012)             // v2, legacy endpoint
			put32(b, 0x60+0x0c, 4|16<<4|3<<10) // 16 GT/s x16
			put16(b, 0x60+0x12, 4|8<<4|0x1000) // trained x8
			return b
		}, false, func(t *testing.T, c Config) {
			want := PCIeCap{Offset: 0x60, Version: 2, PortType: PortLegacyEndpoint, LinkCapSpeed: 4, LinkCapWidth: 16, LinkSpeed: 4, LinkWidth: 8}
			if c.PCIe == nil || *c.PCIe != want {
				t.Errorf("PCIe = %+v, want %+v", c.PCIe, want)
			}
			if !equalInts(capOffsets(c.Caps), []int{0x40, 0x60}) || c.Loop || c.Short {
				t.Errorf("caps %v loop %v short %v", c.Caps, c.Loop, c.Short)
			}
		}},
		{"capability pointing at itself", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x40
			b[0x40], b[0x41] = 0x01, 0x40
			return b
		}, false, func(t *testing.T, c Config) {
			if !c.Loop || !equalInts(capOffsets(c.Caps), []int{0x40}) {
				t.Errorf("loop %v caps %v", c.Loop, c.Caps)
			}
		}},
		{"capability cycle of two, PCIe kept", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x40
			b[0x40], b[0x41] = capIDPCIe, 0x80
			b[0x80], b[0x81] = 0x05, 0x40
			put16(b, 0x40+0x12, 3|4<<4)
			return b
		}, false, func(t *testing.T, c Config) {
			if !c.Loop || !equalInts(capOffsets(c.Caps), []int{0x40, 0x80}) || c.PCIe == nil || c.PCIe.LinkWidth != 4 {
				t.Errorf("loop %v caps %v PCIe %+v", c.Loop, c.Caps, c.PCIe)
			}
		}},
		{"pointer into the header ends the list", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x40
			b[0x40], b[0x41] = 0x01, 0x10
			return b
		}, false, func(t *testing.T, c Config) {
			if c.Loop || len(c.Caps) != 1 {
				t.Errorf("loop %v caps %v", c.Loop, c.Caps)
			}
		}},
		{"PCIe capability cut off", func() []byte {
			b := space(256, 0)
			b[0x34] = 0xf8
			b[0xf8] = capIDPCIe
			return b
		}, false, func(t *testing.T, c Config) {
			if c.PCIe != nil || !c.Short {
				t.Errorf("PCIe %+v short %v", c.PCIe, c.Short)
			}
		}},
		{"bridge bus numbers", func() []byte {
			b := space(64, 0x01)
			b[0x19], b[0x1a] = 0x1b, 0x1c
			return b
		}, false, func(t *testing.T, c Config) {
			if c.HeaderType != 1 || c.SecondaryBus != 0x1b || c.SubordinateBus != 0x1c {
				t.Errorf("type %d bus %x-%x", c.HeaderType, c.SecondaryBus, c.SubordinateBus)
			}
		}},
		{"CardBus pointer at 0x14", func() []byte {
			b := space(256, 0x02)
			b[0x14], b[0x34] = 0x80, 0x40
			b[0x80] = 0x01
			return b
		}, false, func(t *testing.T, c Config) {
			if !equalInts(capOffsets(c.Caps), []int{0x80}) {
				t.Errorf("caps %v", c.Caps)
			}
		}},
		{"unknown header type has no list", func() []byte {
			b := space(256, 0x7f)
			b[0x34], b[0x40] = 0x40, capIDPCIe
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.Caps) != 0 {
				t.Errorf("caps %v", c.Caps)
			}
		}},
		{"ACS after a backwards hop", func() []byte {
			b := space(4096, 1)
			put32(b, 0x100, extHdr(0x0001, 0x300))
			put32(b, 0x300, extHdr(0x0019, 0x148))
			put32(b, 0x148, extHdr(extCapACS, 0))
			put16(b, 0x148+4, 0x7f)
			put16(b, 0x148+6, acsRR|acsCR|0x11)
			return b
		}, false, func(t *testing.T, c Config) {
			if c.ACS == nil || c.ACS.Cap != 0x7f || c.ACS.Ctrl != 0x1d || !c.ACS.RequestRedirect || !c.ACS.CompletionRedirect || c.ACS.EgressControl {
				t.Errorf("ACS = %+v", c.ACS)
			}
			if !equalInts(capOffsets(c.ExtCaps), []int{0x100, 0x300, 0x148}) || c.Loop {
				t.Errorf("ext caps %v loop %v", c.ExtCaps, c.Loop)
			}
		}},
		{"extended cycle after ACS", func() []byte {
			b := space(4096, 1)
			put32(b, 0x100, extHdr(extCapACS, 0x200))
			put16(b, 0x106, acsEC)
			put32(b, 0x200, extHdr(0x0001, 0x100))
			return b
		}, false, func(t *testing.T, c Config) {
			if !c.Loop || c.ACS == nil || !c.ACS.EgressControl || len(c.ExtCaps) != 2 {
				t.Errorf("loop %v ACS %+v ext %v", c.Loop, c.ACS, c.ExtCaps)
			}
		}},
		{"extended self loop", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(0x0001, 0x100))
			return b
		}, false, func(t *testing.T, c Config) {
			if !c.Loop || len(c.ExtCaps) != 1 {
				t.Errorf("loop %v ext %v", c.Loop, c.ExtCaps)
			}
		}},
		{"ACS header in the last dword", func() []byte {
			b := space(4096, 1)
			put32(b, 0x100, extHdr(0x0001, 0xffc))
			put32(b, 0xffc, extHdr(extCapACS, 0))
			return b
		}, false, func(t *testing.T, c Config) {
			if c.ACS != nil || !c.Short {
				t.Errorf("ACS %+v short %v", c.ACS, c.Short)
			}
		}},
		{"all-ones extended space", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, 0xffffffff)
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 0 {
				t.Errorf("ext %v", c.ExtCaps)
			}
		}},
		{"256 bytes have no extended list", func() []byte {
			b := space(256, 0)
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 0 || c.Short {
				t.Errorf("ext %v short %v", c.ExtCaps, c.Short)
			}
		}},
		{"Resizable BAR, BAR1 at 32 GiB", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(extCapReBAR, 0))
			put32(b, 0x104, 0xffc0<<4)    // 64 MiB .. 32 GiB
			put32(b, 0x108, 1|1<<5|15<<8) // BAR1, one entry, 2^35
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.ReBAR) != 1 || c.ReBAR[0] != (ReBAR{BAR: 1, Sizes: 0xffc0, Bytes: 32 << 30}) {
				t.Errorf("ReBAR = %+v", c.ReBAR)
			}
		}},
		{"bytes past 4096 ignored", func() []byte {
			b := space(8192, 0)
			put32(b, 0x100, extHdr(0x0001, 0)) // a valid list, then noise beyond 4 KiB
			for i := 4096; i < len(b); i++ {
				b[i] = 0xaa
			}
			return b
		}, false, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 1 || c.Short || c.Loop {
				t.Errorf("ext %v short %v loop %v", c.ExtCaps, c.Short, c.Loop)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(tt.bytes())
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
	if _, err := ParseConfig(func() []byte { b := space(64, 0); put16(b, 0, 0xffff); return b }()); !errors.Is(err, ErrNoDevice) {
		t.Errorf("all-ones vendor: err = %v, want ErrNoDevice", err)
	}
}

// TestParseConfigFixture parses what pcietest writes, which it encodes on its own:
// the two agree on every register the self-test reads.
func TestParseConfigFixture(t *testing.T) {
	dir := t.TempDir()
	l := pcietest.Xeon8GPU()
	if err := l.Train("0000:1b:00.0", 3, 8); err != nil {
		t.Fatal(err)
	}
	if err := pcietest.Build(dir, l); err != nil {
		t.Fatal(err)
	}
	read := func(bdf string) Config {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "sys/bus/pci/devices", bdf, "config"))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != 4096 {
			t.Fatalf("%s config is %d bytes", bdf, len(b))
		}
		c, err := ParseConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Loop || c.Short {
			t.Errorf("%s: loop %v short %v", bdf, c.Loop, c.Short)
		}
		return c
	}

	gpu := read("0000:1b:00.0")
	if gpu.Vendor != 0x10de || gpu.Device != 0x2684 || gpu.Class != 0x030000 || gpu.HeaderType != 0 {
		t.Errorf("GPU header %04x:%04x %06x type %d", gpu.Vendor, gpu.Device, gpu.Class, gpu.HeaderType)
	}
	if p := gpu.PCIe; p == nil || p.PortType != PortLegacyEndpoint || p.LinkCapSpeed != 4 || p.LinkCapWidth != 16 || p.LinkSpeed != 3 || p.LinkWidth != 8 {
		t.Errorf("GPU PCIe = %+v, want legacy endpoint, cap 16 GT/s x16, trained 8 GT/s x8", gpu.PCIe)
	}
	if len(gpu.ReBAR) != 2 || gpu.ReBAR[0].BAR != 1 || gpu.ReBAR[0].Bytes != 32<<30 || gpu.ReBAR[1].BAR != 3 || gpu.ReBAR[1].Bytes != 32<<20 {
		t.Errorf("GPU ReBAR = %+v", gpu.ReBAR)
	}
	if gpu.ACS != nil {
		t.Errorf("GPU has ACS %+v", gpu.ACS)
	}
	if len(gpu.ExtCaps) != 10 {
		t.Errorf("GPU ext caps = %v, want the 10 of the fixture", gpu.ExtCaps)
	}

	dsp := read("0000:19:08.0")
	if dsp.HeaderType != 1 || dsp.SecondaryBus != 0x1b || dsp.SubordinateBus != 0x1b {
		t.Errorf("DSP type %d bus %x-%x", dsp.HeaderType, dsp.SecondaryBus, dsp.SubordinateBus)
	}
	if dsp.PCIe == nil || dsp.PCIe.PortType != PortSwitchDown || dsp.PCIe.LinkWidth != 8 {
		t.Errorf("DSP PCIe = %+v, want a downstream port trained x8 with its GPU", dsp.PCIe)
	}
	if dsp.ACS == nil || dsp.ACS.Redirects() || dsp.ACS.Cap != 0x7f {
		t.Errorf("DSP ACS = %+v, want capability 0x7f with redirect off", dsp.ACS)
	}
	if usp := read("0000:18:00.0"); usp.ACS != nil || usp.PCIe == nil || usp.PCIe.PortType != PortSwitchUp || usp.SubordinateBus != 0x1b {
		t.Errorf("USP ACS %+v PCIe %+v sub %x", usp.ACS, usp.PCIe, usp.SubordinateBus)
	}
	if rp := read("0000:17:00.0"); rp.PCIe == nil || rp.PCIe.PortType != PortRootPort || rp.ACS == nil || !rp.ACS.RequestRedirect {
		t.Errorf("root port PCIe %+v ACS %+v", rp.PCIe, rp.ACS)
	}
}

func FuzzParseConfig(f *testing.F) {
	dir := f.TempDir()
	if err := pcietest.Build(dir, pcietest.Xeon8GPU()); err != nil {
		f.Fatal(err)
	}
	for _, bdf := range []string{"0000:1a:00.0", "0000:1a:00.1", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0"} {
		b, err := os.ReadFile(filepath.Join(dir, "sys/bus/pci/devices", bdf, "config"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:64])
		f.Add(b[:256])
	}
	loop := space(4096, 1)
	loop[0x34], loop[0x40], loop[0x41] = 0x40, 0x10, 0x40
	put32(loop, 0x100, extHdr(extCapACS, 0x100))
	f.Add(loop)
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if len(b) < 64 {
			t.Fatalf("parsed %d bytes without error", len(b))
		}
		if len(c.Caps) > stdCapTTL || len(c.ExtCaps) > extCapTTL {
			t.Fatalf("%d caps, %d extended: the walk was not bounded", len(c.Caps), len(c.ExtCaps))
		}
		for _, cp := range c.Caps {
			if cp.Offset < 0x40 || cp.Offset >= len(b) || cp.Offset > 0xfc {
				t.Fatalf("capability at %#x", cp.Offset)
			}
		}
		for _, cp := range c.ExtCaps {
			if cp.Offset < 0x100 || cp.Offset+4 > len(b) || cp.Offset+4 > maxCfgSize {
				t.Fatalf("extended capability at %#x of %d bytes", cp.Offset, len(b))
			}
		}
		if c.ACS != nil {
			found := false
			for _, cp := range c.ExtCaps {
				found = found || cp.ID == extCapACS
			}
			if !found {
				t.Fatal("ACS without an ACS header")
			}
		}
		if c.PCIe != nil && (c.PCIe.LinkWidth > 63 || c.PCIe.LinkCapSpeed > 15) {
			t.Fatalf("PCIe fields out of their bit ranges: %+v", c.PCIe)
		}
	})
}

// Config space and resource file of a real NVIDIA H200 (read on the development GPU
// machine, a VM with the GPU passed through): a 3D controller whose BAR0 is 64-bit, so
// NVIDIA's BAR1 (256 GiB) is resource line 2, not line 1 as on an RTX 4090.
func TestRealH200(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "h200-config.bin"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Vendor != 0x10de || c.Device != 0x2335 || c.Class>>8 != 0x0302 || c.PCIe == nil {
		t.Fatalf("config: vendor %#x device %#x class %#x pcie %+v", c.Vendor, c.Device, c.Class, c.PCIe)
	}
	t.Logf("H200 PCIe cap: %+v, ext caps %d", *c.PCIe, len(c.ExtCaps))
	res, err := os.ReadFile(filepath.Join("testdata", "h200-resource"))
	if err != nil {
		t.Fatal(err)
	}
	if got := selftest.BAR1Size(string(res)); got != 256<<30 {
		t.Errorf("BAR1Size = %d, want 256 GiB", got)
	}
}

// TestParseConfigEdges crafts config spaces whose structures end exactly at the last
// byte given, or one dword past it. A parser that reads one byte short drops a
// capability the device has (and with it a PCIe link or an ACS bit); one that reads
// one byte long panics on outside bytes. Sizes other than 64, 256 and 4096 are what a
// truncated read or a hostile file gives.
func TestParseConfigEdges(t *testing.T) {
	tests := []struct {
		name  string
		bytes func() []byte
		check func(t *testing.T, c Config)
	}{
		{"capability header in the last two bytes", func() []byte {
			b := space(0x82, 0)
			b[0x34], b[0x80], b[0x81] = 0x80, 0x05, 0
			return b
		}, func(t *testing.T, c Config) {
			if !equalInts(capOffsets(c.Caps), []int{0x80}) || c.Short {
				t.Errorf("caps %v short %v, want the MSI capability at 0x80", c.Caps, c.Short)
			}
		}},
		{"PCIe capability ending at byte 256", func() []byte {
			b := space(256, 0)
			b[0x34], b[0xec], b[0xed] = 0xec, capIDPCIe, 0
			put16(b, 0xec+2, 0x0002)
			put16(b, 0xec+0x12, 4|16<<4) // LNKSTA in the last two bytes: 16 GT/s x16
			return b
		}, func(t *testing.T, c Config) {
			if c.PCIe == nil || c.PCIe.LinkSpeed != 4 || c.PCIe.LinkWidth != 16 || c.Short {
				t.Errorf("PCIe %+v short %v, want the link read from the last bytes", c.PCIe, c.Short)
			}
		}},
		{"extended header in the last dword", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(0x0001, 0xffc))
			put32(b, 0xffc, extHdr(0x0019, 0))
			return b
		}, func(t *testing.T, c Config) {
			if !equalInts(capOffsets(c.ExtCaps), []int{0x100, 0xffc}) || c.Short {
				t.Errorf("ext caps %v short %v", c.ExtCaps, c.Short)
			}
		}},
		{"one extended header and nothing else", func() []byte {
			b := space(extCapStart+4, 0)
			put32(b, 0x100, extHdr(0x0001, 0))
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 1 || c.Short {
				t.Errorf("ext caps %v short %v, want the header at 0x100", c.ExtCaps, c.Short)
			}
		}},
		{"extended pointer just past a cut read", func() []byte {
			b := space(0x200, 0)
			put32(b, 0x100, extHdr(0x0001, 0x200))
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 1 || !c.Short {
				t.Errorf("ext caps %v short %v, want one header and Short", c.ExtCaps, c.Short)
			}
		}},
		{"ACS registers in the last 8 bytes", func() []byte {
			b := space(4096, 1)
			put32(b, 0x100, extHdr(0x0001, 0xff8))
			put32(b, 0xff8, extHdr(extCapACS, 0))
			put16(b, 0xff8+4, 0x7f)
			put16(b, 0xff8+6, acsRR)
			return b
		}, func(t *testing.T, c Config) {
			if c.ACS == nil || !c.ACS.RequestRedirect || c.Short {
				t.Errorf("ACS %+v short %v, want request redirect read from the last bytes", c.ACS, c.Short)
			}
		}},
		{"Resizable BAR entry in the last 8 bytes", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(0x0001, 0xff4))
			put32(b, 0xff4, extHdr(extCapReBAR, 0))
			put32(b, 0xff8, 0xffc0<<4)
			put32(b, 0xffc, 1|1<<5|15<<8) // BAR1, one entry, 32 GiB
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ReBAR) != 1 || c.ReBAR[0].Bytes != 32<<30 || c.Short {
				t.Errorf("ReBAR %+v short %v, want BAR1 at 32 GiB", c.ReBAR, c.Short)
			}
		}},
		{"Resizable BAR header without its first entry", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(0x0001, 0xff8))
			put32(b, 0xff8, extHdr(extCapReBAR, 0))
			put32(b, 0xffc, 0xffc0<<4)
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ReBAR) != 0 || !c.Short {
				t.Errorf("ReBAR %+v short %v, want none and Short", c.ReBAR, c.Short)
			}
		}},
		{"Resizable BAR claiming more entries than fit", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(0x0001, 0xfe4))
			put32(b, 0xfe4, extHdr(extCapReBAR, 0))
			for i, p := range []int{0xfe8, 0xff0, 0xff8} { // 3 of the 6 claimed fit
				put32(b, p, 0x40<<4)
				put32(b, p+4, uint32(i)|6<<5|6<<8) // 64 MiB
			}
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ReBAR) != 3 || !c.Short {
				t.Errorf("ReBAR %+v short %v, want the 3 entries that fit and Short", c.ReBAR, c.Short)
			}
			for i, r := range c.ReBAR {
				if r.BAR != i || r.Bytes != 64<<20 {
					t.Errorf("entry %d = %+v", i, r)
				}
			}
		}},
		// The size code has 6 bits: 2^(43+20) and beyond do not fit an int64. Such a
		// size is reported as unknown (0), never as a negative or wrapped one.
		{"Resizable BAR size past int64", func() []byte {
			b := space(4096, 0)
			put32(b, 0x100, extHdr(extCapReBAR, 0))
			put32(b, 0x108, 0|3<<5|42<<8) // 2^62: the largest that fits
			put32(b, 0x110, 1|43<<8)      // 2^63
			put32(b, 0x118, 2|63<<8)      // 2^83
			return b
		}, func(t *testing.T, c Config) {
			want := []int64{1 << 62, 0, 0}
			if len(c.ReBAR) != len(want) {
				t.Fatalf("ReBAR %+v", c.ReBAR)
			}
			for i, r := range c.ReBAR {
				if r.Bytes != want[i] {
					t.Errorf("entry %d: %d bytes, want %d", i, r.Bytes, want[i])
				}
			}
		}},
		// The kernel walks at most (4096-256)/8 = 480 extended headers; a list of 960
		// distinct dwords, each pointing at the next, is cut there and flagged.
		{"extended list longer than the kernel walks", func() []byte {
			b := space(4096, 0)
			for p := extCapStart; p < maxCfgSize; p += 4 {
				next := p + 4
				if next == maxCfgSize {
					next = 0
				}
				put32(b, p, extHdr(0x0001, next))
			}
			return b
		}, func(t *testing.T, c Config) {
			if len(c.ExtCaps) != 480 || !c.Loop {
				t.Errorf("%d extended caps, loop %v: want the walk cut at 480 and Loop", len(c.ExtCaps), c.Loop)
			}
		}},
		// A header type the parser does not know has no capability pointer to follow,
		// whatever the header's first bytes say (here Intel's vendor id, whose high
		// byte 0x80 would read as a pointer).
		{"unknown header type with a pointer-like vendor id", func() []byte {
			b := space(256, 0x7f)
			put16(b, 0, 0x8086)
			b[0x34], b[0x40] = 0x40, capIDPCIe
			b[0x80], b[0x81] = capIDPCIe, 0
			put16(b, 0x80+0x12, 4|16<<4)
			return b
		}, func(t *testing.T, c Config) {
			if len(c.Caps) != 0 || c.PCIe != nil {
				t.Errorf("caps %v PCIe %+v, want none", c.Caps, c.PCIe)
			}
		}},
		{"conventional PCI device: no PCIe capability", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x40
			b[0x40], b[0x41] = 0x01, 0x50 // power management
			b[0x50], b[0x51] = 0x05, 0    // MSI
			put16(b, 0x40+0x12, 4|16<<4)  // bytes that would read as a link
			return b
		}, func(t *testing.T, c Config) {
			if c.PCIe != nil || !equalInts(capOffsets(c.Caps), []int{0x40, 0x50}) {
				t.Errorf("PCIe %+v caps %v, want no PCIe capability", c.PCIe, c.Caps)
			}
		}},
		{"a second PCIe capability does not replace the first", func() []byte {
			b := space(256, 0)
			b[0x34] = 0x40
			b[0x40], b[0x41] = capIDPCIe, 0x80
			put16(b, 0x40+0x12, 4|16<<4)
			b[0x80], b[0x81] = capIDPCIe, 0
			put16(b, 0x80+0x12, 1|1<<4)
			return b
		}, func(t *testing.T, c Config) {
			if c.PCIe == nil || c.PCIe.Offset != 0x40 || c.PCIe.LinkWidth != 16 {
				t.Errorf("PCIe %+v, want the first one, x16 at 0x40", c.PCIe)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(tt.bytes())
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}
