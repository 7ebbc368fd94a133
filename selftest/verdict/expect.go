package verdict

// The values of driver.p2p (recipe.P2POff and the others spell them the same).
const (
	P2POff         = "off"
	P2PStaticBAR1  = "static-bar1"
	P2PDynamicBAR1 = "dynamic-bar1"
)

// Expect is what the recipe promises about the box and the image: the verdict rules
// judge a report against it. The zero value of a field means "not stated", and the
// rule that needs it is skipped or softened.
type Expect struct {
	GPUs      int    // platform.gpus
	GPUModel  string // platform.gpu_model, matched as a substring of the NVML or CUDA name
	VRAMBytes int64  // platform.vram, per GPU
	BAR1Bytes int64  // platform.bar1, per GPU
	GPUNUMA   []int  // platform.gpu_numa, by GPU index

	DriverVersion string                       // driver.version
	P2P           string                       // driver.p2p: off, static-bar1, dynamic-bar1; "" unknown
	DriverParams  map[string]map[string]string // driver.params
	// ModeLineChips are the chips (selftest.Report.P2PChip) whose GPUs the image's
	// nvidia.ko names in a "peerboot-p2p: bar1-mode" kernel line at BAR1 setup: the
	// chips peerboot's P2P series for driver.version covers; nil when the image's
	// driver logs none (p2p off, a recipe's own patches, a branch without the series).
	ModeLineChips []string

	RequireP2P   bool                 // selftest.require_p2p
	NoVerify     bool                 // selftest.verify = false: copies are not checked
	MinBusBWGBps float64              // selftest.min_busbw_gbps; 0: not checked
	Thresholds   map[string]Threshold // selftest.thresholds, by topology class
	Env          map[string]string    // the recipe's env (NCCL_* and others)
}

// Threshold is one topology class's floor on copy bandwidth and ceiling on small-write
// latency (selftest.thresholds.CLASS); 0 means not checked.
type Threshold struct {
	UnidirGBps   float64 // min_unidir_gbps
	BidirGBps    float64 // min_bidir_gbps
	MaxLatencyUS float64 // max_latency_us
}
