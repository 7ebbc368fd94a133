package pcietest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

func TestBuildRefusesNonEmptyDir(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Build(dir, EPYC4GPU())
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir has %d entries after the refusal, want only the file it had", len(entries))
	}
}

func TestBuildCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := Build(dir, EPYC4GPU()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "proc", "cmdline")); err != nil {
		t.Error(err)
	}
}

func TestBuildRejectsBadLayouts(t *testing.T) {
	tests := []struct {
		name   string
		change func(l *Layout)
		want   string
	}{
		{"unknown parent", func(l *Layout) { l.GPUs[0].Parent = "0000:77:00.0" }, "neither a root nor a bridge"},
		{"duplicate device", func(l *Layout) { l.Bridges[1].BDF = l.Bridges[0].BDF }, "twice"},
		{"audio function taken", func(l *Layout) { l.GPUs[1].BDF = "0000:01:00.1" }, "function 0"},
		{"BAR1 not a power of two", func(l *Layout) { l.GPUs[0].BAR1 = 48 << 30 }, "power of two"},
		{"parent loop", func(l *Layout) {
			l.Bridges[0].Parent = l.Bridges[1].BDF
			l.Bridges[1].Parent = l.Bridges[0].BDF
		}, "loop"},
		{"GPU as parent", func(l *Layout) { l.GPUs[1].Parent = l.GPUs[0].BDF }, "not a bridge"},
		{"upper-case address", func(l *Layout) { l.GPUs[0].BDF = "0000:0A:00.0" }, "lower-case"},
		{"badly named root", func(l *Layout) { l.Roots[0].Name = "pci0" }, "named like"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := EPYC4GPU()
			tt.change(&l)
			err := Build(t.TempDir(), l)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestBuildTree checks the tree looks like the kernel's: relative links that resolve
// below dir, resource files in the kernel's format with the BARs the self-test reads.
func TestBuildTree(t *testing.T) {
	dir := t.TempDir()
	if err := Build(dir, Xeon8GPU()); err != nil {
		t.Fatal(err)
	}
	devices := filepath.Join(dir, "sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(devices)
	if err != nil {
		t.Fatal(err)
	}
	// 1 PCH root port + BMC VGA, 4 x (root port, switch up, 2 down, 2 GPUs with audio)
	if len(entries) != 2+4*8 {
		t.Errorf("%d devices, want 34", len(entries))
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(devices, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(target, "../../../devices/pci0000:") || !strings.HasSuffix(target, "/"+e.Name()) {
			t.Errorf("%s -> %s, want a relative link into ../../../devices", e.Name(), target)
		}
		if _, err := os.Stat(filepath.Join(devices, e.Name(), "config")); err != nil {
			t.Errorf("%s does not resolve: %v", e.Name(), err)
		}
	}
	want := "../../../devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:08.0/0000:1b:00.0"
	if got, _ := os.Readlink(filepath.Join(devices, "0000:1b:00.0")); got != want {
		t.Errorf("GPU link %s, want %s", got, want)
	}

	line := regexp.MustCompile(`^0x[0-9a-f]{16} 0x[0-9a-f]{16} 0x[0-9a-f]{16}$`)
	readRes := func(bdf string) []string {
		b, err := os.ReadFile(filepath.Join(devices, bdf, "resource"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		for _, l := range lines {
			if !line.MatchString(l) {
				t.Errorf("%s resource line %q", bdf, l)
			}
		}
		return lines
	}
	gpu := readRes("0000:1b:00.0")
	if len(gpu) != 13 {
		t.Errorf("GPU resource has %d lines, want 13", len(gpu))
	}
	checks := []struct {
		i     int
		size  uint64
		flags string
	}{{0, 16 << 20, "0x0000000000040200"}, {1, 32 << 30, "0x000000000014220c"}, {2, 0, "0x0000000000000000"}, {3, 32 << 20, "0x000000000014220c"}}
	for _, c := range checks {
		f := strings.Fields(gpu[c.i])
		start, err1 := strconv.ParseUint(f[0], 0, 64)
		end, err2 := strconv.ParseUint(f[1], 0, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("GPU BAR%d %q", c.i, gpu[c.i])
		}
		size := uint64(0)
		if end != 0 {
			size = end - start + 1
		}
		if size != c.size || f[2] != c.flags || (c.size != 0 && start%c.size != 0) {
			t.Errorf("GPU BAR%d %q: size %d flags %s, want size %d (aligned) flags %s", c.i, gpu[c.i], size, f[2], c.size, c.flags)
		}
	}
	if br := readRes("0000:19:08.0"); len(br) != 17 || !strings.HasSuffix(br[15], "0x0000000000102201") {
		t.Errorf("bridge resource %d lines, prefetch window %q", len(br), br[15])
	}
	if got, _ := os.ReadFile(filepath.Join(devices, "0000:19:08.0", "secondary_bus_number")); string(got) != "27\n" {
		t.Errorf("secondary bus %q, want 27 (0x1b)", got)
	}
	group, err := os.Readlink(filepath.Join(devices, "0000:1b:00.0", "iommu_group"))
	if err != nil || filepath.IsAbs(group) {
		t.Fatalf("iommu_group link %q: %v", group, err)
	}
	members, _ := os.ReadDir(filepath.Join(devices, "0000:1b:00.0", "iommu_group", "devices"))
	if len(members) != 2 || members[0].Name() != "0000:1b:00.0" || members[1].Name() != "0000:1b:00.1" {
		t.Errorf("group members %v, want the GPU and its audio function", members)
	}
	if typ, _ := os.ReadFile(filepath.Join(devices, "0000:1b:00.0", "iommu_group", "type")); string(typ) != "DMA-FQ\n" {
		t.Errorf("group type %q", typ)
	}
}

func TestTrain(t *testing.T) {
	l := Xeon8GPU()
	if err := l.Train("0000:1b:00.0", 3, 8); err != nil {
		t.Fatal(err)
	}
	if g := l.GPU("0000:1b:00.0").Link; g != (Link{3, 8, 4, 16}) {
		t.Errorf("GPU link %+v", g)
	}
	if p := l.Bridge("0000:19:08.0").Link; p != (Link{3, 8, 4, 16}) {
		t.Errorf("port above it %+v", p)
	}
	if err := l.Train("0000:18:00.0", 4, 4); err != nil { // the switch's uplink
		t.Fatal(err)
	}
	if p := l.Bridge("0000:17:00.0").Link; p.Width != 4 {
		t.Errorf("root port %+v, want x4 with the switch above", p)
	}
	if p := l.Bridge("0000:19:00.0").Link; p.Width != 16 {
		t.Errorf("other downstream port %+v changed", p)
	}
	if err := l.Train("0000:77:00.0", 4, 16); err == nil {
		t.Error("training a device not in the layout worked")
	}
}

// TestConfigLspci hands the config space written to lspci -F (pciutils), which decodes
// it with its own tables; skipped where lspci is not installed.
func TestConfigLspci(t *testing.T) {
	lspci, err := exec.LookPath("lspci")
	if err != nil {
		testguard.Skip(t, "lspci not installed (make deps installs pciutils)")
	}
	l := Xeon8GPU()
	l.Bridge("0000:19:08.0").ACSCtrl |= ACSRR
	if err := l.Train("0000:1b:00.0", 4, 8); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := Build(filepath.Join(dir, "root"), l); err != nil {
		t.Fatal(err)
	}
	// lspci -xxxx's format: a header line per device, then offset: 16 hex bytes.
	var dump strings.Builder
	for _, bdf := range []string{"0000:17:00.0", "0000:19:08.0", "0000:1b:00.0"} {
		b, err := os.ReadFile(filepath.Join(dir, "root", "sys", "bus", "pci", "devices", bdf, "config"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&dump, "%s Device\n", bdf)
		for off := 0; off < len(b); off += 16 {
			fmt.Fprintf(&dump, "%02x: % x\n", off, b[off:off+16])
		}
		dump.WriteString("\n")
	}
	path := filepath.Join(dir, "dump")
	if err := os.WriteFile(path, []byte(dump.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(lspci, "-F", path, "-vvv").CombinedOutput()
	if err != nil {
		t.Fatalf("lspci: %v\n%s", err, out)
	}
	for _, want := range []string{
		"17:00.0 PCI bridge: ",
		"Express (v2) Root Port (Slot+)",
		"ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-",
		"Bus: primary=19, secondary=1b, subordinate=1b",
		"Express (v2) Downstream Port (Slot+)",
		"ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-",
		"1b:00.0 VGA compatible controller: ",
		"Express (v2) Legacy Endpoint",
		"LnkCap:\tPort #0, Speed 16GT/s, Width x16",
		"LnkSta:\tSpeed 16GT/s, Width x8",
		"Region 1: Memory at 201000000000 (64-bit, prefetchable)",
		"BAR 1: current size: 32GB, supported: 64MB 128MB 256MB 512MB 1GB 2GB 4GB 8GB 16GB 32GB",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("lspci output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("lspci said:\n%s", out)
	}
}
