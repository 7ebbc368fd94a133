package main

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/selftest/pcie"
	"github.com/peerboot/peerboot/selftest/pcie/pcietest"
)

// The soak's AER classification over fixture sysfs trees: counters written before the
// first round and rewritten between rounds, as the kernel would count them.
func TestSoakAER(t *testing.T) {
	type step struct {
		round int
		bdf   int // index into the tree's AER devices
		aer   pcietest.AER
	}
	for _, tt := range []struct {
		name      string
		noAER     bool // the kernel exposes no statistics
		before    []step
		steps     []step
		limit     int64
		want      []string // "sev id subject"
		stopRound int      // round whose hard() is not "" (0: none)
		msg       string
	}{
		{name: "clean", want: nil},
		{name: "counters-from-before-the-soak", before: []step{{0, 1, pcietest.AER{Correctable: map[string]int64{"BadTLP": 9}}}}, want: nil},
		{name: "correctable-growing", steps: []step{{3, 1, pcietest.AER{Correctable: map[string]int64{"BadDLLP": 2}}}, {5, 1, pcietest.AER{Correctable: map[string]int64{"BadDLLP": 7, "RxErr": 1}}}},
			want: []string{"warn soak.aer GPU0"}, msg: "GPU0 (0000:01:00.0) logged 8 correctable PCIe errors during the soak, first after round 3"},
		{name: "correctable-within-limit", limit: 10, steps: []step{{2, 1, pcietest.AER{Correctable: map[string]int64{"BadDLLP": 10}}}}, want: nil},
		{name: "correctable-on-the-port", steps: []step{{4, 0, pcietest.AER{Correctable: map[string]int64{"RxErr": 1}}}}, want: []string{"warn soak.aer port above GPU0"}},
		{name: "nonfatal", steps: []step{{2, 1, pcietest.AER{NonFatal: map[string]int64{"CmpltTO": 1}}}},
			want: []string{"fail soak.aer_uncorrectable GPU0"}, stopRound: 2, msg: "logged 1 uncorrectable PCIe errors during the soak, first after round 2"},
		{name: "fatal", steps: []step{{6, 1, pcietest.AER{Fatal: map[string]int64{"MalfTLP": 1}, Correctable: map[string]int64{"BadTLP": 4}}}},
			want: []string{"fail soak.aer_uncorrectable GPU0"}, stopRound: 6},
		{name: "no-statistics", noAER: true, want: []string{"info soak.aer "}, msg: "PCIe AER counters were not read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := pcietest.Build(dir, pcietest.EPYC4GPU()); err != nil {
				t.Fatal(err)
			}
			res, err := pcie.Scan(dir)
			if err != nil {
				t.Fatal(err)
			}
			bdfs, _ := pcie.AERDevices(res.GPUs)
			if bdfs[1] != res.GPUs[0].BDF {
				t.Fatalf("AER devices %v: want GPU0's port, then GPU0", bdfs)
			}
			if !tt.noAER {
				for _, b := range bdfs {
					if err := pcietest.WriteAER(dir, b, pcietest.AER{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, s := range tt.before {
				if err := pcietest.WriteAER(dir, bdfs[s.bdf], s.aer); err != nil {
					t.Fatal(err)
				}
			}
			a := newSoakAER(dir, res.GPUs)
			stopped := 0
			for round := 1; round <= 8 && stopped == 0; round++ {
				for _, s := range tt.steps {
					if s.round == round {
						if err := pcietest.WriteAER(dir, bdfs[s.bdf], s.aer); err != nil {
							t.Fatal(err)
						}
					}
				}
				rd := selftest.SoakRound{Round: round, AtMS: int64(round-1) * 60000}
				a.round(&rd)
				if a.hard(&rd) != "" {
					stopped = round
				}
			}
			if stopped != tt.stopRound {
				t.Errorf("soak stopped in round %d, want %d", stopped, tt.stopRound)
			}
			r := &selftest.Report{}
			judgeAER(r, a, tt.limit)
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
