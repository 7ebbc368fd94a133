package selftest

import (
	"fmt"
	"testing"
)

// P2PChip names the series' three chips by their PCI ids (NVIDIA README's table) and
// nothing else: a neighbouring chip's id, another vendor, a malformed id.
func TestP2PChip(t *testing.T) {
	for _, tt := range []struct {
		vendor, device, want string
	}{
		{"0x10de", "0x2204", "GA102"}, // RTX 3090
		{"0x10de", "0x2238", "GA102"}, // A10M, the last GA102 id in the table
		{"0x10de", "0x2684", "AD102"}, // RTX 4090
		{"0x10DE", "0x26B9", "AD102"}, // L40S, upper-case hex
		{"0x10de", "0x2b85", "GB202"}, // RTX 5090
		{"0x10de", "0x2bb1", "GB202"}, // RTX PRO 6000 Blackwell
		{"0x10de", "0x2704", ""},      // RTX 4080 (AD103)
		{"0x10de", "0x2482", ""},      // RTX 3070 Ti (GA104)
		{"0x10de", "0x2c02", ""},      // RTX 5080 (GB203)
		{"0x10de", "0x2335", ""},      // H200 (GH100): no mode line on any branch
		{"0x1002", "0x2684", ""},      // not NVIDIA
		{"0x10de", "", ""},
		{"0x10de", "0xzz84", ""},
	} {
		r := &Report{GPUs: []GPU{{Vendor: tt.vendor, Device: tt.device}}}
		if got := r.P2PChip(0); got != tt.want {
			t.Errorf("%s:%s: P2PChip %q, want %q", tt.vendor, tt.device, got, tt.want)
		}
	}
}

// Each chip's id block, at its bounds: the first and last id in, the ids just
// outside out (the verdict asks a "bar1-mode" line only of these chips).
func TestP2PChipBounds(t *testing.T) {
	for _, c := range []struct {
		lo, hi uint64
		chip   string
	}{{0x2200, 0x223f, "GA102"}, {0x2680, 0x26bf, "AD102"}, {0x2b80, 0x2bbf, "GB202"}} {
		for dev, want := range map[uint64]string{c.lo - 1: "", c.lo: c.chip, c.hi: c.chip, c.hi + 1: ""} {
			r := &Report{GPUs: []GPU{{Vendor: "0x10de", Device: fmt.Sprintf("0x%04x", dev)}}}
			if got := r.P2PChip(0); got != want {
				t.Errorf("device %#04x: P2PChip %q, want %q", dev, got, want)
			}
		}
	}
}

// GPUModel names a card by its PCI id, with its memory only when it is more
// than 10 % off the model's stock size (a 48 GB RTX 4090), by the driver's
// name for an id not in the table or another vendor, else vendor:device.
func TestGPUModel(t *testing.T) {
	gb := func(n float64) int64 { return int64(n * (1 << 30)) }
	for _, tt := range []struct {
		name           string
		vendor, device string
		nvmlName       string
		vram           int64
		want           string
	}{
		{"stock 4090", "0x10de", "0x2684", "NVIDIA GeForce RTX 4090", gb(23.99), "RTX 4090"},
		{"48 GB 4090", "0x10de", "0x2684", "NVIDIA GeForce RTX 4090", gb(47.99), "RTX 4090 48GB"},
		{"H200 reads 140 GiB", "0x10de", "0x2335", "NVIDIA H200", gb(139.8), "H200"},
		{"80 GB, 8 GB over: within 10 %", "0x10de", "0x2330", "", gb(88), "H100 SXM"},
		{"80 GB, 9 GB over", "0x10de", "0x2330", "", gb(89), "H100 SXM 89GB"},
		{"80 GB, 9 GB under", "0x10de", "0x2330", "", gb(71), "H100 SXM 71GB"},
		{"no memory figure", "0x10de", "0x2b85", "", 0, "RTX 5090"},
		{"upper-case id", "0x10DE", "0x2B85", "", gb(31.5), "RTX 5090"},
		{"an id not in the table", "0x10de", "0x2704", "NVIDIA GeForce RTX 4080", gb(16), "RTX 4080"},
		{"a data-centre name", "0x10de", "0x20b0", "NVIDIA A100-SXM4-40GB", gb(40), "A100-SXM4-40GB"},
		{"another vendor with a known id", "0x1002", "0x2684", "Radeon", gb(24), "Radeon"},
		{"no name at all", "0x10de", "0x1234", "", 0, "10de:1234"},
	} {
		g := GPU{Vendor: tt.vendor, Device: tt.device}
		if tt.nvmlName != "" || tt.vram > 0 {
			g.NVML = &NVMLGPU{Name: tt.nvmlName, FBTotal: tt.vram}
		}
		r := &Report{GPUs: []GPU{g}}
		if got := r.GPUModel(0); got != tt.want {
			t.Errorf("%s: GPUModel %q, want %q", tt.name, got, tt.want)
		}
	}
}
