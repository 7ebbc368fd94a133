package verdict

import (
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// Kernel events: repeats of one Xid or IOMMU fault on one device are counted,
// not listed, whatever their lines say; firmware and NVRM lines are told apart
// by their text. A line without a bus id is placed on the GPU it names, by its
// full or short bus id, and on no GPU when it names none. The firmware hint
// names the recipe's driver version, or says driver.version without one.
func TestKernelEvents(t *testing.T) {
	xid := func(bdf, line string) selftest.KEvent {
		return selftest.KEvent{Kind: selftest.KEventXid, BDF: bdf, Code: 79, Line: line}
	}
	fw := func(line string) selftest.KEvent { return selftest.KEvent{Kind: selftest.KEventFirmware, Line: line} }
	nvrm := func(line string) selftest.KEvent { return selftest.KEvent{Kind: selftest.KEventNVRM, Line: line} }
	for _, c := range []struct {
		name   string
		events []selftest.KEvent
		noE    bool     // judged without a recipe
		noVer  bool     // a recipe without driver.version
		want   []string // the kernel findings' messages, in order
		hint   string   // a substring of the first one's hint
	}{
		{"one Xid twice, other lines", []selftest.KEvent{
			xid("0000:02:00.0", "NVRM: Xid (PCI:0000:02:00): 79, pid=1, GPU has fallen off the bus."),
			xid("0000:02:00.0", "NVRM: Xid (PCI:0000:02:00): 79, pid=2, GPU has fallen off the bus."),
		}, false, false, []string{"Xid 79 on GPU1 (0000:02:00.0) (2 times)"}, "fell off the bus"},
		{"one Xid on two GPUs", []selftest.KEvent{xid("0000:01:00.0", "a"), xid("0000:02:00.0", "b")}, false, false,
			[]string{"Xid 79 on GPU0 (0000:01:00.0)", "Xid 79 on GPU1 (0000:02:00.0)"}, ""},
		{"a short bus id", []selftest.KEvent{xid("02:00.0", "NVRM: Xid (PCI:0000:02:00): 79")}, false, false,
			[]string{"Xid 79 on GPU1 (0000:02:00.0)"}, ""},
		{"two firmware files", []selftest.KEvent{
			fw("nvidia 0000:01:00.0: Direct firmware load for nvidia/550.163.01/gsp_ga10x.bin failed with error -2"),
			fw("nvidia 0000:01:00.0: Direct firmware load for nvidia/550.163.01/gsp_tu10x.bin failed with error -2"),
		}, false, false, []string{"GPU firmware failed to load on GPU0 (0000:01:00.0)", "GPU firmware failed to load on GPU0 (0000:01:00.0)"},
			"firmware-nvidia-gsp of driver.version (550.163.01): /lib/firmware/nvidia/550.163.01/gsp_*.bin"},
		{"one firmware line twice", []selftest.KEvent{fw("nvidia 0000:02:00.0: firmware x failed"), fw("nvidia 0000:02:00.0: firmware x failed")}, false, false,
			[]string{"GPU firmware failed to load on GPU1 (0000:02:00.0) (2 times)"}, ""},
		{"firmware without a recipe", []selftest.KEvent{fw("nvidia: firmware x failed")}, true, false,
			[]string{"GPU firmware failed to load"}, "firmware-nvidia-gsp of driver.version (driver.version): /lib/firmware/nvidia/driver.version/"},
		{"firmware, the recipe has no driver.version", []selftest.KEvent{fw("nvidia: firmware x failed")}, false, true,
			[]string{"GPU firmware failed to load"}, "firmware-nvidia-gsp of driver.version (driver.version)"},
		{"two NVRM lines on the second GPU", []selftest.KEvent{
			nvrm("NVRM: GPU 0000:02:00.0: RmInitAdapter failed! (0x22:0x56:667)"),
			nvrm("NVRM: GPU 0000:02:00.0: rm_init_adapter failed, device minor number 1"),
		}, false, false, []string{"NVRM error on GPU1 (0000:02:00.0)", "NVRM error on GPU1 (0000:02:00.0)"}, ""},
		{"an NVRM line naming no GPU", []selftest.KEvent{nvrm("NVRM: API mismatch: the client has the version 550.54.15")}, false, false,
			[]string{"NVRM error"}, ""},
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		if c.noE {
			e = nil
		} else if c.noVer {
			e.DriverVersion = ""
		}
		r.KernelEvents = c.events
		Judge(r, e)
		var got []string
		hint := ""
		for _, f := range r.Findings {
			if !strings.HasPrefix(f.ID, "kernel.") {
				continue
			}
			if got = append(got, f.Message); len(got) == 1 {
				hint = f.Hint
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: kernel findings\n  %q\nwant\n  %q", c.name, got, c.want)
		}
		if !strings.Contains(hint, c.hint) {
			t.Errorf("%s: hint %q, want %q in it", c.name, hint, c.hint)
		}
	}
}

// NCCL_P2P_LEVEL covers the topology classes up to its own, NODE counting as
// PHB; a value NCCL would not take counts as its default, PXB.
func TestNCCLCovers(t *testing.T) {
	for _, c := range []struct {
		level, topo string
		want        bool
	}{
		{"SYS", selftest.TopoSYS, true},
		{"PHB", selftest.TopoSYS, false},
		{"PHB", selftest.TopoPHB, true},
		{"PHB", selftest.TopoNODE, true},
		{"PXB", selftest.TopoNODE, false},
		{"PXB", selftest.TopoPXB, true},
		{"PIX", selftest.TopoPXB, false},
		{"LOC", selftest.TopoPIX, false},
		{"nonsense", selftest.TopoPXB, true},
		{"nonsense", selftest.TopoPHB, false},
		{" sys ", selftest.TopoSYS, true},
		{"5", selftest.TopoSYS, true},
	} {
		if got := ncclCovers(c.level, c.topo); got != c.want {
			t.Errorf("NCCL_P2P_LEVEL=%q covers %s: %v, want %v", c.level, c.topo, got, c.want)
		}
	}
}

// numa_node -1 (a one-node box's answer) agrees with a recipe that places the
// GPU on node 0 and with nothing else; a GPU past the recipe's gpu_numa list
// is not judged.
func TestGPUNUMA(t *testing.T) {
	for _, c := range []struct {
		node, want int
		numa       int // how many GPUs gpu_numa lists
		warn       bool
	}{
		{-1, 0, 2, false},
		{-1, 1, 2, true},
		{0, 1, 2, true},
		{1, 1, 2, false},
		{1, 0, 1, false}, // GPU1 has no gpu_numa entry
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		e.GPUNUMA = []int{0, c.want}[:c.numa]
		r.GPUs[1].NUMANode = c.node
		Judge(r, e)
		got := false
		for _, f := range r.Findings {
			got = got || f.ID == "gpus.numa"
		}
		if got != c.warn {
			t.Errorf("numa_node %d, gpu_numa %v: gpus.numa %v, want %v:\n%s", c.node, e.GPUNUMA, got, c.warn, dump(r.Findings))
		}
	}
}
