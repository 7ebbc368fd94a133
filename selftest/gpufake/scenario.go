package gpufake

import "fmt"

// Scenario is a FAKE p2pcheck run's script, in raw symptoms only: the numbers the
// FAKE libnvidia-ml's entry points return (nvmlReturn_t of nvmlInit_v2,
// nvmlGpuP2PStatus_t and nvmlGpuTopologyLevel_t per pair, run through the real
// selftest/nvml probe), the box the FAKE CUDA driver and NCCL emulate (devices, rates,
// raw faults such as a flipped word or an error code, the NCCL INFO lines libnccl
// logs), kernel-log lines "printed" while the NVML phase runs, a phase that hangs.
// Nothing in it is a finding or an interpreted answer: the real CUDA engine, NCCL
// sweep, log parser, kernel-log classifier and verdict have to get from these to the
// report. p2pcheck reads it with --fake, in a binary built with -tags gpufake only.
type Scenario struct {
	Fake  string            `json:"fake"` // what it simulates, for the test log
	NVML  *FakeNVML         `json:"nvml"` // the FAKE libnvidia-ml
	Box   *FakeConfig       `json:"box"`  // the FAKE libcuda and libnccl
	Hang  string            `json:"hang"` // phase that never returns
	Kmsg  []string          `json:"kmsg"`
	Error map[string]string `json:"error"` // phase -> error its probe returns
	// Soak is what changes over a soak's rounds (p2pcheck --soak), in the order of
	// Round: the box of round N is the scenario's with every step up to N applied.
	Soak []SoakStep `json:"soak,omitempty"`
}

// SoakStep changes the FAKE box from round Round of a soak on (rounds count from 1),
// again in raw symptoms only: copy rates, a raw fault, NVML's link and replay answers,
// kernel-log lines.
type SoakStep struct {
	Round int `json:"round"`
	// PairGBps[src][dst] replaces the box's rate of that pair where > 0, from this
	// round on (a link that degrades).
	PairGBps [][]float64 `json:"pair_gbps,omitempty"`
	// Faults are injected in this round only (a flipped word in round 500).
	Faults []Fault `json:"faults,omitempty"`
	// NVMLGPUs replaces NVML's answers for the GPUs of the same BDF from this round on
	// (a link retrained to x8, a replay counter that rose).
	NVMLGPUs []FakeNVMLGPU `json:"nvml_gpus,omitempty"`
	// Kmsg is "printed" to the kernel log during this round's copies.
	Kmsg []string `json:"kmsg,omitempty"`
}

// AtRound is the scenario as it stands in soak round round (0: the one-shot self-test,
// no step applied), and the kernel lines that round prints.
func (s Scenario) AtRound(round int) (Scenario, []string) {
	if round <= 0 || len(s.Soak) == 0 {
		return s, nil
	}
	var kmsg []string
	if s.Box != nil {
		box := *s.Box
		box.Faults = append([]Fault(nil), box.Faults...)
		box.PairGBps = clone2(box.PairGBps)
		s.Box = &box
	}
	if s.NVML != nil {
		n := *s.NVML
		n.GPUs = append([]FakeNVMLGPU(nil), n.GPUs...)
		s.NVML = &n
	}
	for _, st := range s.Soak {
		if st.Round > round {
			continue
		}
		if s.Box != nil {
			for i, row := range st.PairGBps {
				for j, v := range row {
					if v <= 0 {
						continue
					}
					for len(s.Box.PairGBps) <= i {
						s.Box.PairGBps = append(s.Box.PairGBps, nil)
					}
					for len(s.Box.PairGBps[i]) <= j {
						s.Box.PairGBps[i] = append(s.Box.PairGBps[i], 0)
					}
					s.Box.PairGBps[i][j] = v
				}
			}
			if st.Round == round {
				s.Box.Faults = append(s.Box.Faults, st.Faults...)
			}
		}
		if s.NVML != nil {
			for _, g := range st.NVMLGPUs {
				for k := range s.NVML.GPUs {
					if s.NVML.GPUs[k].BDF == g.BDF {
						s.NVML.GPUs[k] = g
					}
				}
			}
		}
		if st.Round == round {
			kmsg = append(kmsg, st.Kmsg...)
		}
	}
	return s, kmsg
}

func clone2(m [][]float64) [][]float64 {
	if m == nil {
		return nil
	}
	out := make([][]float64, len(m))
	for i, row := range m {
		out[i] = append([]float64(nil), row...)
	}
	return out
}

func (s *Scenario) String() string { return fmt.Sprintf("FAKE %q", s.Fake) }
