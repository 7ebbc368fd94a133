package main

// Network drivers for the report POST. The gpu-node kernel builds the server NIC
// drivers (igb, ixgbe, i40e, ice, bnxt_en, mlx5_core, r8169) as modules, and no udev
// runs in the image to load them, so before the DHCP client looks for an interface the
// init does what udev's "modprobe $MODALIAS" would: every PCI network device without a
// driver has its modalias matched against depmod's modules.alias, and each matching
// module is loaded after its dependencies (modules.dep) by the same code that loads
// the recipe's driver modules.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

const (
	pciDevicesDir = "/sys/bus/pci/devices"
	// phaseNICModules is the duration entry of the NIC driver loading.
	phaseNICModules = "nic-modules"
	// defaultNICLoadWait bounds the whole NIC driver loading. mlx5_core initialises
	// every ConnectX it finds inside finit_module, a second or more each.
	defaultNICLoadWait = 30 * time.Second

	pciVendorNVIDIA = 0x10de
	pciClassNetwork = 0x02   // base class: network controller
	pciClassIB      = 0x0207 // base and subclass: InfiniBand
)

// aliasEntry is one "alias PATTERN MODULE" line of modules.alias.
type aliasEntry struct {
	pattern, module string
}

// parseModulesAlias reads depmod's modules.alias: "alias PATTERN MODULE" lines, with
// "#" comments and blank lines. A line of another shape is not depmod's; it is
// counted in malformed and skipped, so one damaged line does not hide the rest.
func parseModulesAlias(data []byte) (aliases []aliasEntry, malformed int) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		f := strings.Fields(string(line))
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 || f[0] != "alias" {
			malformed++
			continue
		}
		// depmod spells module names with "_"; "-" is the same name to the kernel.
		aliases = append(aliases, aliasEntry{pattern: f[1], module: strings.ReplaceAll(f[2], "-", "_")})
	}
	return aliases, malformed
}

// modulesFor returns the modules whose aliases match modalias, each once, in the
// order of modules.alias (modprobe loads every match, and so does the init).
func modulesFor(aliases []aliasEntry, modalias string) []string {
	var out []string
	for _, a := range aliases {
		if !contains(out, a.module) && globMatch(a.pattern, modalias) {
			out = append(out, a.module)
		}
	}
	return out
}

// globMatch reports whether s matches pattern, where "*" matches any run of bytes
// (also none) and "?" any one byte; every other byte matches itself, as in the
// aliases modpost writes (case matters: both sides spell hex digits in upper case).
// On a mismatch after a "*" the star takes one more byte and the rest is tried
// again; only the latest star needs revisiting, so the work is at most
// len(pattern)*len(s).
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, resume := -1, 0 // the latest '*' in pattern, and where in s its match ends
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, resume = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case star >= 0:
			resume++
			p, i = star+1, resume
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// pciNIC is a PCI network device that no driver has bound.
type pciNIC struct {
	addr           string // 0000:41:00.0
	vendor, device uint64
	class          uint64 // 0x020000
	modalias       string
}

func (d pciNIC) String() string {
	return fmt.Sprintf("%s (%04x:%04x, %s)", d.addr, d.vendor, d.device, pciClassName(d.class))
}

func pciClassName(class uint64) string {
	switch class >> 8 {
	case 0x0200:
		return "Ethernet"
	case 0x0280:
		return "network controller"
	}
	return fmt.Sprintf("network class %06x", class)
}

// unboundNICs lists the PCI network devices (class 0x02xxxx) without a driver, in
// address order. NVIDIA devices are never touched here: the recipe's modules drive
// them. InfiniBand devices (class 0x0207) are left out too: their interfaces are not
// Ethernet, which is all the DHCP client uses, and mlx5_core would spend seconds per
// HCA initialising them for nothing.
func unboundNICs(dir string) (nics []pciNIC, bound int, err error) {
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
		d := pciNIC{addr: ent.Name(), vendor: hex("vendor"), device: hex("device"), class: hex("class")}
		if d.class>>16 != pciClassNetwork || d.class>>8 == pciClassIB || d.vendor == pciVendorNVIDIA {
			continue
		}
		if _, err := os.Lstat(filepath.Join(path, "driver")); err == nil {
			bound++
			continue
		}
		d.modalias = read("modalias")
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

// boundedLoader stops waiting for loads at a deadline. finit_module cannot be
// interrupted: a load still running then goes on in the background (its interface
// may yet appear) and the boot goes on without it; no load starts after the deadline.
type boundedLoader struct {
	inner    moduleLoader
	deadline time.Time
	limit    time.Duration
}

func (b *boundedLoader) Load(path, params string) error {
	wait := time.Until(b.deadline)
	if wait <= 0 {
		return fmt.Errorf("not attempted: the %s allowed for network drivers was spent", b.limit)
	}
	done := make(chan error, 1)
	go func() {
		// A panic here would end PID 1: it becomes the load's error instead.
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("peerboot-init bug: loading %s panicked: %v", filepath.Base(path), p)
			}
		}()
		done <- b.inner.Load(path, params)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("still loading after %s; the boot goes on without waiting for it", b.limit)
	}
}

// nicLoadWait is the machine's bound on NIC driver loading; zero means the default.
func (m *machine) nicLoadWait() time.Duration {
	if m.nicWait > 0 {
		return m.nicWait
	}
	return defaultNICLoadWait
}

// loadNICDrivers loads the modules the node's network devices need, before the DHCP
// client looks for an interface to ask on.
//
//  1. List the PCI network devices that have no driver.
//  2. Match each one's modalias against modules.alias.
//  3. Load the matched modules, each after its dependencies, within nicLoadWait.
//  4. Record it: the modules list, one finding per device, a duration, the console.
func (m *machine) loadNICDrivers(st *bootState) {
	// 1. Devices.
	pciDir := m.path(pciDevicesDir)
	nics, bound, err := unboundNICs(pciDir)
	if errors.Is(err, fs.ErrNotExist) {
		m.say("NIC drivers: no PCI bus, nothing to load")
		return
	}
	if err != nil {
		st.finding(selftest.SevWarn, "init.nic", err.Error(), "sysfs must be mounted on /sys for the init to find the NIC")
		m.say("NIC drivers: %v", err)
		return
	}
	if len(nics) == 0 {
		m.say("NIC drivers: none to load (%d PCI network device(s), each with its driver)", bound)
		return
	}

	// 2. Aliases.
	dir := m.path(filepath.Join(modulesRoot, st.kernel.Release))
	data, err := os.ReadFile(filepath.Join(dir, "modules.alias"))
	if err != nil {
		err = fmt.Errorf("cannot match %d NIC(s) to a driver: %w", len(nics), err)
		st.finding(selftest.SevWarn, "init.nic", err.Error(), "the rootfs stage runs depmod, which writes modules.alias; rebuild the image")
		m.say("NIC drivers: %v", err)
		return
	}
	aliases, malformed := parseModulesAlias(data)
	if malformed > 0 {
		st.finding(selftest.SevWarn, "init.nic", fmt.Sprintf("%d line(s) of %s are not \"alias PATTERN MODULE\" and were skipped", malformed, filepath.Join(modulesRoot, st.kernel.Release, "modules.alias")),
			"depmod writes that file; rebuild the image")
	}
	matched := make([][]string, len(nics))
	var modules []string
	for i, d := range nics {
		matched[i] = modulesFor(aliases, d.modalias)
		for _, mod := range matched[i] {
			if !contains(modules, mod) {
				modules = append(modules, mod)
			}
		}
		if len(matched[i]) > 0 {
			m.say("NIC %s: loading %s for %s", d, strings.Join(matched[i], ", "), d.modalias)
		}
	}

	// 3. Loads.
	t := m.now()
	var results []selftest.Module
	if len(modules) > 0 {
		ix, err := loadModIndex(dir)
		if err != nil {
			st.finding(selftest.SevWarn, "init.nic", err.Error(), "the rootfs stage installs modules under /lib/modules/<kernel release>")
			ix = &modIndex{dir: dir, path: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{}}
		}
		limit := m.nicLoadWait()
		loader := &boundedLoader{inner: m.loader, deadline: time.Now().Add(limit), limit: limit}
		results = loadModules(ix, loader, m.openKlog(), modules, nil)
		st.record.Modules = append(st.record.Modules, results...)
		st.record.Durations = append(st.record.Durations, selftest.Duration{Phase: phaseNICModules, MS: m.now().Sub(t).Milliseconds()})
		for _, r := range results {
			m.say("module %s: %s%s", r.Name, r.Result, suffix(r.Error))
		}
	}

	// 4. Outcome per device.
	for i, d := range nics {
		msg, hint := nicOutcome(pciDir, d, matched[i], results)
		st.finding(selftest.SevInfo, "init.nic", msg, hint)
		m.say("NIC %s", msg)
	}
}

// nicOutcome words what happened for one device, for its finding and console line.
func nicOutcome(pciDir string, d pciNIC, matched []string, results []selftest.Module) (msg, hint string) {
	if d.modalias == "" {
		return fmt.Sprintf("%s: no driver and no modalias in sysfs", d), ""
	}
	if len(matched) == 0 {
		return fmt.Sprintf("%s: no driver, and no module of this image matches %s", d, d.modalias),
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
	driver, ifaces := boundDriver(pciDir, d.addr)
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
