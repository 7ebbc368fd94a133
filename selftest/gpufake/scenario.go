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
}

func (s *Scenario) String() string { return fmt.Sprintf("FAKE %q", s.Fake) }
