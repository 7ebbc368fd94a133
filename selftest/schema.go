package selftest

// Schema-2 parts of the report: PCIe topology, peer status, measured copies, NCCL and
// kernel-log events. The probes that fill them live in the sub-packages (pcie, nvml,
// cuda, nccl, kmsg); this file is only the shape, so the static init can carry it.

// Topology classes of a GPU pair, nvidia-smi's letters; NCCL's path types PIX, PXB,
// PHB and SYS match (NODE is PHB to NCCL). Ordered from nearest to farthest.
const (
	TopoPIX  = "PIX"  // one PCIe switch between them
	TopoPXB  = "PXB"  // several switches, no host bridge
	TopoPHB  = "PHB"  // through one host bridge (root complex)
	TopoNODE = "NODE" // between host bridges of one NUMA node
	TopoSYS  = "SYS"  // across sockets (UPI / xGMI)
)

// TopoRank orders the classes; unknown classes rank last.
func TopoRank(class string) int {
	switch class {
	case TopoPIX:
		return 1
	case TopoPXB:
		return 2
	case TopoPHB:
		return 3
	case TopoNODE:
		return 4
	case TopoSYS:
		return 5
	}
	return 9
}

// Bridge is one PCIe port on the path from a root port down to a GPU.
type Bridge struct {
	BDF  string `json:"bdf"`
	Link Link   `json:"link"`
	ACS  *ACS   `json:"acs,omitempty"` // nil: the port has no ACS capability (or config space was unreadable)
}

// ACS is a port's Access Control Services capability and control registers, read from
// PCIe extended config space (capability id 0x000d, cap at +4, ctrl at +6).
type ACS struct {
	Cap  uint16 `json:"cap"`
	Ctrl uint16 `json:"ctrl"`
	// The three control bits that send peer traffic up to the root complex; they are
	// exactly what pci=disable_acs_redir= clears.
	RequestRedirect    bool `json:"rr"`
	CompletionRedirect bool `json:"cr"`
	EgressControl      bool `json:"ec"`
}

// Redirects reports whether any of RR, CR or EC is on.
func (a *ACS) Redirects() bool {
	return a != nil && (a.RequestRedirect || a.CompletionRedirect || a.EgressControl)
}

// Pair is one unordered pair of GPUs (indexes into Report.GPUs, A < B) and everything
// known about the path between them. Ordered measurements are in Report.Copies.
type Pair struct {
	A        int      `json:"a"`
	B        int      `json:"b"`
	Topology string   `json:"topology"`        // from sysfs: PIX PXB PHB NODE SYS
	Path     []string `json:"path"`            // BDFs of the bridges between them, A's side first
	ACSOn    []string `json:"acs_redirect_on"` // bridges on Path with RR/CR/EC set
	// From NVML, "" when it did not answer.
	NVMLTopology string `json:"nvml_topology"` // PIX PXB PHB NODE SYS
	P2PRead      string `json:"p2p_read"`      // OK CNS GNS TNS NS DRK U
	P2PWrite     string `json:"p2p_write"`
	// P2PNVLink is NVML's P2P status over NVLink ("OK": the pair talks over NVLink, so
	// the PCIe path's rate does not bound its copies).
	P2PNVLink string `json:"p2p_nvlink,omitempty"`
	// From CUDA: cuDeviceCanAccessPeer both ways. nil: not asked.
	CanAccessPeer *bool `json:"can_access_peer"`
}

// IOMMU is the translation state the kernel runs with.
type IOMMU struct {
	Active  bool     `json:"active"`  // /sys/class/iommu has units
	Units   []string `json:"units"`   // dmar0, ivhd0, ...
	Mode    string   `json:"mode"`    // "off", "passthrough", "translated", "mixed", "" (unknown)
	Cmdline []string `json:"cmdline"` // iommu-related kernel parameters as given
	// The default domain type of each GPU's group, by GPU index: identity, DMA, DMA-FQ.
	GroupTypes []string `json:"group_types"`
}

// NVMLGPU is what NVML says about one GPU (GPU.NVML).
type NVMLGPU struct {
	Name          string `json:"name"`
	BAR1Total     int64  `json:"bar1_total"`
	BAR1Used      int64  `json:"bar1_used"`
	FBTotal       int64  `json:"fb_total"`
	LinkGen       int    `json:"link_gen"` // current
	LinkWidth     int    `json:"link_width"`
	MaxLinkGen    int    `json:"max_link_gen"`
	MaxLinkWidth  int    `json:"max_link_width"`
	ReplayCounter int64  `json:"replay_counter"` // -1: not supported
	// nvmlDeviceGetDisplayMode / DisplayActive (nvmlEnableState_t: 1 enabled); nil:
	// not answered.
	DisplayMode   *int `json:"display_mode,omitempty"`
	DisplayActive *int `json:"display_active,omitempty"`
	// Sensors, for the soak's samples (docs/burn-in.md); nil: not answered (NOT_SUPPORTED,
	// or a library without the call). TemperatureC is the GPU die (NVML_TEMPERATURE_GPU),
	// the clocks NVML_CLOCK_SM and NVML_CLOCK_MEM now, PowerMW the board's draw, and
	// ThrottleReasons nvmlDeviceGetCurrentClocksThrottleReasons' bit mask (nvml.h's
	// nvmlClocksThrottleReason* constants: 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW
	// thermal, 0x40 HW thermal, 0x80 HW power brake).
	TemperatureC    *int    `json:"temperature_c,omitempty"`
	SMClockMHz      *int    `json:"sm_clock_mhz,omitempty"`
	MemClockMHz     *int    `json:"mem_clock_mhz,omitempty"`
	PowerMW         *int    `json:"power_mw,omitempty"`
	ThrottleReasons *uint64 `json:"throttle_reasons,omitempty"`
	// ECC is the card's memory-error state; nil: NVML answered none of it.
	ECC *ECC `json:"ecc,omitempty"`
}

// ECC is a GPU's memory-error state as NVML tells it (docs/burn-in.md).
type ECC struct {
	// Mode is nvmlDeviceGetEccMode's current state: "on", "off", or "none" when the
	// card has no ECC to turn on (NOT_SUPPORTED). GeForce cards ship with it off or
	// without it: then memory errors are not counted at all.
	Mode string `json:"mode"`
	// Corrected and Uncorrected are nvmlDeviceGetTotalEccErrors' volatile counts (since
	// the driver loaded); nil: not answered.
	Corrected   *uint64 `json:"corrected,omitempty"`
	Uncorrected *uint64 `json:"uncorrected,omitempty"`
	// Row remapping (nvmlDeviceGetRemappedRows; A100, H100/H200 and later data-centre
	// cards): rows remapped for correctable and uncorrectable errors, a remap waiting
	// for the next GPU reset, and a remap that failed (no spare row left). nil: not
	// answered.
	RemappedCorrectable   *int  `json:"remapped_correctable,omitempty"`
	RemappedUncorrectable *int  `json:"remapped_uncorrectable,omitempty"`
	RemapPending          *bool `json:"remap_pending,omitempty"`
	RemapFailure          *bool `json:"remap_failure,omitempty"`
}

// ECC modes.
const (
	ECCOn   = "on"
	ECCOff  = "off"
	ECCNone = "none"
)

// CUDADevice is what the CUDA driver API says about one ordinal.
type CUDADevice struct {
	Ordinal  int    `json:"ordinal"`
	Name     string `json:"name"`
	BDF      string `json:"bdf"` // cuDeviceGetPCIBusId, lower case
	CC       string `json:"cc"`  // compute capability, "8.9"
	SMs      int    `json:"sms"`
	MemBytes int64  `json:"mem_bytes"`
}

// BAR1Usage is one GPU's BAR1 budget as NVML counts it (nvmlDeviceGetBAR1MemoryInfo),
// read before the copies (the nvml phase, no CUDA context open) and again after the
// cuda and nccl phases' processes exited. With every context gone, the used figure
// should be back where it started; what stays is BAR1 the driver did not give back.
type BAR1Usage struct {
	GPU        int    `json:"gpu"`   // index into Report.GPUs
	Total      int64  `json:"total"` // bytes
	UsedBefore int64  `json:"used_before"`
	UsedAfter  *int64 `json:"used_after"` // nil: not read (NVML failed, or the run stopped early)
}

// Copy methods and directions.
const (
	MethodCE = "ce" // copy engine: cuMemcpyAsync
	MethodSM = "sm" // a copy kernel's loads and stores, the way NCCL moves data

	DirLocal = "local" // Src == Dst: the device-to-device reference
	DirWrite = "write" // issued on Src, pushes into Dst
	DirRead  = "read"  // issued on Dst, pulls from Src
	DirBidir = "bidir" // Src->Dst and Dst->Src at once; GBps is the sum
)

// Copy is one timed and verified copy measurement between two GPU ordinals.
type Copy struct {
	Src       int       `json:"src"` // CUDA ordinals
	Dst       int       `json:"dst"`
	Method    string    `json:"method"`
	Direction string    `json:"direction"`
	Bytes     int64     `json:"bytes"`   // per copy
	GBps      float64   `json:"gbps"`    // median of Samples, 1e9 B/s
	Samples   []float64 `json:"samples"` // one per sample, GB/s
	// LinkGBps is the theoretical per-direction rate of the narrowest link on the path
	// (0: unknown, or a local copy). A measurement above 1.05x of it is a fault.
	LinkGBps float64   `json:"link_gbps"`
	Verified bool      `json:"verified"`           // the destination was checked on the GPU and every word matched
	Mismatch *Mismatch `json:"mismatch,omitempty"` // the check found these words wrong (then Verified is false)
	Error    string    `json:"error,omitempty"`    // a CUDA call failed; the copy has no figure
}

// Mismatch locates corrupted data after a copy.
type Mismatch struct {
	Offset int64  `json:"offset"` // byte offset of the first bad 32-bit word
	Want   uint32 `json:"want"`
	Got    uint32 `json:"got"`
	Words  int64  `json:"words"` // how many words differ
}

// HighMem is the probe for cards whose BAR1 is smaller than their memory: a buffer
// placed above the BAR1 size must still take and give peer copies.
type HighMem struct {
	GPU        int       `json:"gpu"`  // ordinal holding the buffer
	Peer       int       `json:"peer"` // ordinal copying into and out of it; -1: none (one GPU)
	BAR1Bytes  int64     `json:"bar1_bytes"`
	VRAMBytes  int64     `json:"vram_bytes"`
	BallastMiB int64     `json:"ballast_mib"` // allocated below the buffer, freed before peer access
	BufferVA   string    `json:"buffer_va"`   // the buffer's device address, hex (a hint, not a physical offset)
	Verified   bool      `json:"verified"`    // both directions checked and intact
	Error      string    `json:"error,omitempty"`
	Guarantee  string    `json:"guarantee"` // what the placement does and does not prove
	Mismatch   *Mismatch `json:"mismatch,omitempty"`
}

// Latency is the time of one small write, measured the way cuda-samples'
// p2pBandwidthLatencyTest does: Writes copies of Bytes each, queued behind a spin
// kernel on Src's stream and timed back to back with events on the GPU; one sample is
// the elapsed time over Writes, US the median. Direct P2P over PCIe takes about half a
// microsecond, a write staged through host memory about 14 µs (selftest.md §1.5).
type Latency struct {
	Src       int       `json:"src"` // CUDA ordinals; Src == Dst: a local write
	Dst       int       `json:"dst"`
	Direction string    `json:"direction"` // local or write (issued on Src, into Dst)
	Bytes     int64     `json:"bytes"`     // per write
	Writes    int       `json:"writes"`    // per sample
	US        float64   `json:"us"`        // median of Samples, microseconds per write
	Samples   []float64 `json:"samples"`
	Verified  bool      `json:"verified"`           // the last write's bytes were read back and matched
	Mismatch  *Mismatch `json:"mismatch,omitempty"` // they were not what was written
	Error     string    `json:"error,omitempty"`
}

// NCCL is the all-reduce phase: one communicator over every GPU in one process.
type NCCL struct {
	Library     string            `json:"library"`
	LibraryFile string            `json:"library_file,omitempty"` // the file it resolved to (libnccl.so.<version>)
	Version     int               `json:"version"`                // ncclGetVersion, e.g. 22803
	Ranks       int               `json:"ranks"`
	Env         map[string]string `json:"env"` // the NCCL_* variables it ran with
	Sizes       []NCCLSize        `json:"sizes"`
	// Transports is one entry per channel connection NCCL logged between two ranks.
	Transports []Transport `json:"transports"`
	LogFile    string      `json:"log_file"` // NCCL_DEBUG=INFO output, kept for the report partition
	Error      string      `json:"error,omitempty"`
	// BusBWAtMax is the busbw of the largest size (the figure thresholds apply to).
	BusBWAtMax float64 `json:"busbw_at_max"`
}

// NCCLSize is one all-reduce size, measured nccl-tests' way (wall clock over the
// iterations, algbw = bytes/time, busbw = algbw * 2(n-1)/n).
type NCCLSize struct {
	Bytes  int64   `json:"bytes"`
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw"` // GB/s
	BusBW  float64 `json:"busbw"` // GB/s
	Wrong  int64   `json:"wrong"` // elements that differ from the exact sum
}

// Transport is one channel connection from NCCL's log, e.g.
// "Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer".
type Transport struct {
	Channel int    `json:"channel"`
	From    int    `json:"from"` // rank
	To      int    `json:"to"`
	Via     string `json:"via"` // "P2P/direct pointer", "SHM/direct/direct", "P2P/CUMEM/read", ...
	P2P     bool   `json:"p2p"` // Via starts with "P2P/"
}

// Peer-memory forms the peermem phase checks (PeerMem.Kind).
const (
	MemManaged = "managed" // cuMemAllocManaged, migrated and mapped by UVM (cudaMallocManaged)
	MemVMM     = "vmm"     // cuMemCreate + cuMemMap, peer access by cuMemSetAccess (NCCL's P2P/CUMEM)
	MemIPC     = "ipc"     // a cuMemCreate allocation exported as a POSIX file descriptor and imported again
	// MemCUDAIPC is cuMemAlloc memory shared by cuIpcGetMemHandle and opened in a second
	// process by cuIpcOpenMemHandle (cudaIpc*: torch.multiprocessing, NCCL's P2P/IPC).
	MemCUDAIPC = "cudaipc"
)

// PeerMem steps (PeerMem.Step): where in the check a failure or mismatch came from.
const (
	StepSetup     = "setup"      // allocating, advising, mapping, granting access, exporting
	StepPeerRead  = "peer read"  // the peer's kernel checks what the owner wrote
	StepPeerWrite = "peer write" // the owner checks what the peer's kernel wrote
	StepPeerCopy  = "peer copy"  // the peer's copy engine copies out of the memory
)

// PeerMem is one check of a form of peer memory other than cuMemAlloc's (which the
// copies cover): memory of GPU Owner, written by a kernel on Owner, read and written by
// a kernel on GPU Peer and copied out by Peer's copy engine, each step verified on a
// GPU. Owner == Peer is the local form (one GPU: the calls and data path without a
// peer). Added after schema 2 shipped; absent from reports whose p2pcheck did not run
// the peermem phase.
type PeerMem struct {
	Kind  string `json:"kind"`  // managed, vmm, ipc, cudaipc
	Owner int    `json:"owner"` // CUDA ordinal whose memory it is
	Peer  int    `json:"peer"`  // CUDA ordinal that reads and writes it
	Bytes int64  `json:"bytes"`
	// Calls lists what was done, in order ("cuMemAllocManaged(32 MiB) on GPU 0",
	// "cuMemAdvise(SET_ACCESSED_BY, GPU 1)"), so a report shows which driver path ran.
	Calls    []string  `json:"calls"`
	Verified bool      `json:"verified"`           // every step ran and every word matched
	Step     string    `json:"step,omitempty"`     // the step of Mismatch, Refused or Error
	Mismatch *Mismatch `json:"mismatch,omitempty"` // wrong data at Step
	// Refused is set when the driver declined a setup call with an error code before any
	// data moved: the form is unavailable here, which is not corruption.
	Refused string `json:"refused,omitempty"`
	Error   string `json:"error,omitempty"` // a call failed after data started to move (a kernel fault, a failed copy)
}

// P2P modes the patched driver logs per GPU at BAR1 setup (GPU.P2PMode), in its kernel
// line "peerboot-p2p: bar1-mode ... mode=<m> why=<rule>" (driver/patches/README.md). A
// pair talks BAR1 P2P only when both GPUs have the same mode and it is not none.
const (
	P2PModeStatic  = "static"  // BAR1 maps all of the GPU's memory once; peers use that window
	P2PModeDynamic = "dynamic" // BAR1 windows are mapped per peer allocation
	P2PModeNone    = "none"    // no BAR1 P2P on this GPU (BAR1 too small, regkeys, RM refused)
)

// Kernel-log event kinds.
const (
	KEventXid      = "xid"
	KEventIOMMU    = "iommu_fault"
	KEventFirmware = "firmware"
	KEventNVRM     = "nvrm_error"
)

// KEvent is one kernel-log line that matters to the verdict.
type KEvent struct {
	Kind string `json:"kind"`
	BDF  string `json:"bdf,omitempty"`  // the device it names, if any
	Code int    `json:"code,omitempty"` // Xid number
	Line string `json:"line"`
}

// Stall says which phase was killed at its deadline and the likely cause.
type Stall struct {
	Phase   string `json:"phase"`
	AfterMS int64  `json:"after_ms"`
	Cause   string `json:"cause"`
}

// Phase names, as durations and deadline_exceeded spell them.
const (
	PhaseModules  = "modules" // the init's module loading
	PhasePrecheck = "precheck"
	PhaseNVML     = "nvml"
	PhaseCUDA     = "cuda"
	PhaseNCCL     = "nccl"
	PhasePeerMem  = "peermem" // managed, VMM and exported-handle memory between GPUs
	PhaseBAR1     = "bar1"    // NVML's BAR1 figures again, after the copies
	PhaseTotal    = "total"   // the init's bound on the whole of p2pcheck
)
