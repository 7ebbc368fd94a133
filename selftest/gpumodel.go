package selftest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// gpuModels names NVIDIA GPUs by PCI device id, for the console view when the driver
// gave no name (it did not load) and to keep names short when it did. Names and ids are
// from the "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README.md
// (release 595.45.04); vram is the stock memory in GB, so a card that reports another
// size (the 48 GB RTX 4090 boards) is named with its size.
var gpuModels = map[string]struct {
	name string
	vram int
}{
	"2203": {"RTX 3090 Ti", 24},
	"2204": {"RTX 3090", 24},
	"2684": {"RTX 4090", 24},
	"2685": {"RTX 4090 D", 24},
	"2b85": {"RTX 5090", 32},
	"2b87": {"RTX 5090 D", 32},
	"2b8c": {"RTX 5090 D v2", 24},
	"2321": {"H100 NVL", 94},
	"2330": {"H100 SXM", 80},
	"2331": {"H100 PCIe", 80},
	"2339": {"H100", 94},
	"2335": {"H200", 141},
	"233b": {"H200 NVL", 141},
}

// GPUModel is a short name for GPU i: the model its PCI device id names ("RTX 4090"),
// with the memory size when it is not the model's stock size ("RTX 4090 48GB"); for
// an id not in the table, the name NVML or CUDA gave without "NVIDIA GeForce"; else
// vendor:device ("10de:1234").
func (r *Report) GPUModel(i int) string {
	g := &r.GPUs[i]
	dev := strings.ToLower(strings.TrimPrefix(g.Device, "0x"))
	vram, _ := r.GPUVRAM(i)
	if m, ok := gpuModels[dev]; ok && strings.EqualFold(strings.TrimPrefix(g.Vendor, "0x"), "10de") {
		gb := int(math.Round(float64(vram) / (1 << 30)))
		// 10% either way: NVML's total is a little under the marketing size (the
		// H200's 141 GB reads 140 GiB).
		if vram > 0 && math.Abs(float64(gb-m.vram)) > 0.1*float64(m.vram) {
			return fmt.Sprintf("%s %dGB", m.name, gb)
		}
		return m.name
	}
	if n := r.GPUName(i); n != "" {
		n = strings.TrimPrefix(n, "NVIDIA ")
		return strings.TrimPrefix(n, "GeForce ")
	}
	return strings.TrimPrefix(g.Vendor, "0x") + ":" + dev
}

// p2pChips are the PCI device id blocks of the three chips peerboot's P2P series
// changes, from the "Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules
// README.md (595.45.04): GA102 0x2203-0x2238 (RTX 3080..3090 Ti, RTX A4500..A6000,
// A10/A40), AD102 0x2684-0x26BA (RTX 4090, 4090 D, RTX 6000 Ada, L40/L40S, L20), GB202
// 0x2B85-0x2BB9 (RTX 5090, 5090 D, RTX PRO 5000/6000 Blackwell). Each block is rounded
// out to 0x40-aligned bounds; no id of another chip in that table falls inside one.
var p2pChips = []struct {
	lo, hi uint64
	chip   string
}{
	{0x2200, 0x223f, "GA102"},
	{0x2680, 0x26bf, "AD102"},
	{0x2b80, 0x2bbf, "GB202"},
}

// P2PChip is GPU i's chip when it is one peerboot's P2P series changes (GA102, AD102,
// GB202: the chips whose GPUs the series' nvidia.ko names in a "peerboot-p2p:
// bar1-mode" kernel line), from its PCI vendor and device id; "" for any other GPU.
func (r *Report) P2PChip(i int) string {
	g := &r.GPUs[i]
	if !strings.EqualFold(strings.TrimPrefix(g.Vendor, "0x"), "10de") {
		return ""
	}
	dev, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(g.Device), "0x"), 16, 16)
	if err != nil {
		return ""
	}
	for _, c := range p2pChips {
		if dev >= c.lo && dev <= c.hi {
			return c.chip
		}
	}
	return ""
}
