package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie"
)

// soakAER follows the PCIe AER counters of every GPU and every port above it over a
// soak: read before the first round and after each. A correctable error is one the
// link layer fixed (a replayed TLP, a bad DLLP): the data arrived, but a link that
// keeps making them is marginal. A non-fatal or fatal one is data or a transaction
// the link lost.
type soakAER struct {
	root       string
	bdfs, of   []string
	start      map[string]selftest.AERCounts
	last       map[string]selftest.AERCounts
	firstRound map[string]int
	firstAt    map[string]int64
	missing    []string // devices without AER statistics
	errs       []string // statistics that could not be read or parsed
}

// newSoakAER reads every device's counters before the first round.
func newSoakAER(root string, gpus []selftest.GPU) *soakAER {
	a := &soakAER{root: root, start: map[string]selftest.AERCounts{}, last: map[string]selftest.AERCounts{},
		firstRound: map[string]int{}, firstAt: map[string]int64{}}
	bdfs, of := pcie.AERDevices(gpus)
	for i, b := range bdfs {
		c, err := pcie.ReadAER(root, b)
		switch {
		case errors.Is(err, pcie.ErrNoAER):
			a.missing = append(a.missing, fmt.Sprintf("%s (%s)", b, of[i]))
			continue
		case err != nil:
			a.errs = append(a.errs, err.Error())
			continue
		}
		a.bdfs, a.of = append(a.bdfs, b), append(a.of, of[i])
		a.start[b], a.last[b] = c, c
	}
	return a
}

// round reads the counters after a round and records on rd what grew during it.
func (a *soakAER) round(rd *selftest.SoakRound) {
	for _, b := range a.bdfs {
		c, err := pcie.ReadAER(a.root, b)
		if err != nil {
			// A device that stops answering mid-soak (it fell off the bus) is for the
			// link and kernel-log checks to name; keep its last reading.
			continue
		}
		p := a.last[b]
		g := selftest.SoakAERGrowth{BDF: b, Correctable: max(c.Correctable-p.Correctable, 0), NonFatal: max(c.NonFatal-p.NonFatal, 0), Fatal: max(c.Fatal-p.Fatal, 0)}
		if g.Correctable+g.NonFatal+g.Fatal > 0 {
			rd.AER = append(rd.AER, g)
			if _, ok := a.firstRound[b]; !ok {
				a.firstRound[b], a.firstAt[b] = rd.Round, rd.AtMS
			}
		}
		a.last[b] = c
	}
}

// hard says whether the round's AER growth ends the soak: an uncorrectable error.
func (a *soakAER) hard(rd *selftest.SoakRound) string {
	for _, g := range rd.AER {
		if g.NonFatal+g.Fatal > 0 {
			return fmt.Sprintf("PCIe AER: %s (%s) logged %d non-fatal and %d fatal uncorrectable errors", g.BDF, a.name(g.BDF), g.NonFatal, g.Fatal)
		}
	}
	return ""
}

func (a *soakAER) name(bdf string) string {
	if i := slices.Index(a.bdfs, bdf); i >= 0 {
		return a.of[i]
	}
	return "?"
}

// summary is every read device's counters at the start and the end.
func (a *soakAER) summary() []selftest.SoakAER {
	var out []selftest.SoakAER
	for i, b := range a.bdfs {
		out = append(out, selftest.SoakAER{BDF: b, Of: a.of[i], Start: a.start[b], End: a.last[b], FirstRound: a.firstRound[b], FirstAtMS: a.firstAt[b]})
	}
	return out
}

// grown names the per-error counters that grew from s to e: "correctable BadDLLP +3".
func grown(s, e selftest.AERCounts) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(e.Detail)) {
		if d := e.Detail[k] - s.Detail[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s +%d", k, d))
		}
	}
	return strings.Join(parts, ", ")
}

// judgeAER files the AER findings: uncorrectable growth fails, correctable growth
// beyond the limit warns, and a soak that could read no counters says so.
func judgeAER(r *selftest.Report, a *soakAER, limit int64) {
	if a == nil {
		return
	}
	add := func(sev, id, subject, msg, evidence, hint string) {
		r.Findings = append(r.Findings, selftest.Finding{ID: id, Status: sev, Subject: subject, Message: msg, Evidence: evidence, Hint: hint})
	}
	for _, x := range a.summary() {
		unc := (x.End.NonFatal - x.Start.NonFatal) + (x.End.Fatal - x.Start.Fatal)
		cor := x.End.Correctable - x.Start.Correctable
		evidence := fmt.Sprintf("%s: correctable %d -> %d, non-fatal %d -> %d, fatal %d -> %d", x.BDF, x.Start.Correctable, x.End.Correctable, x.Start.NonFatal, x.End.NonFatal, x.Start.Fatal, x.End.Fatal)
		if g := grown(x.Start, x.End); g != "" {
			evidence += " (" + g + ")"
		}
		switch {
		case unc > 0:
			add(selftest.SevFail, "soak.aer_uncorrectable", x.Of,
				fmt.Sprintf("%s (%s) logged %d uncorrectable PCIe errors during the soak, first after round %d (%s)", x.Of, x.BDF, unc, x.FirstRound, soakAt(x.FirstAtMS)),
				evidence,
				"the link lost data or a transaction: reseat the card and the riser/retimer on this path (or replace them) and soak again; the kernel log's AER lines name the error")
		case cor > limit:
			add(selftest.SevWarn, "soak.aer", x.Of,
				fmt.Sprintf("%s (%s) logged %d correctable PCIe errors during the soak, first after round %d (%s)", x.Of, x.BDF, cor, x.FirstRound, soakAt(x.FirstAtMS)),
				fmt.Sprintf("%s; the limit is %d (selftest.soak.max_aer_correctable)", evidence, limit),
				"the link layer fixed them, but a link that keeps making errors is marginal: reseat the card, check the riser or retimer and its cabling, try another slot; RxErr, BadTLP and BadDLLP point at signal integrity")
		}
	}
	if len(a.bdfs) == 0 && (len(a.missing) > 0 || len(a.errs) > 0) {
		add(selftest.SevInfo, "soak.aer", "", fmt.Sprintf("PCIe AER counters were not read: %s", strings.Join(append(a.errs, "no statistics for "+strings.Join(a.missing, ", ")), "; ")), "",
			"the kernel needs CONFIG_PCIEAER and AER not turned off (pci=noaer, or firmware-first AER in the BIOS); the kernel log's AER lines are still read")
	} else if len(a.errs) > 0 {
		add(selftest.SevInfo, "soak.aer", "", "some PCIe AER counters were not read: "+strings.Join(a.errs, "; "), "", "")
	}
}
