package main

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// The soak's ECC and row-remap classification: the self-test's NVML reading is each
// GPU's start, every round's sample is compared with it.
func TestSoakECC(t *testing.T) {
	u := func(v uint64) *uint64 { return &v }
	b := func(v bool) *bool { return &v }
	on := func(corr, unc uint64) *selftest.ECC {
		return &selftest.ECC{Mode: selftest.ECCOn, Corrected: u(corr), Uncorrected: u(unc), RemapPending: b(false), RemapFailure: b(false)}
	}
	for _, tt := range []struct {
		name      string
		start     *selftest.ECC         // the one-shot's reading of GPU0
		rounds    map[int]*selftest.ECC // GPU0's sample from that round on
		want      []string
		stopRound int
		msg       string
	}{
		{name: "clean-h200", start: on(0, 0), rounds: map[int]*selftest.ECC{1: on(0, 0)}},
		{name: "corrected-only", start: on(0, 0), rounds: map[int]*selftest.ECC{1: on(0, 0), 3: on(12, 0)}},
		{name: "uncorrectable", start: on(2, 1), rounds: map[int]*selftest.ECC{1: on(2, 1), 4: on(3, 3)},
			want: []string{"fail soak.ecc GPU0"}, stopRound: 4, msg: "GPU0's memory reported 2 uncorrectable ECC errors during the soak, first in round 4"},
		{name: "remap-pending", start: on(0, 0), rounds: map[int]*selftest.ECC{1: on(0, 0), 2: {Mode: selftest.ECCOn, Corrected: u(0), Uncorrected: u(0), RemapPending: b(true), RemapFailure: b(false)}},
			want: []string{"warn soak.row_remap GPU0"}, msg: "reboot to apply"},
		{name: "remap-failure", start: on(0, 0), rounds: map[int]*selftest.ECC{5: {Mode: selftest.ECCOn, Corrected: u(0), Uncorrected: u(0), RemapPending: b(true), RemapFailure: b(true)}},
			want: []string{"fail soak.row_remap GPU0"}, stopRound: 5},
		{name: "geforce-ecc-off", rounds: map[int]*selftest.ECC{1: {Mode: selftest.ECCOff}},
			want: []string{"info soak.ecc "}, msg: "memory errors were not counted on GPU0 with ECC off"},
		{name: "geforce-no-ecc", rounds: map[int]*selftest.ECC{1: {Mode: selftest.ECCNone}},
			want: []string{"info soak.ecc "}, msg: "GPU0 without ECC"},
		{name: "library-without-ecc", rounds: map[int]*selftest.ECC{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := selftest.GPU{NVML: &selftest.NVMLGPU{ECC: tt.start}}
			e := newSoakECC([]selftest.GPU{g})
			var cur *selftest.ECC
			stopped := 0
			for round := 1; round <= 6 && stopped == 0; round++ {
				if x, ok := tt.rounds[round]; ok {
					cur = x
				}
				rd := selftest.SoakRound{Round: round, AtMS: int64(round-1) * 1000, GPUs: []selftest.SoakGPU{{GPU: 0, ECC: cur}}}
				e.round(&rd)
				if e.hard(&rd) != "" {
					stopped = round
				}
			}
			if stopped != tt.stopRound {
				t.Errorf("soak stopped in round %d, want %d", stopped, tt.stopRound)
			}
			r := &selftest.Report{}
			judgeECC(r, e)
			var got []string
			for _, f := range r.Findings {
				got = append(got, f.Status+" "+f.ID+" "+f.Subject)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("findings %q, want %q (%+v)", got, tt.want, r.Findings)
			}
			if tt.msg != "" && (len(r.Findings) == 0 || !strings.Contains(r.Findings[0].Message, tt.msg)) {
				t.Errorf("finding %+v does not say %q", r.Findings, tt.msg)
			}
		})
	}
}
