package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// soakECC follows each GPU's memory-error state over a soak: the volatile ECC counts
// and row remapping, from the self-test's NVML reading (before the first round) to
// every round's sample.
type soakECC struct {
	start, last map[int]*selftest.ECC
	// The first round (and its start) that saw uncorrected errors grow, a pending
	// remap or a failed one.
	uncorrected, pending, failure map[int]soakPoint
}

// newSoakECC takes the one-shot self-test's NVML reading as each GPU's start.
func newSoakECC(gpus []selftest.GPU) *soakECC {
	e := &soakECC{start: map[int]*selftest.ECC{}, last: map[int]*selftest.ECC{}, uncorrected: map[int]soakPoint{}, pending: map[int]soakPoint{}, failure: map[int]soakPoint{}}
	for i, g := range gpus {
		if g.NVML != nil && g.NVML.ECC != nil {
			e.start[i] = g.NVML.ECC
		}
	}
	return e
}

func (e *soakECC) round(rd *selftest.SoakRound) {
	for _, g := range rd.GPUs {
		x := g.ECC
		if x == nil {
			continue
		}
		if e.start[g.GPU] == nil {
			e.start[g.GPU] = x
		}
		at := soakPoint{round: rd.Round, atMS: rd.AtMS}
		s := e.start[g.GPU]
		if _, seen := e.uncorrected[g.GPU]; !seen && x.Uncorrected != nil && *x.Uncorrected > deref(s.Uncorrected) {
			e.uncorrected[g.GPU] = at
		}
		if _, seen := e.pending[g.GPU]; !seen && x.RemapPending != nil && *x.RemapPending {
			e.pending[g.GPU] = at
		}
		if _, seen := e.failure[g.GPU]; !seen && x.RemapFailure != nil && *x.RemapFailure {
			e.failure[g.GPU] = at
		}
		e.last[g.GPU] = x
	}
}

// hard says whether the round's samples end the soak: a GPU whose memory returned
// uncorrectable errors or could not remap a row is not one to keep loading.
func (e *soakECC) hard(rd *selftest.SoakRound) string {
	for _, g := range rd.GPUs {
		if p, ok := e.uncorrected[g.GPU]; ok && p.round == rd.Round {
			return fmt.Sprintf("GPU%d's memory reported uncorrectable ECC errors (%d -> %d)", g.GPU, deref(e.start[g.GPU].Uncorrected), deref(g.ECC.Uncorrected))
		}
		if p, ok := e.failure[g.GPU]; ok && p.round == rd.Round {
			return fmt.Sprintf("GPU%d reports a row-remapping failure", g.GPU)
		}
	}
	return ""
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

// judgeECC files the ECC findings: uncorrectable errors gained or a failed remap fail,
// a pending remap warns (reboot to apply), and GPUs whose errors are not counted at
// all (ECC off or absent: most GeForce cards) are said so once.
func judgeECC(r *selftest.Report, e *soakECC) {
	if e == nil {
		return
	}
	add := func(sev, id, subject, msg, evidence, hint string) {
		r.Findings = append(r.Findings, selftest.Finding{ID: id, Status: sev, Subject: subject, Message: msg, Evidence: evidence, Hint: hint})
	}
	gpus := slices.Sorted(func(yield func(int) bool) {
		for g := range e.last {
			if !yield(g) {
				return
			}
		}
	})
	var off, none []string
	for _, g := range gpus {
		s, l := e.start[g], e.last[g]
		subject := fmt.Sprintf("GPU%d", g)
		switch l.Mode {
		case selftest.ECCOff:
			off = append(off, subject)
		case selftest.ECCNone:
			none = append(none, subject)
		}
		if p, ok := e.uncorrected[g]; ok {
			add(selftest.SevFail, "soak.ecc", subject,
				fmt.Sprintf("GPU%d's memory reported %d uncorrectable ECC errors during the soak, first in round %d (%s)", g, deref(l.Uncorrected)-deref(s.Uncorrected), p.round, soakAt(p.atMS)),
				fmt.Sprintf("nvmlDeviceGetTotalEccErrors volatile uncorrected %d -> %d, corrected %d -> %d", deref(s.Uncorrected), deref(l.Uncorrected), deref(s.Corrected), deref(l.Corrected)),
				"the card's memory lost data under load: do not put it in service; reboot (a pending row remap is applied at the next GPU reset) and soak again, and return the card if it repeats")
		}
		if p, ok := e.failure[g]; ok {
			add(selftest.SevFail, "soak.row_remap", subject,
				fmt.Sprintf("GPU%d reports a row-remapping failure in round %d (%s): a bad memory row could not be replaced", g, p.round, soakAt(p.atMS)),
				fmt.Sprintf("nvmlDeviceGetRemappedRows: %d rows remapped for correctable, %d for uncorrectable errors, failure", deref(l.RemappedCorrectable), deref(l.RemappedUncorrectable)),
				"the card has no spare rows left for its bad memory: return it (RMA)")
		} else if p, ok := e.pending[g]; ok {
			add(selftest.SevWarn, "soak.row_remap", subject,
				fmt.Sprintf("GPU%d has a row remap pending since round %d (%s): reboot to apply", g, p.round, soakAt(p.atMS)),
				fmt.Sprintf("nvmlDeviceGetRemappedRows: %d rows remapped for correctable, %d for uncorrectable errors, pending", deref(l.RemappedCorrectable), deref(l.RemappedUncorrectable)),
				"the remap takes effect at the next GPU reset: reboot (or reset the GPU) and soak again; until then the bad row is still in use")
		}
	}
	var parts []string
	if len(off) > 0 {
		parts = append(parts, strings.Join(off, ", ")+" with ECC off")
	}
	if len(none) > 0 {
		parts = append(parts, strings.Join(none, ", ")+" without ECC")
	}
	if len(parts) > 0 {
		add(selftest.SevInfo, "soak.ecc", "",
			fmt.Sprintf("memory errors were not counted on %s: a bad bit shows only as a corrupted copy (soak.corrupt)", strings.Join(parts, "; ")),
			"nvmlDeviceGetEccMode", "normal for GeForce cards: most have no ECC or ship with it off; where nvidia-smi -q lists an ECC mode, nvidia-smi -e 1 and a reboot turn it on (at some memory bandwidth)")
	}
}
