// Package pcinet finds the node's PCI network devices that no driver has bound, and
// says afterwards what became of them. The gpu-node kernel builds the server NIC
// drivers (igb, ixgbe, i40e, ice, bnxt_en, mlx5_core, r8169) as modules and no udev
// runs in the image, so the init matches these devices' modaliases against
// modules.alias (node/kmod) and loads the drivers itself, as udev's "modprobe
// $MODALIAS" would.
package pcinet

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// DevicesDir is where sysfs lists PCI devices.
const DevicesDir = "/sys/bus/pci/devices"

const (
	vendorNVIDIA = 0x10de
	classNetwork = 0x02   // base class: network controller
	classIB      = 0x0207 // base and subclass: InfiniBand
)

// NIC is a PCI network device that no driver has bound.
type NIC struct {
	Addr           string // 0000:41:00.0
	Vendor, Device uint64
	Class          uint64 // 0x020000
	Modalias       string
}

func (d NIC) String() string {
	return fmt.Sprintf("%s (%04x:%04x, %s)", d.Addr, d.Vendor, d.Device, className(d.Class))
}

func className(class uint64) string {
	switch class >> 8 {
	case 0x0200:
		return "Ethernet"
	case 0x0280:
		return "network controller"
	}
	return fmt.Sprintf("network class %06x", class)
}

// Unbound lists the PCI network devices (class 0x02xxxx) under dir without a driver,
// in address order, and counts those with one. NVIDIA devices are never listed: the
// recipe's modules drive them. InfiniBand devices (class 0x0207) are left out too:
// their interfaces are not Ethernet, which is all the DHCP client uses, and mlx5_core
// would spend seconds per HCA initialising them for nothing.
func Unbound(dir string) (nics []NIC, bound int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("listing PCI devices: %w", err)
	}
	for _, ent := range ents {
		path := filepath.Join(dir, ent.Name())
		read := func(f string) string {
			b, _ := os.ReadFile(filepath.Join(path, f))
			return strings.TrimSpace(string(b))
		}
		hex := func(f string) uint64 {
			v, _ := strconv.ParseUint(strings.TrimPrefix(read(f), "0x"), 16, 32)
			return v
		}
		d := NIC{Addr: ent.Name(), Vendor: hex("vendor"), Device: hex("device"), Class: hex("class")}
		if d.Class>>16 != classNetwork || d.Class>>8 == classIB || d.Vendor == vendorNVIDIA {
			continue
		}
		if _, err := os.Lstat(filepath.Join(path, "driver")); err == nil {
			bound++
			continue
		}
		d.Modalias = read("modalias")
		nics = append(nics, d)
	}
	return nics, bound, nil
}

// boundDriver names the driver bound to a PCI device, "" if none, and its network
// interfaces (under the device, or one level down as virtio puts them).
func boundDriver(dir, addr string) (driver string, ifaces []string) {
	path := filepath.Join(dir, addr)
	if target, err := os.Readlink(filepath.Join(path, "driver")); err == nil {
		driver = filepath.Base(target)
	}
	for _, g := range []string{"net/*", "*/net/*"} {
		m, _ := filepath.Glob(filepath.Join(path, g))
		for _, p := range m {
			ifaces = append(ifaces, filepath.Base(p))
		}
	}
	return driver, ifaces
}

// Outcome words what happened for one device after the loads, for its finding and
// console line: matched are the modules its modalias matched, results the loads.
func Outcome(dir string, d NIC, matched []string, results []selftest.Module) (msg, hint string) {
	if d.Modalias == "" {
		return fmt.Sprintf("%s: no driver and no modalias in sysfs", d), ""
	}
	if len(matched) == 0 {
		return fmt.Sprintf("%s: no driver, and no module of this image matches %s", d, d.Modalias),
			"enable the NIC's driver in the kernel config (as a module or built in) and rebuild, or fetch the report from the console or the PEERBOOT partition"
	}
	var parts []string
	for _, mod := range matched {
		for _, r := range results {
			if r.Name == mod && r.RequiredBy == "" {
				parts = append(parts, mod+" "+r.Result+suffix(r.Error))
			}
		}
	}
	msg = fmt.Sprintf("%s: %s", d, strings.Join(parts, ", "))
	driver, ifaces := boundDriver(dir, d.Addr)
	switch {
	case driver == "":
		msg += "; still no driver bound"
		hint = "the module's messages are in kernel_log of its entry under modules"
	case len(ifaces) == 0:
		msg += fmt.Sprintf("; bound to %s, no network interface yet", driver)
	default:
		msg += fmt.Sprintf("; bound to %s, interface %s", driver, strings.Join(ifaces, " "))
	}
	return msg, hint
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
