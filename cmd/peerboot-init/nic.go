package main

// Network drivers for the report POST: before the DHCP client looks for an interface,
// the init does what udev's "modprobe $MODALIAS" would for every PCI network device
// without a driver (node/pcinet), with modules.alias and the module loader of node/kmod.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/pcinet"
	"github.com/peerboot/peerboot/selftest"
)

const (
	// phaseNICModules is the duration entry of the NIC driver loading.
	phaseNICModules = "nic-modules"
	// defaultNICLoadWait bounds the whole NIC driver loading. mlx5_core initialises
	// every ConnectX it finds inside finit_module, a second or more each.
	defaultNICLoadWait = 30 * time.Second
)

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
	pciDir := m.path(pcinet.DevicesDir)
	nics, bound, err := pcinet.Unbound(pciDir)
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
	aliases, malformed := kmod.ParseAliases(data)
	if malformed > 0 {
		st.finding(selftest.SevWarn, "init.nic", fmt.Sprintf("%d line(s) of %s are not \"alias PATTERN MODULE\" and were skipped", malformed, filepath.Join(modulesRoot, st.kernel.Release, "modules.alias")),
			"depmod writes that file; rebuild the image")
	}
	matched := make([][]string, len(nics))
	var modules []string
	for i, d := range nics {
		matched[i] = kmod.ModulesFor(aliases, d.Modalias)
		for _, mod := range matched[i] {
			if !slices.Contains(modules, mod) {
				modules = append(modules, mod)
			}
		}
		if len(matched[i]) > 0 {
			m.say("NIC %s: loading %s for %s", d, strings.Join(matched[i], ", "), d.Modalias)
		}
	}

	// 3. Loads.
	t := m.now()
	var results []selftest.Module
	if len(modules) > 0 {
		ix, err := kmod.LoadIndex(dir)
		if err != nil {
			st.finding(selftest.SevWarn, "init.nic", err.Error(), "the rootfs stage installs modules under /lib/modules/<kernel release>")
			ix = kmod.EmptyIndex(dir)
		}
		limit := m.nicLoadWait()
		loader := &kmod.Bounded{Inner: m.loader, Deadline: time.Now().Add(limit), Limit: limit}
		results = kmod.Load(ix, loader, m.openKlog(), modules, nil)
		st.record.Modules = append(st.record.Modules, results...)
		st.record.Durations = append(st.record.Durations, selftest.Duration{Phase: phaseNICModules, MS: m.now().Sub(t).Milliseconds()})
		for _, r := range results {
			m.say("module %s: %s%s", r.Name, r.Result, suffix(r.Error))
		}
	}

	// 4. Outcome per device.
	for i, d := range nics {
		msg, hint := pcinet.Outcome(pciDir, d, matched[i], results)
		st.finding(selftest.SevInfo, "init.nic", msg, hint)
		m.say("NIC %s", msg)
	}
}
