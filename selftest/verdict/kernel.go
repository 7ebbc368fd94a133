package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// kernelEvents fails on every Xid, IOMMU fault, firmware failure and NVRM error the
// kernel logged during the run; repeats of the same line shape are counted, not listed.
func (j *judge) kernelEvents() {
	type agg struct {
		ev    selftest.KEvent
		count int
	}
	var order []*agg
	seen := map[string]*agg{}
	for _, ev := range j.r.KernelEvents {
		key := fmt.Sprintf("%s|%s|%d", ev.Kind, ev.BDF, ev.Code)
		if ev.Kind == selftest.KEventNVRM || ev.Kind == selftest.KEventFirmware {
			key += "|" + ev.Line
		}
		if a := seen[key]; a != nil {
			a.count++
			continue
		}
		a := &agg{ev: ev, count: 1}
		seen[key] = a
		order = append(order, a)
	}
	for _, a := range order {
		ev := a.ev
		where := ""
		if ev.BDF != "" {
			where = " on " + j.bdfLabel(ev.BDF)
		} else if i := j.gpuInLine(ev.Line); i >= 0 {
			where = " on " + j.gpuLabel(i)
		}
		times := ""
		if a.count > 1 {
			times = fmt.Sprintf(" (%d times)", a.count)
		}
		subject := orDefault(ev.BDF, ev.Kind)
		switch ev.Kind {
		case selftest.KEventXid:
			j.add(selftest.SevFail, "kernel.xid", fmt.Sprintf("xid %d %s", ev.Code, orDefault(ev.BDF, "?")), fmt.Sprintf("Xid %d%s%s", ev.Code, where, times), ev.Line, xidHint(ev.Code))
		case selftest.KEventIOMMU:
			j.add(selftest.SevFail, "kernel.iommu_fault", subject, "IOMMU fault"+where+times, ev.Line,
				"the IOMMU blocked a peer DMA: the driver must IOMMU-map peer windows (dynamic-BAR1 branch), or boot with iommu=pt")
		case selftest.KEventFirmware:
			ver := "driver.version"
			if j.e != nil && j.e.DriverVersion != "" {
				ver = j.e.DriverVersion
			}
			j.add(selftest.SevFail, "kernel.firmware", subject, "GPU firmware failed to load"+where+times, ev.Line,
				fmt.Sprintf("the image needs firmware-nvidia-gsp of driver.version (%s): /lib/firmware/nvidia/%s/gsp_*.bin", ver, ver))
		case selftest.KEventNVRM:
			j.add(selftest.SevFail, "kernel.nvrm", subject, "NVRM error"+where+times, ev.Line, "the driver's own error text: see the line, and kernel_log around it")
		default:
			j.add(selftest.SevFail, "kernel."+ev.Kind, subject, "kernel reported "+ev.Kind+where+times, ev.Line, "see the line in dmesg")
		}
	}
}

// gpuInLine finds the GPU a kernel-log line names by bus id, -1 if none.
func (j *judge) gpuInLine(line string) int {
	l := strings.ToLower(line)
	for i, g := range j.r.GPUs {
		if g.BDF != "" && strings.Contains(l, strings.ToLower(g.BDF)) {
			return i
		}
	}
	return -1
}

// bdfLabel names a bus id as a GPU when it is one.
func (j *judge) bdfLabel(bdf string) string {
	for i, g := range j.r.GPUs {
		if strings.EqualFold(g.BDF, bdf) || strings.HasSuffix(strings.ToLower(g.BDF), strings.ToLower(bdf)) {
			return j.gpuLabel(i)
		}
	}
	return bdf
}

func xidHint(code int) string {
	switch code {
	case 79:
		return "Xid 79: the GPU fell off the bus: power, riser or slot; check pcie.link and pcie.replay"
	case 31:
		return "Xid 31: a GPU memory-management fault: a bad peer mapping if it came during the copies"
	case 13, 43:
		return "an engine or channel fault: if it came during the peer copies, the peer mapping is broken"
	case 119, 120:
		return "GSP timed out or failed: check firmware-nvidia-gsp matches driver.version"
	case 48, 63, 64, 94, 95:
		return "a memory (ECC / row-remap) error: the card's memory is failing"
	}
	return "see NVIDIA's Xid catalogue for this number; an Xid during the self-test is never normal"
}
