// Package verdict is the self-test's rules: it judges a selftest.Report against what
// the recipe promises (Expect) and says pass or fail, each finding with its evidence and
// a next step. The report schema (package selftest) knows nothing of recipes; this
// package and its recipe adapter (recipe.go) do.
package verdict

import (
	"fmt"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// Judge applies the rules to r against e (nil: recipe unknown), appends their
// findings and settles the verdict. FromRecipe and FromPlatform make e.
func Judge(r *selftest.Report, e *Expect) {
	r.Findings = append(r.Findings, Rules(r, e)...)
	r.Settle()
}

// Rules returns the findings for a report; docs/selftest-findings.md lists every ID.
// The driver-stack rules come first:
//
//   - platform.gpus == 0 (a VM or bench box): nvidia.ko must fail with ENODEV (proof that
//     it links against this kernel and only lacks a device), libcuda must load and cuInit
//     say CUDA_ERROR_NO_DEVICE, and NVML must load (its init may report the driver not
//     loaded, which is the truth without a GPU);
//   - platform.gpus > 0: sysfs must show that many NVIDIA GPUs, nvidia.ko must load and
//     cuInit must succeed.
//
// Without a recipe the GPU count is not checked and the mode follows what sysfs shows.
// Then the P2P rules judge what the later phases measured: BAR1 against VRAM, link
// training, ACS, NVML and CUDA peer status, the copies, the above-BAR1 probe, NCCL and
// the kernel log.
func Rules(r *selftest.Report, e *Expect) []selftest.Finding {
	j := &judge{r: r, e: e}
	want := len(r.GPUs)
	if e == nil {
		j.add(selftest.SevInfo, "platform", "recipe", fmt.Sprintf("no recipe: platform unknown, judging as a box with the %d NVIDIA GPU(s) sysfs shows", want), "", "pass --recipe /etc/peerboot/recipe.toml to check the GPU count")
	} else {
		want = e.GPUs
	}
	stalled := r.DeadlineExceeded
	if r.Stall != nil && r.Stall.Phase != "" {
		stalled = r.Stall.Phase
	}
	// A phase that stalled has no answers to judge; its deadline finding says it all.
	if stalled != "" {
		j.deadline(stalled)
	}
	if e != nil && stalled != selftest.PhasePrecheck && len(r.GPUs) != want {
		j.add(selftest.SevFail, "gpus.count", "gpus", fmt.Sprintf("found %d NVIDIA GPU(s) in sysfs, recipe platform.gpus = %d", len(r.GPUs), want), fmt.Sprintf("sysfs %d, recipe %d", len(r.GPUs), want),
			"a card missing from sysfs is below the driver: seating, riser, slot power, or BIOS 'Above 4G decoding' / resizable BAR settings")
	}
	j.links()
	nvidia := findModule(r.Modules, "nvidia")
	if want == 0 {
		j.noGPUDriver(nvidia)
		if stalled != selftest.PhaseCUDA {
			j.noGPUCUDA(&r.CUDA)
		}
		if stalled != selftest.PhaseNVML {
			j.noGPUNVML(&r.NVML)
		}
	} else {
		j.gpuDriver(nvidia)
		if stalled != selftest.PhaseCUDA {
			j.gpuCUDA(&r.CUDA)
		}
		if stalled != selftest.PhaseNVML {
			j.gpuNVML(&r.NVML)
		}
	}
	for _, m := range r.Modules {
		if m.Name == "nvidia" || m.RequiredBy != "" {
			continue
		}
		if m.Result == selftest.ModError {
			j.add(selftest.SevWarn, "driver."+m.Name, m.Name, fmt.Sprintf("%s did not load: %s", m.Name, m.Error), moduleOutcome(&m), moduleHint(&m))
		}
	}
	j.versions(want > 0)
	if nvidia != nil && nvidia.Result == selftest.ModLoaded {
		j.gpusUp(nvidia)
	}
	j.gpuIdentity()
	j.bar1()
	j.bar1Leak()
	j.display()
	j.replays()
	j.iommu()
	j.acs()
	j.p2pStatus()
	j.ptx()
	j.copies()
	j.latencies()
	j.highMem()
	j.p2pModes()
	j.peerMem()
	j.injected()
	j.nccl()
	j.kernelEvents()
	return j.fs
}

// judge carries the report, the expectation and the findings so far.
type judge struct {
	r  *selftest.Report
	e  *Expect
	fs []selftest.Finding
}

func (j *judge) add(sev, id, subject, msg, evidence, hint string) {
	j.fs = append(j.fs, selftest.Finding{ID: id, Status: sev, Subject: subject, Message: msg, Evidence: evidence, Hint: hint})
}

// p2pMode is driver.p2p, "" when the recipe is unknown or does not say.
func (j *judge) p2pMode() string {
	if j.e == nil {
		return ""
	}
	return j.e.P2P
}

// p2pWanted says whether the recipe expects working P2P: a patched driver or
// require_p2p. Unknown (no recipe) is not "wanted", but not "off" either.
func (j *judge) p2pWanted() bool {
	if j.e == nil {
		return false
	}
	return j.e.RequireP2P || j.e.P2P == P2PStaticBAR1 || j.e.P2P == P2PDynamicBAR1
}

// p2pSeverity is how bad missing P2P is: fail when the recipe wants it, info when the
// recipe says the driver is stock (off), warn when nobody said.
func (j *judge) p2pSeverity() string {
	switch {
	case j.p2pWanted():
		return selftest.SevFail
	case j.e != nil && j.e.P2P == P2POff:
		return selftest.SevInfo
	}
	return selftest.SevWarn
}

// gpuLabel names GPU index i: "GPU1 (0000:02:00.0)".
func (j *judge) gpuLabel(i int) string { return j.r.GPULabel(i) }

// gpuVRAM is GPU i's memory as the report gives it (selftest.Report.GPUVRAM), else the
// recipe's platform.vram.
func gpuVRAM(r *selftest.Report, e *Expect, i int) (int64, string) {
	if v, src := r.GPUVRAM(i); v > 0 {
		return v, src
	}
	if e != nil && e.VRAMBytes > 0 {
		return e.VRAMBytes, "recipe"
	}
	return 0, ""
}

func (j *judge) bar1VRAM(i int) (bar1, vram int64, src string) {
	vram, src = gpuVRAM(j.r, j.e, i)
	return j.r.GPUBAR1(i), vram, src
}

// deadline reports the phase that was abandoned at its deadline, with the likeliest
// cause: NCCL (or CUDA peer setup) on a card whose BAR1 cannot hold its VRAM, under a
// driver that only knows static BAR1, hangs rather than failing.
func (j *judge) deadline(phase string) {
	r := j.r
	msg := "self-test stalled in " + phase
	ev := "deadline_exceeded=" + phase
	if r.Stall != nil {
		ev = fmt.Sprintf("phase=%s after_ms=%d", phase, r.Stall.AfterMS)
		if r.Stall.AfterMS > 0 {
			msg += " after " + selftest.MSDuration(r.Stall.AfterMS)
		}
		if r.Stall.Cause != "" {
			msg += ": " + r.Stall.Cause
			ev += " cause=" + r.Stall.Cause
		}
	}
	hint := "a hang here usually means the driver is waiting on a GPU that stopped answering: check kernel_log and dmesg for Xid or IOMMU faults"
	if phase == selftest.PhaseNCCL || phase == selftest.PhaseCUDA {
		mode := j.p2pMode()
		if mode == P2PStaticBAR1 || mode == "" {
			for i := range r.GPUs {
				bar1, vram, src := j.bar1VRAM(i)
				if bar1 > 0 && vram > bar1 {
					msg += "; likely cause: NCCL init on a card whose BAR1 is smaller than VRAM with a static-BAR1 driver"
					ev += fmt.Sprintf("; %s BAR1 %s < VRAM %s (%s), driver.p2p=%s", j.gpuLabel(i), selftest.HumanBytes(bar1), selftest.HumanBytes(vram), src, orDefault(mode, "unknown"))
					hint = "NCCL init on a card whose BAR1 is smaller than VRAM with a static-BAR1 driver: use the dynamic-BAR1 branch (driver.p2p = \"dynamic-bar1\")"
					break
				}
			}
		}
	}
	j.add(selftest.SevFail, "deadline", phase, msg, ev, hint)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func pairSubject(a, b int) string { return fmt.Sprintf("GPU%d-GPU%d", a, b) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func floats(fs []float64) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = fmt.Sprintf("%.2f", f)
	}
	return "[" + strings.Join(s, " ") + "]"
}
