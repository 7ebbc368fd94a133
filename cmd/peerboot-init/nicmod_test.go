package main

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/selftest"
)

// Alias lines as depmod wrote them for the gpu-node kernel (6.1), plus lines of the
// shapes other kernels' modules.alias hold (virtio, nvidia's own).
const aliasSample = `# Aliases extracted from modules themselves.
alias fs-efivarfs efivarfs
alias crypto-crc32c crc32c_generic
alias mdio:0000000000011100110010?????????? realtek
alias pci:v00008086d00001521sv*sd*bc*sc*i* igb
alias pci:v00008086d00001533sv*sd*bc*sc*i* igb
alias pci:v00008086d00001563sv*sd*bc*sc*i* ixgbe
alias pci:v00008086d00001572sv*sd*bc*sc*i* i40e
alias auxiliary:mlx5_core.eth mlx5_core
alias pci:v000015B3d0000101Dsv*sd*bc*sc*i* mlx5_core
alias pci:v000015B3d00001021sv*sd*bc*sc*i* mlx5_core
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias pci:v000010DEd*sv*sd*bc03sc00i00* nvidia
alias pci:v000010DEd*sv*sd*bc03sc02i00* nvidia
`

// Modaliases as sysfs shows them for real devices.
const (
	maI350       = "pci:v00008086d00001521sv000015D9sd00001521bc02sc00i00" // igb, Supermicro board
	maX550       = "pci:v00008086d00001563sv00008086sd00000001bc02sc00i00" // ixgbe
	maX710       = "pci:v00008086d00001572sv00008086sd00000001bc02sc00i00" // i40e
	maCX6Dx      = "pci:v000015B3d0000101Dsv000015B3sd00000016bc02sc00i00" // mlx5_core, ConnectX-6 Dx
	maCX7        = "pci:v000015B3d00001021sv000015B3sd00000041bc02sc00i00" // mlx5_core, ConnectX-7
	maVirtioPCI  = "pci:v00001AF4d00001041sv00001AF4sd00001041bc02sc00i00" // virtio-net (modern) on PCI
	maVirtioNet  = "virtio:d00000001v00001AF4"
	maVirtioBlk  = "virtio:d00000002v00001AF4"
	maH100       = "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00"
	maAquantia   = "pci:v00001D6Ad000007B1sv00001D6Asd00000001bc02sc00i00"
	maRealtekPHY = "mdio:00000000000111001100100100010001"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"pci:v00008086d00001521sv*sd*bc*sc*i*", maI350, true},
		{"pci:v00008086d00001533sv*sd*bc*sc*i*", maI350, false},
		{"pci:v00008086d00001521sv*sd*bc*sc*i*", maX710, false},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", maCX6Dx, true},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", maCX7, false},
		{"pci:v000015B3d00001021sv*sd*bc*sc*i*", maCX7, true},
		{"pci:v000015B3d0000101Dsv*sd*bc*sc*i*", strings.ToLower(maCX6Dx), false}, // case matters
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", maVirtioPCI, true},
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", maI350, false},
		{"virtio:d00000001v*", maVirtioNet, true},
		{"virtio:d00000001v*", maVirtioBlk, false},
		{"pci:v000010DEd*sv*sd*bc03sc02i00*", maH100, true},
		{"pci:v000010DEd*sv*sd*bc03sc00i00*", maH100, false},
		{"pci:v000010DEd*sv*sd*bc03sc02i00*", maCX7, false},
		{"mdio:0000000000011100110010??????????", maRealtekPHY, true},
		{"mdio:0000000000011100110010??????????", maRealtekPHY[:len(maRealtekPHY)-1], false},
		{"mdio:0000000000011100110010??????????", maRealtekPHY + "1", false},
		{"", "", true},
		{"", "x", false},
		{"*", "", true},
		{"?", "", false},
		{"**", "abc", true},
		{"a*b*c", "axxbyybc", true},
		{"a*b*c", "axxbyybcd", false},
		{"a*", "a", true},
		{"a*b", "a", false},
		{"*a", "bbbba", true},
		{"*?", "", false},
		{"[ab]", "a", false}, // brackets are plain bytes, as in every modpost alias
		{"[ab]", "[ab]", true},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

func TestModulesFor(t *testing.T) {
	aliases, bad := parseModulesAlias([]byte(aliasSample))
	if bad != 0 || len(aliases) != 14 {
		t.Fatalf("%d aliases, %d malformed", len(aliases), bad)
	}
	if aliases[0] != (aliasEntry{"fs-efivarfs", "efivarfs"}) {
		t.Errorf("first alias %+v", aliases[0])
	}
	for ma, want := range map[string][]string{
		maI350:      {"igb"},
		maX550:      {"ixgbe"},
		maX710:      {"i40e"},
		maCX6Dx:     {"mlx5_core"},
		maCX7:       {"mlx5_core"},
		maVirtioPCI: {"virtio_pci"},
		maVirtioNet: {"virtio_net"},
		maH100:      {"nvidia"},
		maAquantia:  nil,
		"":          nil,
	} {
		if got := modulesFor(aliases, ma); !reflect.DeepEqual(got, want) {
			t.Errorf("modulesFor(%q) = %q, want %q", ma, got, want)
		}
	}
	// Two aliases of one module matching: the module once.
	twice := append(aliases, aliasEntry{"pci:v00008086d*sv*sd*bc02sc*i*", "igb"}, aliasEntry{"pci:*", "vfio_pci_fake"})
	if got := modulesFor(twice, maI350); !reflect.DeepEqual(got, []string{"igb", "vfio_pci_fake"}) {
		t.Errorf("modulesFor with overlaps = %q", got)
	}
}

func TestParseModulesAliasMalformed(t *testing.T) {
	in := "alias a b\n\n   \n#c\nalias only-two\nsoftdep x pre: y\nalias p q r\r\nalias x-y z-w\n\talias  t\tu  \nalias last m"
	got, bad := parseModulesAlias([]byte(in))
	want := []aliasEntry{{"a", "b"}, {"x-y", "z_w"}, {"t", "u"}, {"last", "m"}}
	if !reflect.DeepEqual(got, want) || bad != 3 {
		t.Errorf("got %+v, %d malformed; want %+v, 3", got, bad, want)
	}
}

// The parser reads a file from the image: whatever bytes it holds, no panic, and every
// entry it returns is one depmod could have written.
func FuzzParseModulesAlias(f *testing.F) {
	f.Add([]byte(aliasSample))
	f.Add([]byte("alias a b\nalias\x00 \xff c\n#\nalias a b c d\n"))
	f.Add([]byte("\n\n\r\n alias x y \r"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		aliases, bad := parseModulesAlias(data)
		if lines := strings.Count(string(data), "\n") + 1; len(aliases)+bad > lines {
			t.Fatalf("%d aliases + %d malformed from %d lines", len(aliases), bad, lines)
		}
		var again strings.Builder
		for _, a := range aliases {
			if a.pattern == "" || a.module == "" || len(strings.Fields(a.pattern)) != 1 || len(strings.Fields(a.module)) != 1 || strings.Contains(a.module, "-") {
				t.Fatalf("entry %+v", a)
			}
			again.WriteString("alias " + a.pattern + " " + a.module + "\n")
			_ = globMatch(a.pattern, maI350)
		}
		round, bad2 := parseModulesAlias([]byte(again.String()))
		if bad2 != 0 || len(round) != len(aliases) || (len(round) > 0 && !reflect.DeepEqual(round, aliases)) {
			t.Fatalf("round trip: %+v (%d malformed), want %+v", round, bad2, aliases)
		}
	})
}

// globMatch agrees with path.Match where their languages agree: ASCII, no '/', no
// character classes or escapes.
func FuzzGlobMatch(f *testing.F) {
	f.Add("pci:v00008086d00001521sv*sd*bc*sc*i*", maI350)
	f.Add("a*b?c*", "aXbYcZ")
	f.Add("*?*?*", "ab")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		for _, x := range []string{pattern, s} {
			for i := 0; i < len(x); i++ {
				if x[i] >= 0x80 || x[i] == '/' || x[i] == '[' || x[i] == '\\' {
					t.Skip()
				}
			}
		}
		want, err := path.Match(pattern, s)
		if err != nil {
			t.Skip()
		}
		if got := globMatch(pattern, s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, path.Match says %v", pattern, s, got, want)
		}
	})
}

type blockingLoader struct {
	release chan struct{}
	calls   atomic.Int32
}

func (l *blockingLoader) Load(string, string) error {
	l.calls.Add(1)
	<-l.release
	return nil
}

func TestBoundedLoader(t *testing.T) {
	inner := &blockingLoader{release: make(chan struct{})}
	defer close(inner.release)
	b := &boundedLoader{inner: inner, deadline: time.Now().Add(50 * time.Millisecond), limit: 50 * time.Millisecond}
	err := b.Load("/lib/modules/x/kernel/mlx5_core.ko", "")
	if err == nil || !strings.Contains(err.Error(), "still loading after 50ms") {
		t.Errorf("stuck load: %v", err)
	}
	if err := b.Load("/lib/modules/x/kernel/igb.ko", ""); err == nil || !strings.Contains(err.Error(), "not attempted: the 50ms allowed") || inner.calls.Load() != 1 {
		t.Errorf("load after the deadline: %v (%d calls)", err, inner.calls.Load())
	}

	b = &boundedLoader{inner: panicLoader{}, deadline: time.Now().Add(time.Minute), limit: time.Minute}
	if err := b.Load("/x/igb.ko", ""); err == nil || !strings.Contains(err.Error(), "loading igb.ko panicked: loader exploded") {
		t.Errorf("panicking load: %v", err)
	}
	b = &boundedLoader{inner: &fakeLoader{errs: map[string]error{"igb": unix.EEXIST}}, deadline: time.Now().Add(time.Minute), limit: time.Minute}
	if err := b.Load("/x/igb.ko", ""); !errors.Is(err, unix.EEXIST) {
		t.Errorf("errno lost: %v", err)
	}
}

// bindingLoader is a fakeLoader (safe for the background loads of boundedLoader) that
// binds devices the way a driver's probe would: a driver link and a net/ interface.
type bindingLoader struct {
	mu     sync.Mutex
	fake   *fakeLoader
	onLoad func(name string)
}

func (l *bindingLoader) Load(path, params string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.onLoad != nil {
		l.onLoad(modName(path))
	}
	return l.fake.Load(path, params)
}

func (l *bindingLoader) loads() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.fake.loaded...)
}

// pciTree adds a GPU node's PCI devices to the fake box, and in-tree NIC modules with
// the real modules.dep lines of the gpu-node kernel.
func pciTree(t *testing.T, b *fakeBox) {
	dev := func(addr, class, vendor, device, modalias, driver string) {
		d := b.p(pciDevicesDir + "/" + addr)
		writeFile(t, d+"/class", class+"\n")
		writeFile(t, d+"/vendor", vendor+"\n")
		writeFile(t, d+"/device", device+"\n")
		writeFile(t, d+"/modalias", modalias+"\n")
		if driver != "" {
			if err := os.Symlink("../../../bus/pci/drivers/"+driver, d+"/driver"); err != nil {
				t.Fatal(err)
			}
		}
	}
	dev("0000:00:03.0", "0x020000", "0x1af4", "0x1041", maVirtioPCI, "virtio-pci") // bound: left alone
	dev("0000:41:00.0", "0x020000", "0x8086", "0x1563", maX550, "")
	dev("0000:42:00.0", "0x020000", "0x1d6a", "0x07b1", maAquantia, "")      // no driver in the image
	dev("0000:c1:00.0", "0x030200", "0x10de", "0x2330", maH100, "")          // the GPU: the recipe's
	dev("0000:c2:00.0", "0x020700", "0x15b3", "0x1021", maCX7, "")           // InfiniBand HCA
	dev("0000:c3:00.0", "0x020000", "0x10de", "0x1234", maH100+"x", "")      // NVIDIA, never ours
	dev("0000:00:1f.0", "0x060100", "0x8086", "0x7a06", "pci:v00008086", "") // not a NIC
	mods := b.p("/lib/modules/" + release)
	writeFile(t, mods+"/modules.alias", aliasSample)
	writeFile(t, mods+"/modules.dep", strings.Join([]string{
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
		writeFile(t, mods+"/kernel/"+f, "x")
	}
}

// With a report URL, the X550's driver loads before anything else, after its
// dependencies, and before the DHCP client runs; bound devices, the GPU, NVIDIA
// devices and the InfiniBand HCA are left alone.
func TestBootLoadsNICDriver(t *testing.T) {
	l := &bindingLoader{fake: &fakeLoader{errs: map[string]error{"nvidia": unix.ENODEV, "mdio": unix.EEXIST}}}
	b := newFakeBox(t, "peerboot.report_url=http://10.0.2.2:9/r", l)
	pciTree(t, b)
	l.onLoad = func(name string) {
		if name == "ixgbe" {
			d := b.p(pciDevicesDir + "/0000:41:00.0")
			os.Symlink("../../../bus/pci/drivers/ixgbe", d+"/driver")
			os.MkdirAll(d+"/net/eth2", 0o755)
		}
	}
	var loadsAtNetUp []string
	netUp := b.m.netUp
	b.m.netUp = func() (*lease, error) {
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

	lines := b.reportLines()
	if len(lines) != 1 {
		t.Fatalf("%d report lines:\n%s", len(lines), b.console.String())
	}
	r, err := selftest.DecodeLine(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"libphy:loaded<ixgbe", "mdio_devres:loaded<ixgbe", "mdio:loaded<ixgbe (already loaded)", "ixgbe:loaded", "nvidia:ENODEV (no such device)"}
	if got := summarize(r.Modules); len(got) < 5 || !reflect.DeepEqual(got[:5], want) {
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
		"info: 0000:42:00.0 (1d6a:07b1, Ethernet): no driver, and no module of this image matches " + maAquantia,
	}
	if !reflect.DeepEqual(nic, wantFindings) {
		t.Errorf("init.nic findings\n got %q\nwant %q", nic, wantFindings)
	}
	for _, s := range []string{
		"peerboot: NIC 0000:41:00.0 (8086:1563, Ethernet): loading ixgbe for " + maX550 + "\n",
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
	l := &bindingLoader{fake: &fakeLoader{errs: map[string]error{"nvidia": unix.ENODEV}}}
	b := newFakeBox(t, "console=ttyS0", l)
	pciTree(t, b)
	b.m.run(&bootState{})
	if loads := l.loads(); len(loads) != 1 || !strings.HasPrefix(loads[0], "nvidia") {
		t.Errorf("loads %q, want nvidia only", loads)
	}
	if strings.Contains(b.console.String(), "peerboot: NIC") {
		t.Errorf("console:\n%s", b.console.String())
	}
	r, err := selftest.DecodeLine(b.reportLines()[0])
	if err != nil {
		t.Fatal(err)
	}
	if findingWith(r, "init.nic") != nil || len(r.Modules) != 5 {
		t.Errorf("findings %+v modules %q", r.Findings, summarize(r.Modules))
	}
}

// A driver that does not come back in time: its entry says so, the next module is not
// started, and the boot goes on to the DHCP client and the report.
func TestLoadNICDriversBound(t *testing.T) {
	stuck := &blockingLoader{release: make(chan struct{})}
	defer close(stuck.release)
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
	got := summarize(st.record.Modules)
	want := []string{
		"libphy:error<ixgbe (still loading after 30ms; the boot goes on without waiting for it)",
		"ixgbe:skipped (libphy not loaded)",
	}
	if !reflect.DeepEqual(got, want) || stuck.calls.Load() != 1 {
		t.Errorf("got %q (%d loads), want %q", got, stuck.calls.Load(), want)
	}
	if len(st.record.Findings) != 2 || !strings.HasSuffix(st.record.Findings[0].Message, "ixgbe skipped (libphy not loaded); still no driver bound") {
		t.Errorf("findings %+v", st.record.Findings)
	}
}

// No modules.alias: one warning that says which file the rootfs stage should have made.
func TestLoadNICDriversNoAliasFile(t *testing.T) {
	b := newFakeBox(t, "", &fakeLoader{})
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
