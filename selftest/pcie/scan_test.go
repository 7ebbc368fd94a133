package pcie

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const gen4x16 = 31.5077

func scan(t *testing.T, l pcietest.Layout) *Result {
	t.Helper()
	dir := t.TempDir()
	if err := pcietest.Build(dir, l); err != nil {
		t.Fatal(err)
	}
	r, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// matrix renders the pair classes as nvidia-smi topo -m does, one row per GPU.
func matrix(r *Result) []string {
	n := len(r.GPUs)
	cells := make([][]string, n)
	for i := range cells {
		cells[i] = make([]string, n)
		cells[i][i] = "X"
	}
	for _, p := range r.Pairs {
		cells[p.A][p.B], cells[p.B][p.A] = p.Topology, p.Topology
	}
	rows := make([]string, n)
	for i := range cells {
		rows[i] = strings.Join(cells[i], " ")
	}
	return rows
}

func pair(t *testing.T, r *Result, a, b int) selftest.Pair {
	t.Helper()
	for _, p := range r.Pairs {
		if p.A == a && p.B == b {
			return p
		}
	}
	t.Fatalf("no pair %d-%d", a, b)
	return selftest.Pair{}
}

// phbLayout has two GPUs on two root ports of one host bridge.
func phbLayout() pcietest.Layout {
	l := pcietest.EPYC4GPU()
	l.GPUs[1].Parent = "0000:00:03.1"
	l.GPUs[1].BDF = "0000:02:00.0"
	l.Bridges = append(l.Bridges, pcietest.Bridge{BDF: "0000:00:03.1", Parent: "pci0000:00", Type: pcietest.RootPort,
		Vendor: pcietest.VendorAMD, Device: pcietest.DeviceRomeGPPPort, Link: pcietest.Gen4x16, ACSCap: 0x5f, ACSCtrl: 0x11})
	return l
}

// pxbLayout moves the Xeon's first two switches below a third one on a new root port
// (10:00.0 > 11:00.0 > 12:00.0, 12:01.0); GPUs on different leaf switches meet at the
// top switch. Root ports 17:00.0 and 38:00.0 stay behind, empty.
func pxbLayout() pcietest.Layout {
	l := pcietest.Xeon8GPU()
	sw := func(bdf, parent string, typ int) pcietest.Bridge {
		return pcietest.Bridge{BDF: bdf, Parent: parent, Type: typ, Vendor: pcietest.VendorBroadcom,
			Device: pcietest.DevicePEX880xx, Link: pcietest.Gen4x16, ACSCap: 0x7f, ACSCtrl: pcietest.ACSSV | pcietest.ACSUF}
	}
	l.Bridges = append(l.Bridges, sw("0000:10:00.0", "pci0000:00", pcietest.RootPort),
		sw("0000:11:00.0", "0000:10:00.0", pcietest.SwitchUp),
		sw("0000:12:00.0", "0000:11:00.0", pcietest.SwitchDown), sw("0000:12:01.0", "0000:11:00.0", pcietest.SwitchDown))
	l.Bridge("0000:18:00.0").Parent = "0000:12:00.0"
	l.Bridge("0000:39:00.0").Parent = "0000:12:01.0"
	return l
}

func TestScanLayouts(t *testing.T) {
	tests := []struct {
		name     string
		layout   pcietest.Layout
		gpus     []string
		upstream int // bridges above each GPU
		matrix   []string
		mode     string
		units    int
		cmdline  []string
	}{
		{"xeon-8gpu", pcietest.Xeon8GPU(),
			[]string{"0000:1a:00.0", "0000:1b:00.0", "0000:3b:00.0", "0000:3c:00.0", "0000:9b:00.0", "0000:9c:00.0", "0000:bb:00.0", "0000:bc:00.0"},
			3, []string{
				"X PIX NODE NODE SYS SYS SYS SYS",
				"PIX X NODE NODE SYS SYS SYS SYS",
				"NODE NODE X PIX SYS SYS SYS SYS",
				"NODE NODE PIX X SYS SYS SYS SYS",
				"SYS SYS SYS SYS X PIX NODE NODE",
				"SYS SYS SYS SYS PIX X NODE NODE",
				"SYS SYS SYS SYS NODE NODE X PIX",
				"SYS SYS SYS SYS NODE NODE PIX X",
			}, IOMMUTranslated, 5, []string{"intel_iommu=on", "pci=disable_acs_redir=pci:1000:c010"}},
		{"epyc-4gpu", pcietest.EPYC4GPU(),
			[]string{"0000:01:00.0", "0000:21:00.0", "0000:41:00.0", "0000:61:00.0"},
			1, []string{
				"X NODE NODE NODE",
				"NODE X NODE NODE",
				"NODE NODE X NODE",
				"NODE NODE NODE X",
			}, IOMMUPassthrough, 4, []string{"amd_iommu=on", "iommu=pt", "pci=disable_acs_redir=pci:1022:1483"}},
		{"phb", phbLayout(),
			[]string{"0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:61:00.0"},
			1, []string{
				"X PHB NODE NODE",
				"PHB X NODE NODE",
				"NODE NODE X NODE",
				"NODE NODE NODE X",
			}, IOMMUPassthrough, 4, []string{"amd_iommu=on", "iommu=pt", "pci=disable_acs_redir=pci:1022:1483"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := scan(t, tt.layout)
			var bdfs []string
			groups := map[int]bool{}
			for _, g := range r.GPUs {
				bdfs = append(bdfs, g.BDF)
				if g.BAR1Bytes != 32<<30 {
					t.Errorf("%s BAR1 = %d, want 32 GiB", g.BDF, g.BAR1Bytes)
				}
				if g.Vendor != "0x10de" || g.Device != "0x2684" || g.Class != "0x030000" {
					t.Errorf("%s ids %s %s %s", g.BDF, g.Vendor, g.Device, g.Class)
				}
				if g.Link != (selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}) {
					t.Errorf("%s link %+v", g.BDF, g.Link)
				}
				if len(g.Upstream) != tt.upstream {
					t.Errorf("%s has %d bridges above, want %d", g.BDF, len(g.Upstream), tt.upstream)
				}
				if g.IOMMUGroup < 0 || groups[g.IOMMUGroup] {
					t.Errorf("%s IOMMU group %d: want its own", g.BDF, g.IOMMUGroup)
				}
				groups[g.IOMMUGroup] = true
				if !strings.HasPrefix(g.RootBus, "pci0000:") || !strings.HasPrefix(g.Upstream[0].BDF, "0000:"+g.RootBus[8:]) {
					t.Errorf("%s root bus %q, root port %s", g.BDF, g.RootBus, g.Upstream[0].BDF)
				}
			}
			if !reflect.DeepEqual(bdfs, tt.gpus) {
				t.Errorf("GPUs = %v, want %v (the BMC VGA and audio functions are not GPUs)", bdfs, tt.gpus)
			}
			if got := matrix(r); !reflect.DeepEqual(got, tt.matrix) {
				t.Errorf("topology:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.matrix, "\n"))
			}
			n := len(r.GPUs)
			if len(r.Pairs) != n*(n-1)/2 {
				t.Errorf("%d pairs for %d GPUs", len(r.Pairs), n)
			}
			if r.IOMMU.Mode != tt.mode || !r.IOMMU.Active || len(r.IOMMU.Units) != tt.units {
				t.Errorf("IOMMU mode %q active %v units %v", r.IOMMU.Mode, r.IOMMU.Active, r.IOMMU.Units)
			}
			if !reflect.DeepEqual(r.IOMMU.Cmdline, tt.cmdline) {
				t.Errorf("cmdline params %q, want %q", r.IOMMU.Cmdline, tt.cmdline)
			}
			for i := range r.GPUs {
				for j := i + 1; j < n; j++ {
					if got := PathLinkGBps(r, i, j); math.Abs(got-gen4x16) > 1e-3 {
						t.Errorf("PathLinkGBps(%d, %d) = %.3f, want %.3f", i, j, got, gen4x16)
					}
				}
			}
		})
	}
}

// TestScanPaths checks the bridges listed between GPUs and which carry ACS redirect,
// on the Xeon layout and one with nested switches.
func TestScanPaths(t *testing.T) {
	x := scan(t, pcietest.Xeon8GPU())
	px := scan(t, pxbLayout())
	tests := []struct {
		name  string
		r     *Result
		a, b  int
		topo  string
		path  string
		acsOn string
	}{
		{"one switch", x, 0, 1, "PIX", "0000:19:00.0 0000:19:08.0", ""},
		{"two switches, one socket", x, 1, 2, "NODE",
			"0000:19:08.0 0000:18:00.0 0000:17:00.0 0000:38:00.0 0000:39:00.0 0000:3a:00.0", "0000:17:00.0 0000:38:00.0"},
		{"across sockets", x, 3, 4, "SYS",
			"0000:3a:08.0 0000:39:00.0 0000:38:00.0 0000:98:00.0 0000:99:00.0 0000:9a:00.0", "0000:38:00.0 0000:98:00.0"},
		{"nested switches", px, 1, 2, "PXB",
			"0000:19:08.0 0000:18:00.0 0000:12:00.0 0000:12:01.0 0000:39:00.0 0000:3a:00.0", ""},
		{"nested, same leaf switch", px, 2, 3, "PIX", "0000:3a:00.0 0000:3a:08.0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pair(t, tt.r, tt.a, tt.b)
			if p.Topology != tt.topo {
				t.Errorf("topology %s, want %s", p.Topology, tt.topo)
			}
			if got := strings.Join(p.Path, " "); got != tt.path {
				t.Errorf("path\n got %s\nwant %s", got, tt.path)
			}
			if got := strings.Join(p.ACSOn, " "); got != tt.acsOn {
				t.Errorf("ACS redirect on %q, want %q", got, tt.acsOn)
			}
		})
	}
	g := x.GPUs[0]
	if g.Upstream[0].ACS == nil || g.Upstream[1].ACS != nil || g.Upstream[2].ACS == nil || g.Upstream[2].ACS.Redirects() {
		t.Errorf("GPU0 upstream ACS: root %+v, switch up %+v, switch down %+v", g.Upstream[0].ACS, g.Upstream[1].ACS, g.Upstream[2].ACS)
	}
}

// TestScanFaults builds each platform with one fault injected and checks Scan shows it.
func TestScanFaults(t *testing.T) {
	tests := []struct {
		name   string
		layout func() pcietest.Layout
		check  func(t *testing.T, r *Result)
	}{
		{"ACS RR and CR on a switch downstream port", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			l.Bridge("0000:19:08.0").ACSCtrl |= pcietest.ACSRR | pcietest.ACSCR
			return l
		}, func(t *testing.T, r *Result) {
			if got := pair(t, r, 0, 1).ACSOn; !reflect.DeepEqual(got, []string{"0000:19:08.0"}) {
				t.Errorf("pair 0-1 ACS redirect on %v, want the port", got)
			}
			if got := pair(t, r, 1, 2).ACSOn; !reflect.DeepEqual(got, []string{"0000:19:08.0", "0000:17:00.0", "0000:38:00.0"}) {
				t.Errorf("pair 1-2 ACS redirect on %v", got)
			}
			if got := pair(t, r, 2, 3).ACSOn; len(got) != 0 {
				t.Errorf("pair 2-3 ACS redirect on %v, want none", got)
			}
			if a := r.GPUs[1].Upstream[2].ACS; a == nil || !a.RequestRedirect || !a.CompletionRedirect || a.EgressControl {
				t.Errorf("port ACS = %+v", a)
			}
		}},
		{"egress control alone counts", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			l.Bridge("0000:ba:00.0").ACSCtrl |= pcietest.ACSEC
			return l
		}, func(t *testing.T, r *Result) {
			if got := pair(t, r, 6, 7).ACSOn; !reflect.DeepEqual(got, []string{"0000:ba:00.0"}) {
				t.Errorf("pair 6-7 ACS redirect on %v", got)
			}
		}},
		{"GPU trained Gen4 x8", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			if err := l.Train("0000:1b:00.0", 4, 8); err != nil {
				panic(err)
			}
			return l
		}, func(t *testing.T, r *Result) {
			if l := r.GPUs[1].Link; l.CurrentWidth != 8 || l.MaxWidth != 16 || l.CurrentSpeed != "16.0 GT/s PCIe" {
				t.Errorf("GPU1 link %+v, want x8 of x16 at 16 GT/s", l)
			}
			if w := r.GPUs[1].Upstream[2].Link.CurrentWidth; w != 8 {
				t.Errorf("its switch port shows x%d", w)
			}
			for _, c := range []struct {
				a, b int
				want float64
			}{{0, 1, 15.7538}, {1, 5, 15.7538}, {0, 2, gen4x16}} {
				if got := PathLinkGBps(r, c.a, c.b); math.Abs(got-c.want) > 1e-3 {
					t.Errorf("PathLinkGBps(%d, %d) = %.3f, want %.3f", c.a, c.b, got, c.want)
				}
			}
		}},
		{"switch uplink trained x8", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			if err := l.Train("0000:18:00.0", 4, 8); err != nil {
				panic(err)
			}
			return l
		}, func(t *testing.T, r *Result) {
			if got := PathLinkGBps(r, 0, 1); math.Abs(got-gen4x16) > 1e-3 {
				t.Errorf("pair under the switch: %.3f GB/s, want %.3f: its traffic stays below the uplink", got, gen4x16)
			}
			if got := PathLinkGBps(r, 0, 2); math.Abs(got-15.7538) > 1e-3 {
				t.Errorf("pair through the uplink: %.3f GB/s, want 15.754", got)
			}
		}},
		{"GPU idling at 2.5 GT/s", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			if err := l.Train("0000:01:00.0", 1, 16); err != nil {
				panic(err)
			}
			return l
		}, func(t *testing.T, r *Result) {
			if r.GPUs[0].Link.CurrentSpeed != "2.5 GT/s PCIe" {
				t.Errorf("link %+v", r.GPUs[0].Link)
			}
			if got := PathLinkGBps(r, 0, 1); math.Abs(got-gen4x16) > 1e-3 {
				t.Errorf("PathLinkGBps = %.3f, want %.3f: a copy wakes the link to its max speed", got, gen4x16)
			}
		}},
		{"BAR1 256 MiB", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.GPU("0000:41:00.0").BAR1 = 256 << 20
			return l
		}, func(t *testing.T, r *Result) {
			for i, want := range []int64{32 << 30, 32 << 30, 256 << 20, 32 << 30} {
				if r.GPUs[i].BAR1Bytes != want {
					t.Errorf("GPU%d BAR1 = %d, want %d", i, r.GPUs[i].BAR1Bytes, want)
				}
			}
		}},
		{"IOMMU translated", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.IOMMU.GroupType = "DMA"
			return l
		}, func(t *testing.T, r *Result) {
			if r.IOMMU.Mode != IOMMUTranslated || !reflect.DeepEqual(r.IOMMU.GroupTypes, []string{"DMA", "DMA", "DMA", "DMA"}) {
				t.Errorf("mode %q types %v", r.IOMMU.Mode, r.IOMMU.GroupTypes)
			}
		}},
		{"IOMMU mixed", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.GPU("0000:61:00.0").GroupType = "DMA-FQ"
			return l
		}, func(t *testing.T, r *Result) {
			if r.IOMMU.Mode != IOMMUMixed || !reflect.DeepEqual(r.IOMMU.GroupTypes, []string{"identity", "identity", "identity", "DMA-FQ"}) {
				t.Errorf("mode %q types %v", r.IOMMU.Mode, r.IOMMU.GroupTypes)
			}
		}},
		{"IOMMU off", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.IOMMU = pcietest.IOMMU{}
			l.Cmdline = "console=ttyS0 amd_iommu=off"
			return l
		}, func(t *testing.T, r *Result) {
			if r.IOMMU.Mode != IOMMUOff || r.IOMMU.Active || len(r.IOMMU.Units) != 0 {
				t.Errorf("IOMMU %+v", r.IOMMU)
			}
			for _, g := range r.GPUs {
				if g.IOMMUGroup != -1 {
					t.Errorf("%s in group %d", g.BDF, g.IOMMUGroup)
				}
			}
			if !reflect.DeepEqual(r.IOMMU.Cmdline, []string{"amd_iommu=off"}) {
				t.Errorf("cmdline %v", r.IOMMU.Cmdline)
			}
		}},
		{"kernel without group types, iommu=pt", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.IOMMU.GroupType = ""
			return l
		}, func(t *testing.T, r *Result) {
			if r.IOMMU.Mode != IOMMUPassthrough {
				t.Errorf("mode %q, want passthrough from the command line", r.IOMMU.Mode)
			}
		}},
		{"kernel without group types, nothing said", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.IOMMU.GroupType = ""
			l.Cmdline = "console=ttyS0 amd_iommu=on"
			return l
		}, func(t *testing.T, r *Result) {
			if r.IOMMU.Mode != "" {
				t.Errorf("mode %q, want unknown", r.IOMMU.Mode)
			}
		}},
		{"command line changed", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			l.Cmdline = `BOOT_IMAGE=/vmlinuz intel-iommu=on,sm_on iommu.passthrough=1 iommu.strict=0 ` +
				`pci=realloc,disable_acs_redir=0000:19:00.0 pci=noaer pcie_acs_override=downstream note="iommu=off here" -- iommu=pt`
			return l
		}, func(t *testing.T, r *Result) {
			want := []string{"intel-iommu=on,sm_on", "iommu.passthrough=1", "iommu.strict=0",
				"pci=realloc,disable_acs_redir=0000:19:00.0", "pcie_acs_override=downstream"}
			if !reflect.DeepEqual(r.IOMMU.Cmdline, want) {
				t.Errorf("cmdline params\n got %q\nwant %q", r.IOMMU.Cmdline, want)
			}
		}},
		{"no NUMA information", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			for i := range l.Roots {
				l.Roots[i].NUMA = -1
			}
			return l
		}, func(t *testing.T, r *Result) {
			if got := pair(t, r, 0, 7).Topology; got != selftest.TopoNODE {
				t.Errorf("cross-socket pair without numa nodes: %s, want NODE", got)
			}
			if r.GPUs[0].NUMANode != -1 {
				t.Errorf("numa %d", r.GPUs[0].NUMANode)
			}
		}},
		{"NUMA known on one side only", func() pcietest.Layout {
			l := pcietest.EPYC4GPU()
			l.Roots[3].NUMA = -1
			return l
		}, func(t *testing.T, r *Result) {
			if got := pair(t, r, 0, 3).Topology; got != selftest.TopoSYS {
				t.Errorf("got %s, want SYS", got)
			}
			if got := pair(t, r, 0, 1).Topology; got != selftest.TopoNODE {
				t.Errorf("got %s, want NODE", got)
			}
		}},
		{"64-byte config reads", func() pcietest.Layout {
			l := pcietest.Xeon8GPU()
			l.Bridge("0000:19:08.0").ACSCtrl |= pcietest.ACSRR
			l.ConfigSize = 64
			return l
		}, func(t *testing.T, r *Result) {
			for _, g := range r.GPUs {
				for _, br := range g.Upstream {
					if br.ACS != nil {
						t.Errorf("%s ACS %+v from 64 bytes", br.BDF, br.ACS)
					}
					if br.Link.CurrentWidth != 16 {
						t.Errorf("%s link %+v: the link files do not need config space", br.BDF, br.Link)
					}
				}
			}
			for _, p := range r.Pairs {
				if len(p.ACSOn) != 0 {
					t.Errorf("pair %d-%d ACS on %v", p.A, p.B, p.ACSOn)
				}
			}
			if got := matrix(r)[0]; got != "X PIX NODE NODE SYS SYS SYS SYS" {
				t.Errorf("topology row 0: %s", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each builds its own tree
			tt.check(t, scan(t, tt.layout()))
		})
	}
}

func TestScanEmpty(t *testing.T) {
	r, err := Scan(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GPUs) != 0 || len(r.Pairs) != 0 || r.IOMMU.Mode != "" || r.IOMMU.Active {
		t.Errorf("empty root: %+v", r)
	}
	if _, err := Scan(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a root that does not exist scanned without error")
	}
}

func TestPathLinkGBpsUnknown(t *testing.T) {
	r := scan(t, pcietest.EPYC4GPU())
	for _, c := range [][2]int{{0, 0}, {-1, 1}, {0, 4}} {
		if got := PathLinkGBps(r, c[0], c[1]); got != 0 {
			t.Errorf("PathLinkGBps(%d, %d) = %v, want 0", c[0], c[1], got)
		}
	}
	if got := PathLinkGBps(r, 1, 0); math.Abs(got-gen4x16) > 1e-3 {
		t.Errorf("reversed order: %v", got)
	}
	if PathLinkGBps(nil, 0, 1) != 0 {
		t.Error("nil result")
	}
	for i := range r.GPUs { // nothing known anywhere on the path
		r.GPUs[i].Link = selftest.Link{CurrentSpeed: "Unknown", MaxSpeed: "Unknown"}
		for j := range r.GPUs[i].Upstream {
			r.GPUs[i].Upstream[j].Link = selftest.Link{}
		}
	}
	if got := PathLinkGBps(r, 0, 1); got != 0 {
		t.Errorf("all links unknown: %v, want 0", got)
	}
}

// TestScanGolden pins the whole Xeon result as JSON; rerun with -update after a
// deliberate change and read the diff.
func TestScanGolden(t *testing.T) {
	r := scan(t, pcietest.Xeon8GPU())
	got, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "scan-xeon-8gpu.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Scan result differs from %s; run go test -update and review the diff", path)
	}
}

// handDevice writes an NVIDIA GPU's vendor and class files at root/path and links
// sys/bus/pci/devices/BDF (the path's last component) to it, for trees pcietest does
// not build: paths with no host bridge, VMD domains, links that leave the tree. It
// writes no numa_node, as a kernel without CONFIG_NUMA has none.
func handDevice(t *testing.T, root, path string) {
	t.Helper()
	dir := filepath.Join(root, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"vendor": "0x10de\n", "class": "0x030200\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	devices := filepath.Join(root, "sys", "bus", "pci", "devices")
	if err := os.MkdirAll(devices, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(devices, filepath.Base(dir))); err != nil {
		t.Fatal(err)
	}
}

// TestScanHandTrees: the host bridge is the last pciDDDD:BB component of a device's
// path and the bridges are every address below it, wherever the path lies under
// root; a path that leaves root gives neither, since those files are not the box
// asked about. Files a kernel may lack read as unknown (-1), not as node or group 1.
func TestScanHandTrees(t *testing.T) {
	tests := []struct {
		name     string
		path     string // below root
		rootBus  string
		upstream string
	}{
		{"no host bridge in the path", "sys/devices/platform/0000:00:01.0/0000:01:00.0", "", "0000:00:01.0"},
		{"VMD domain below a device", "sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0",
			"pci10000:e0", "10000:e0:1d.0"},
		{"host bridge first below root", "pci0000:00/0000:00:01.0/0000:01:00.0", "pci0000:00", "0000:00:01.0"},
		{"one bridge directly below root", "0000:00:01.0/0000:01:00.0", "", "0000:00:01.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			handDevice(t, root, tt.path)
			r, err := Scan(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.GPUs) != 1 {
				t.Fatalf("%d GPUs, want 1", len(r.GPUs))
			}
			g := r.GPUs[0]
			var up []string
			for _, b := range g.Upstream {
				up = append(up, b.BDF)
			}
			if g.RootBus != tt.rootBus || strings.Join(up, " ") != tt.upstream {
				t.Errorf("root bus %q upstream %q, want %q %q", g.RootBus, up, tt.rootBus, tt.upstream)
			}
			if g.NUMANode != -1 || g.IOMMUGroup != -1 {
				t.Errorf("numa node %d iommu group %d without the files, want -1 -1", g.NUMANode, g.IOMMUGroup)
			}
		})
	}

	t.Run("link leaving the tree", func(t *testing.T) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		// The device lies in base/outside, a sibling of root; its link (absolute, as
		// handDevice makes it) moves under root.
		handDevice(t, base, "outside/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(base, "sys"), filepath.Join(root, "sys")); err != nil {
			t.Fatal(err)
		}
		r, err := Scan(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GPUs) != 1 || r.GPUs[0].RootBus != "" || len(r.GPUs[0].Upstream) != 0 {
			t.Errorf("GPUs %+v, want one with no root bus and no bridges", r.GPUs)
		}
	})

	t.Run("group link not naming a number", func(t *testing.T) {
		root := t.TempDir()
		path := "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
		handDevice(t, root, path)
		if err := os.Symlink("../../../../../kernel/iommu_groups/none", filepath.Join(root, path, "iommu_group")); err != nil {
			t.Fatal(err)
		}
		r, err := Scan(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GPUs) != 1 || r.GPUs[0].IOMMUGroup != -1 {
			t.Errorf("GPUs %+v, want one in no IOMMU group", r.GPUs)
		}
	})
}

// TestScanBridgeBesideGPU: conventional PCI bridges (QEMU's pci-bridge) can carry a
// GPU and another bridge on one bus, so one GPU's bridges are a prefix of another's,
// in either BDF order. The pairs meet at the shared port: one switch, PIX.
func TestScanBridgeBesideGPU(t *testing.T) {
	br := func(bdf, parent string, typ int) pcietest.Bridge {
		return pcietest.Bridge{BDF: bdf, Parent: parent, Type: typ, Vendor: pcietest.VendorIntel, Device: 0x0001, Link: pcietest.Gen4x16}
	}
	gpu := func(bdf, parent string) pcietest.GPU {
		return pcietest.GPU{BDF: bdf, Parent: parent, Link: pcietest.Gen4x16, BAR1: 256 << 20}
	}
	l := pcietest.Layout{
		Roots: []pcietest.Root{{Name: "pci0000:00", NUMA: 0}},
		Bridges: []pcietest.Bridge{br("0000:00:03.0", "pci0000:00", pcietest.RootPort),
			br("0000:05:00.0", "0000:00:03.0", pcietest.SwitchDown), br("0000:07:01.0", "0000:00:03.0", pcietest.SwitchDown)},
		GPUs: []pcietest.GPU{gpu("0000:06:00.0", "0000:05:00.0"), gpu("0000:07:00.0", "0000:00:03.0"), gpu("0000:08:00.0", "0000:07:01.0")},
	}
	r := scan(t, l)
	for _, c := range []struct {
		a, b int
		path string
	}{
		{0, 1, "0000:05:00.0"}, // the deeper GPU sorts first
		{1, 2, "0000:07:01.0"}, // the shallower GPU sorts first
		{0, 2, "0000:05:00.0 0000:07:01.0"},
	} {
		p := pair(t, r, c.a, c.b)
		if p.Topology != selftest.TopoPIX || strings.Join(p.Path, " ") != c.path {
			t.Errorf("pair %d-%d: %s via %q, want PIX via %q", c.a, c.b, p.Topology, p.Path, c.path)
		}
	}
}

// TestScanVMRootBus: a VM's GPUs on the root bus, no ports between them (PHB), in
// IOMMU groups 0 and 1: group 0 is a group like any other.
func TestScanVMRootBus(t *testing.T) {
	l := pcietest.Layout{
		Roots: []pcietest.Root{{Name: "pci0000:00", NUMA: 0}},
		GPUs: []pcietest.GPU{{BDF: "0000:00:02.0", Parent: "pci0000:00", Link: pcietest.Gen4x16, BAR1: 256 << 20},
			{BDF: "0000:00:03.0", Parent: "pci0000:00", Link: pcietest.Gen4x16, BAR1: 256 << 20}},
		IOMMU: pcietest.IOMMU{Units: []string{"dmar0"}, GroupType: "DMA"},
	}
	r := scan(t, l)
	if len(r.GPUs) != 2 || r.GPUs[0].IOMMUGroup != 0 || r.GPUs[1].IOMMUGroup != 1 {
		t.Fatalf("GPUs %+v, want two in groups 0 and 1", r.GPUs)
	}
	if !reflect.DeepEqual(r.IOMMU.GroupTypes, []string{"DMA", "DMA"}) || r.IOMMU.Mode != IOMMUTranslated {
		t.Errorf("group types %q mode %q, want DMA for both, translated", r.IOMMU.GroupTypes, r.IOMMU.Mode)
	}
	if p := pair(t, r, 0, 1); p.Topology != selftest.TopoPHB || len(p.Path) != 0 {
		t.Errorf("pair %+v, want PHB with no bridges", p)
	}
}

// TestScanIOMMUGroupsDecide: with GPUs, only their groups set the mode (a bridge in a
// DMA group does not make passthrough GPUs mixed); without GPUs every group stands for
// the box, and a group type outranks the command line.
func TestScanIOMMUGroupsDecide(t *testing.T) {
	l := pcietest.EPYC4GPU() // its command line says iommu=pt
	l.IOMMU.GroupType = "DMA"
	for i := range l.GPUs {
		l.GPUs[i].GroupType = "identity"
	}
	if r := scan(t, l); r.IOMMU.Mode != IOMMUPassthrough {
		t.Errorf("GPUs in identity groups, bridges in DMA ones: mode %q, want passthrough", r.IOMMU.Mode)
	}
	l.GPUs = nil
	if r := scan(t, l); r.IOMMU.Mode != IOMMUTranslated {
		t.Errorf("no GPUs, DMA groups, iommu=pt: mode %q, want translated from the groups", r.IOMMU.Mode)
	}
}

// TestPathLinkGBpsCrafted: results not from a scan. A link of unknown speed or width
// leaves the known ones to decide; a width of 0 falls back to the maximum; pairs that
// name a GPU twice or one that is not there give 0, never a panic.
func TestPathLinkGBpsCrafted(t *testing.T) {
	g4 := selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", CurrentWidth: 16, MaxWidth: 16}
	res := func(a, b selftest.Link, pairs ...selftest.Pair) *Result {
		return &Result{GPUs: []selftest.GPU{{BDF: "0000:01:00.0", Link: a}, {BDF: "0000:02:00.0", Link: b}}, Pairs: pairs}
	}
	ok := selftest.Pair{A: 0, B: 1}
	if got := PathLinkGBps(res(g4, selftest.Link{CurrentSpeed: "Unknown", MaxSpeed: "Unknown"}, ok), 0, 1); math.Abs(got-gen4x16) > 1e-3 {
		t.Errorf("second GPU's link unknown: %.3f, want the first's %.3f", got, gen4x16)
	}
	noWidth := selftest.Link{CurrentSpeed: "16.0 GT/s PCIe", MaxSpeed: "16.0 GT/s PCIe", MaxWidth: 8}
	if got := PathLinkGBps(res(noWidth, g4, ok), 0, 1); math.Abs(got-15.7538) > 1e-3 {
		t.Errorf("current width unread, max x8: %.3f, want 15.754 (x8)", got)
	}
	bad := res(g4, g4, selftest.Pair{A: 0, B: 0}, selftest.Pair{A: -1, B: 1}, selftest.Pair{A: 0, B: 2})
	for _, c := range [][2]int{{0, 0}, {-1, 1}, {1, -1}, {2, 0}, {0, 2}} {
		if got := PathLinkGBps(bad, c[0], c[1]); got != 0 {
			t.Errorf("PathLinkGBps(%d, %d) over pairs naming missing GPUs = %v, want 0", c[0], c[1], got)
		}
	}
}
