package pcinet

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// device adds one PCI device to a fake /sys/bus/pci/devices; driver "" leaves it unbound.
func device(t *testing.T, dir, addr, class, vendor, modalias, driver string) {
	t.Helper()
	d := filepath.Join(dir, addr)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"class": class, "vendor": vendor, "device": "0x1563", "modalias": modalias} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if driver != "" {
		if err := os.Symlink("../../../bus/pci/drivers/"+driver, filepath.Join(d, "driver")); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUnboundAndOutcome(t *testing.T) {
	dir := t.TempDir()
	device(t, dir, "0000:00:03.0", "0x020000", "0x1af4", "pci:v00001AF4", "virtio-pci") // bound
	device(t, dir, "0000:41:00.0", "0x020000", "0x8086", "pci:v00008086d00001563", "")
	device(t, dir, "0000:42:00.0", "0x028000", "0x8086", "", "")                   // no modalias
	device(t, dir, "0000:c1:00.0", "0x030200", "0x10de", "pci:v000010DE", "")      // a GPU
	device(t, dir, "0000:c2:00.0", "0x020700", "0x15b3", "pci:v000015B3", "")      // InfiniBand
	device(t, dir, "0000:c3:00.0", "0x020000", "0x10de", "pci:v000010DEd1234", "") // NVIDIA's, never ours
	nics, bound, err := Unbound(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range nics {
		got = append(got, d.String())
	}
	want := []string{"0000:41:00.0 (8086:1563, Ethernet)", "0000:42:00.0 (8086:1563, network controller)"}
	if !reflect.DeepEqual(got, want) || bound != 1 {
		t.Fatalf("Unbound = %q, %d bound; want %q, 1", got, bound, want)
	}

	x550 := nics[0]
	results := []selftest.Module{{Name: "mdio", RequiredBy: "ixgbe", Result: selftest.ModLoaded}, {Name: "ixgbe", Result: selftest.ModLoaded}}
	for _, tc := range []struct {
		name    string
		d       NIC
		matched []string
		bind    func()
		want    string
	}{
		{"no modalias", nics[1], nil, nil, "0000:42:00.0 (8086:1563, network controller): no driver and no modalias in sysfs"},
		{"no module", x550, nil, nil, "0000:41:00.0 (8086:1563, Ethernet): no driver, and no module of this image matches pci:v00008086d00001563"},
		{"loaded, unbound", x550, []string{"ixgbe"}, nil, "0000:41:00.0 (8086:1563, Ethernet): ixgbe loaded; still no driver bound"},
		{"bound, no interface", x550, []string{"ixgbe"}, func() {
			os.Symlink("../../../bus/pci/drivers/ixgbe", filepath.Join(dir, x550.Addr, "driver"))
		}, "0000:41:00.0 (8086:1563, Ethernet): ixgbe loaded; bound to ixgbe, no network interface yet"},
		{"bound with interface", x550, []string{"ixgbe"}, func() {
			os.MkdirAll(filepath.Join(dir, x550.Addr, "net", "eth2"), 0o755)
		}, "0000:41:00.0 (8086:1563, Ethernet): ixgbe loaded; bound to ixgbe, interface eth2"},
	} {
		if tc.bind != nil {
			tc.bind()
		}
		if msg, _ := Outcome(dir, tc.d, tc.matched, results); msg != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, msg, tc.want)
		}
	}
}
