package selftest

import (
	"fmt"
	"math"
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
