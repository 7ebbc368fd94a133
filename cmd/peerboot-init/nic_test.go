package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/node/dhcp"
	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/node/pcinet"
	"github.com/peerboot/peerboot/selftest"
)

// bindingLoader is a kmodtest.Loader (safe for the background loads of kmod.Bounded)
// that binds devices the way a driver's probe would: a driver link and a net/ interface.
type bindingLoader struct {
	mu     sync.Mutex
	fake   *kmodtest.Loader
	onLoad func(name string)
}

func (l *bindingLoader) Load(path, params string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onLoad != nil {
		l.onLoad(kmod.Name(path))
	}
	return l.fake.Load(path, params)
}

func (l *bindingLoader) loads() []string { return l.fake.Loaded() }

// pciTree adds a GPU node's PCI devices to the fake box, and in-tree NIC modules with
// the real modules.dep lines of the gpu-node kernel.
func pciTree(t *testing.T, b *fakeBox) {
	dev := func(addr, class, vendor, device, modalias, driver string) {
		d := b.p(pcinet.DevicesDir + "/" + addr)
		testfs.Write(t, d+"/class", class+"\n")
		testfs.Write(t, d+"/vendor", vendor+"\n")
		testfs.Write(t, d+"/device", device+"\n")
		testfs.Write(t, d+"/modalias", modalias+"\n")
		if driver != "" {
			if err := os.Symlink("../../../bus/pci/drivers/"+driver, d+"/driver"); err != nil {
				t.Fatal(err)
			}
		}
	}
	dev("0000:00:03.0", "0x020000", "0x1af4", "0x1041", kmodtest.MaVirtioPCI, "virtio-pci") // bound: left alone
	dev("0000:41:00.0", "0x020000", "0x8086", "0x1563", kmodtest.MaX550, "")
	dev("0000:42:00.0", "0x020000", "0x1d6a", "0x07b1", kmodtest.MaAquantia, "") // no driver in the image
	dev("0000:c1:00.0", "0x030200", "0x10de", "0x2330", kmodtest.MaH100, "")     // the GPU: the recipe's
	dev("0000:c2:00.0", "0x020700", "0x15b3", "0x1021", kmodtest.MaCX7, "")      // InfiniBand HCA
	dev("0000:c3:00.0", "0x020000", "0x10de", "0x1234", kmodtest.MaH100+"x", "") // NVIDIA, never ours
	dev("0000:00:1f.0", "0x060100", "0x8086", "0x7a06", "pci:v00008086", "")     // not a NIC
	mods := b.p("/lib/modules/" + release)
	testfs.Write(t, mods+"/modules.alias", kmodtest.AliasSample)
	testfs.Write(t, mods+"/modules.dep", strings.Join([]string{
		"kernel/drivers/net/phy/mdio_devres.ko: kernel/drivers/net/phy/libphy.ko",
		"kernel/drivers/net/phy/libphy.ko:",
		"kernel/drivers/net/ethernet/intel/igb/igb.ko:",
		"kernel/drivers/net/ethernet/intel/ixgbe/ixgbe.ko: kernel/drivers/net/mdio.ko kernel/drivers/net/phy/mdio_devres.ko kernel/drivers/net/phy/libphy.ko",
		"kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko:",
		"kernel/drivers/net/mdio.ko:",
		"",
	}, "\n"))
	for _, f := range []string{"drivers/net/phy/mdio_devres.ko", "drivers/net/phy/libphy.ko", "drivers/net/ethernet/intel/igb/igb.ko",
		"drivers/net/ethernet/intel/ixgbe/ixgbe.ko", "drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko", "drivers/net/mdio.ko"} {
		testfs.Write(t, mods+"/kernel/"+f, "x")
	}
}

// With a report URL, the X550's driver loads before anything else, after its
// dependencies, and before the DHCP client runs; bound devices, the GPU, NVIDIA
// devices and the InfiniBand HCA are left alone.
func TestBootLoadsNICDriver(t *testing.T) {
	l := &bindingLoader{fake: &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV, "mdio": unix.EEXIST}}}
	b := newFakeBox(t, "peerboot.report_url=http://10.0.2.2:9/r", l)
	pciTree(t, b)
	l.onLoad = func(name string) {
		if name == "ixgbe" {
			d := b.p(pcinet.DevicesDir + "/0000:41:00.0")
			os.Symlink("../../../bus/pci/drivers/ixgbe", d+"/driver")
			os.MkdirAll(d+"/net/eth2", 0o755)
		}
	}
	var loadsAtNetUp []string
	netUp := b.m.netUp
	b.m.netUp = func() (*dhcp.Lease, error) {
		loadsAtNetUp = l.loads()
		return netUp()
	}
	b.m.run(&bootState{})

	wantNIC := []string{"libphy", "mdio_devres", "mdio", "ixgbe"}
	loads := l.loads()
	if len(loads) < 5 || !reflect.DeepEqual(loads[:4], wantNIC) || !strings.HasPrefix(loads[4], "nvidia") {
		t.Errorf("loads %q, want %q first, then nvidia", loads, wantNIC)
	}
	if len(loadsAtNetUp) < 4 || !reflect.DeepEqual(loadsAtNetUp[:4], wantNIC) {
		t.Errorf("loads when the DHCP client started: %q", loadsAtNetUp)
	}
	for _, x := range loads {
		if strings.Contains(x, "mlx5") || strings.Contains(x, "virtio") || strings.Contains(x, "igb") {
			t.Errorf("loaded %s, which no unbound NIC needs", x)
		}
	}

	r := b.onlyReport(t)
	want := []string{"libphy:loaded<ixgbe", "mdio_devres:loaded<ixgbe", "mdio:loaded<ixgbe (already loaded)", "ixgbe:loaded", "nvidia:ENODEV (no such device)"}
	if got := kmodtest.Summarize(r.Modules); len(got) < 5 || !reflect.DeepEqual(got[:5], want) {
		t.Errorf("modules %q, want %q first", got, want)
	}
	if r.Modules[3].File != "kernel/drivers/net/ethernet/intel/ixgbe/ixgbe.ko" {
		t.Errorf("ixgbe record %+v", r.Modules[3])
	}
	if len(r.Durations) == 0 || r.Durations[0].Phase != phaseNICModules {
		t.Errorf("durations %+v", r.Durations)
	}
	var nic []string
	for _, f := range r.Findings {
		if f.ID == "init.nic" {
			nic = append(nic, f.Status+": "+f.Message)
		}
	}
	wantFindings := []string{
		"info: 0000:41:00.0 (8086:1563, Ethernet): ixgbe loaded; bound to ixgbe, interface eth2",
		"info: 0000:42:00.0 (1d6a:07b1, Ethernet): no driver, and no module of this image matches " + kmodtest.MaAquantia,
	}
	if !reflect.DeepEqual(nic, wantFindings) {
		t.Errorf("init.nic findings\n got %q\nwant %q", nic, wantFindings)
	}
	for _, s := range []string{
		"peerboot: NIC 0000:41:00.0 (8086:1563, Ethernet): loading ixgbe for " + kmodtest.MaX550 + "\n",
		"peerboot: module ixgbe: loaded\n",
		"peerboot: NIC 0000:41:00.0 (8086:1563, Ethernet): ixgbe loaded; bound to ixgbe, interface eth2\n",
	} {
		if !strings.Contains(b.console.String(), s) {
			t.Errorf("console lacks %q:\n%s", s, b.console.String())
		}
	}
	if r.Verdict != selftest.Fail || findingWith(r, "driver.ixgbe") != nil {
		t.Errorf("verdict %s, findings %+v", r.Verdict, r.Findings)
	}
}

// Without a report URL nothing needs the network: no NIC module is loaded.
func TestBootNoReportURLNoNICDriver(t *testing.T) {
	l := &bindingLoader{fake: &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}}}
	b := newFakeBox(t, "console=ttyS0", l)
	pciTree(t, b)
	b.m.run(&bootState{})
	if loads := l.loads(); len(loads) != 1 || !strings.HasPrefix(loads[0], "nvidia") {
		t.Errorf("loads %q, want nvidia only", loads)
	}
	if strings.Contains(b.console.String(), "peerboot: NIC") {
		t.Errorf("console:\n%s", b.console.String())
	}
	r := b.onlyReport(t)
	if findingWith(r, "init.nic") != nil || len(r.Modules) != 5 {
		t.Errorf("findings %+v modules %q", r.Findings, kmodtest.Summarize(r.Modules))
	}
}

// A driver that does not come back in time: its entry says so, the next module is not
// started, and the boot goes on to the DHCP client and the report.
func TestLoadNICDriversBound(t *testing.T) {
	stuck := &kmodtest.Blocking{Release: make(chan struct{})}
	defer close(stuck.Release)
	b := newFakeBox(t, "peerboot.report_url=http://10.0.2.2:9/r", stuck)
	pciTree(t, b)
	b.m.nicWait = 30 * time.Millisecond
	st := &bootState{kernel: selftest.Kernel{Release: release}}
	st.record.Modules = []selftest.Module{}
	start := time.Now()
	b.m.loadNICDrivers(st)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
	got := kmodtest.Summarize(st.record.Modules)
	want := []string{
		"libphy:error<ixgbe (still loading after 30ms; the boot goes on without waiting for it)",
		"ixgbe:skipped (libphy not loaded)",
	}
	if !reflect.DeepEqual(got, want) || stuck.Calls.Load() != 1 {
		t.Errorf("got %q (%d loads), want %q", got, stuck.Calls.Load(), want)
	}
	if len(st.record.Findings) != 2 || !strings.HasSuffix(st.record.Findings[0].Message, "ixgbe skipped (libphy not loaded); still no driver bound") {
		t.Errorf("findings %+v", st.record.Findings)
	}
}

// No modules.alias: one warning that says which file the rootfs stage should have made.
func TestLoadNICDriversNoAliasFile(t *testing.T) {
	b := newFakeBox(t, "", &kmodtest.Loader{})
	pciTree(t, b)
	os.Remove(b.p("/lib/modules/" + release + "/modules.alias"))
	st := &bootState{kernel: selftest.Kernel{Release: release}}
	b.m.loadNICDrivers(st)
	if len(st.record.Findings) != 1 || st.record.Findings[0].Status != selftest.SevWarn ||
		!strings.Contains(st.record.Findings[0].Message, "cannot match 2 NIC(s) to a driver: open "+filepath.Join(b.root, "lib/modules", release, "modules.alias")) ||
		!strings.Contains(st.record.Findings[0].Hint, "depmod") {
		t.Errorf("findings %+v", st.record.Findings)
	}
	if len(st.record.Modules) != 0 {
		t.Errorf("modules %+v", st.record.Modules)
	}
}
