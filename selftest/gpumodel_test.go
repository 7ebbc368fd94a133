package selftest

import "testing"

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
