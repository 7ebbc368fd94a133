// Package selftest is the boot-time self-test's data model: the report every boot
// produces (schema 2, documented in docs/selftest.md), its JSON and console
// encodings, its accessors and the human summary, and the plain-file probes that
// fill its kernel side (sysfs BARs, loaded modules, library files, module versions
// through node/modinfo). It probes nothing that needs the NVIDIA libraries and reads
// no recipe, so the static init can import it; the rules that judge a report live
// in selftest/verdict, the dlopen side in cmd/p2pcheck, and reading a stick's
// reports back on the host in reportdisk.
package selftest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Schema is the report schema version. Bump it when a field changes meaning or
// disappears; adding a field is compatible and keeps the version.
const Schema = 2

// Verdicts and finding severities.
const (
	Pass = "pass"
	Fail = "fail"

	SevFail = "fail"
	SevWarn = "warn"
	SevInfo = "info"
)

// Module load results.
const (
	ModLoaded  = "loaded"
	ModENODEV  = "ENODEV" // the module linked into the kernel but found no device to bind
	ModError   = "error"
	ModSkipped = "skipped" // not attempted because a module it needs did not load
)

// Report is what one boot's self-test found. Everything but StartedAt and the
// durations is a function of the box, the image and the kernel's answers.
type Report struct {
	Schema    int         `json:"schema"`
	Verdict   string      `json:"verdict"`
	Findings  []Finding   `json:"findings"`
	Recipe    RecipeRef   `json:"recipe"`
	Kernel    Kernel      `json:"kernel"`
	Modules   []Module    `json:"modules"`
	GPUs      []GPU       `json:"gpus"`
	CUDA      CUDA        `json:"cuda"`
	NVML      NVML        `json:"nvml"`
	Pairs     []Pair      `json:"pairs"` // every unordered GPU pair, A < B
	IOMMU     IOMMU       `json:"iommu"`
	Copies    []Copy      `json:"copies"`    // timed, verified copies (local and peer)
	HighMem   []HighMem   `json:"high_mem"`  // probes above BAR1, one per GPU where BAR1 < VRAM
	Latencies []Latency   `json:"latencies"` // small-write latency, local and per ordered pair with peer access
	BAR1      []BAR1Usage `json:"bar1"`      // NVML's BAR1 used/total per GPU, before and after the copies
	// PeerMem is the peermem phase: managed, VMM and exported-handle memory between GPUs.
	// Absent (nil) when the phase did not run, as in reports of older p2pchecks.
	PeerMem []PeerMem `json:"peer_mem,omitempty"`
	NCCL    *NCCL     `json:"nccl"` // nil: the phase did not run
	// Soak is a burn-in run's time series (p2pcheck --soak); absent otherwise.
	Soak             *Soak      `json:"soak,omitempty"`
	KernelEvents     []KEvent   `json:"kernel_events"` // Xid, IOMMU faults, firmware failures seen during the run
	Durations        []Duration `json:"durations"`
	StartedAt        string     `json:"started_at"`        // RFC 3339, UTC
	DeadlineExceeded string     `json:"deadline_exceeded"` // the phase that stalled, or ""
	Stall            *Stall     `json:"stall"`             // details of that stall
	Tool             string     `json:"tool"`              // p2pcheck version
}

// Finding is one observation; any "fail" finding makes the verdict fail. IDs are
// stable (docs/selftest.md lists them with the test that covers each).
type Finding struct {
	ID       string `json:"id"`     // e.g. "driver.nvidia", "p2p.status", "acs.redirect"
	Status   string `json:"status"` // fail, warn, info
	Message  string `json:"message"`
	Evidence string `json:"evidence,omitempty"` // the raw value or log line it rests on
	Hint     string `json:"hint,omitempty"`     // one-line next step
	// Subject names what the finding is about ("GPU0", "GPU0-GPU1", "GPU0->GPU1 ce write",
	// "bridge 0000:00:01.1"), so two reports' findings can be matched (report diff).
	Subject string `json:"subject,omitempty"`
}

// RecipeRef names the recipe the image was built from.
type RecipeRef struct {
	Name          string `json:"name"`
	Digest        string `json:"digest"`
	DriverVersion string `json:"driver_version,omitempty"` // the recipe's driver.version
}

// Kernel is the running kernel.
type Kernel struct {
	Release string `json:"release"`
	Cmdline string `json:"cmdline"`
}

// Module is one finit_module(2) attempt made by the init.
type Module struct {
	Name       string   `json:"name"`
	File       string   `json:"file,omitempty"`        // the .ko, relative to /lib/modules/<release>
	RequiredBy string   `json:"required_by,omitempty"` // set for dependencies loaded ahead of a recipe module
	Params     string   `json:"params"`                // exactly the parameter string handed to the kernel
	Result     string   `json:"result"`                // loaded, ENODEV, error, skipped
	Errno      int      `json:"errno"`
	Error      string   `json:"error"`
	KernelLog  []string `json:"kernel_log"`           // /dev/kmsg lines that appeared during the load
	Version    string   `json:"version,omitempty"`    // /sys/module/<name>/version, for modules found already loaded
	KoVersion  string   `json:"ko_version,omitempty"` // "version" of the .ko file's .modinfo, loaded or not
	// Parameters as the running module holds them (/sys/module/<name>/parameters), for
	// the driver's P2P knobs (e.g. NVreg_RegistryDwords); nil when not read.
	Parameters map[string]string `json:"parameters,omitempty"`
}

// GPU is one NVIDIA display or 3D controller as sysfs shows it, before any driver.
type GPU struct {
	BDF       string `json:"bdf"`
	Vendor    string `json:"vendor"` // "0x10de"
	Device    string `json:"device"`
	Class     string `json:"class"` // "0x030000" or "0x030200"
	NUMANode  int    `json:"numa_node"`
	Link      Link   `json:"link"`
	BAR1Bytes int64  `json:"bar1_bytes"`
	VRAMBytes *int64 `json:"vram_bytes,omitempty"` // only once a driver tells us
	// Schema 2. Upstream runs from the root port down to the GPU's own upstream link.
	Upstream   []Bridge `json:"upstream"`
	RootBus    string   `json:"root_bus"`           // "pci0000:00": the host bridge it hangs off
	IOMMUGroup int      `json:"iommu_group"`        // -1: none
	BootVGA    bool     `json:"boot_vga,omitempty"` // sysfs boot_vga = 1: the firmware's console card
	// P2PMode is the BAR1 P2P mode the patched driver chose for this GPU (static,
	// dynamic, none), from its "peerboot-p2p: bar1-mode" kernel line, and P2PModeLine
	// that line; "" when the driver logged none (a stock driver, or one built before the
	// line existed).
	P2PMode     string      `json:"p2p_mode,omitempty"`
	P2PModeLine string      `json:"p2p_mode_line,omitempty"`
	NVML        *NVMLGPU    `json:"nvml,omitempty"`
	CUDA        *CUDADevice `json:"cuda,omitempty"`
}

// Link is the PCIe link as trained now and at most.
type Link struct {
	CurrentSpeed string `json:"current_speed"` // e.g. "16.0 GT/s PCIe"
	MaxSpeed     string `json:"max_speed"`
	CurrentWidth int    `json:"current_width"`
	MaxWidth     int    `json:"max_width"`
}

// Status is a library return code with its symbolic name.
type Status struct {
	Name string `json:"name"`
	Code int    `json:"code"`
}

// CUDA is what the driver API said.
type CUDA struct {
	Library       string  `json:"library"`
	LibraryFile   string  `json:"library_file,omitempty"` // the file it resolved to, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01
	Loaded        bool    `json:"loaded"`
	Error         string  `json:"error"`
	CuInit        *Status `json:"cu_init"`        // nil: not called
	DriverVersion int     `json:"driver_version"` // cuDriverGetVersion, e.g. 12020; 0: unknown
	// Schema 2. Ordinals follow PCI bus order (p2pcheck sets CUDA_DEVICE_ORDER=PCI_BUS_ID),
	// so ordinal i is Report.GPUs[i] when every GPU is visible.
	Devices []CUDADevice `json:"devices"`
	PTX     *Status      `json:"ptx"`               // cuModuleLoadDataEx of the fill/verify/copy kernels
	PTXLog  string       `json:"ptx_log,omitempty"` // the JIT's error log when it failed
}

// NVML is what the management library said.
type NVML struct {
	Library       string  `json:"library"`
	LibraryFile   string  `json:"library_file,omitempty"` // the file it resolved to (libnvidia-ml.so.<version>)
	Loaded        bool    `json:"loaded"`
	Error         string  `json:"error"`
	Init          *Status `json:"init"` // nvmlInit_v2; nil: not called
	DriverVersion string  `json:"driver_version"`
	CUDAVersion   int     `json:"cuda_version"` // nvmlSystemGetCudaDriverVersion_v2
}

// Duration is how long one phase took. A list, not a map, so it reads in run order.
type Duration struct {
	Phase string `json:"phase"`
	MS    int64  `json:"ms"`
}

// New returns an empty report of the current schema; slices are non-nil so the JSON
// always has every key with the same type.
func New() *Report {
	return &Report{
		Schema:       Schema,
		Verdict:      Fail,
		Findings:     []Finding{},
		Modules:      []Module{},
		GPUs:         []GPU{},
		Pairs:        []Pair{},
		Copies:       []Copy{},
		HighMem:      []HighMem{},
		Latencies:    []Latency{},
		BAR1:         []BAR1Usage{},
		KernelEvents: []KEvent{},
		Durations:    []Duration{},
	}
}

// Add appends a finding.
func (r *Report) Add(sev, check, msg, hint string) {
	r.Findings = append(r.Findings, Finding{Status: sev, ID: check, Message: msg, Hint: hint})
}

// Settle sets the verdict from the findings: any fail finding fails the boot.
func (r *Report) Settle() {
	r.Verdict = Pass
	for _, f := range r.Findings {
		if f.Status == SevFail {
			r.Verdict = Fail
			return
		}
	}
}

// Encode writes the report as indented JSON, ending in a newline.
func Encode(r *Report) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding report: %w", err)
	}
	return append(b, '\n'), nil
}

// Decode parses a report, refuses other schema versions (so a collector never silently
// misreads a report from a newer image) and checks its content with Validate: what
// Decode accepts, every reader (report show, serve, flash reports) can show
// truthfully. Errors name the line, column and key; bad JSON wraps ErrNotJSON.
func Decode(b []byte) (*Report, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	r := &Report{}
	if err := d.Decode(r); err != nil {
		// A report of another schema may have changed the very field that failed to
		// decode: name its schema, not a key this schema types differently.
		if s, ok := schemaOf(b); ok && s != Schema {
			return nil, schemaError(s)
		}
		return nil, jsonError(b, err)
	}
	rest := b[d.InputOffset():]
	if tail := bytes.TrimLeft(rest, " \t\r\n"); len(tail) > 0 {
		// What follows the value would be stored and served back; the
		// position is of its first byte.
		line, col := lineCol(b, d.InputOffset()+int64(len(rest)-len(tail)))
		return nil, &PosError{line, col, fmt.Errorf("%w: bytes follow the report", ErrNotJSON)}
	}
	if r.Schema != Schema {
		return nil, schemaError(r.Schema)
	}
	// A null or missing list reads as empty, so re-encoding keeps the documented shape.
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Modules == nil {
		r.Modules = []Module{}
	}
	if r.GPUs == nil {
		r.GPUs = []GPU{}
	}
	if r.Durations == nil {
		r.Durations = []Duration{}
	}
	if r.Pairs == nil {
		r.Pairs = []Pair{}
	}
	if r.Copies == nil {
		r.Copies = []Copy{}
	}
	if r.HighMem == nil {
		r.HighMem = []HighMem{}
	}
	if r.Latencies == nil {
		r.Latencies = []Latency{}
	}
	if r.KernelEvents == nil {
		r.KernelEvents = []KEvent{}
	}
	if r.BAR1 == nil {
		r.BAR1 = []BAR1Usage{}
	}
	if err := Validate(r); err != nil {
		return nil, fmt.Errorf("decoding report: %w", err)
	}
	return r, nil
}

// schemaOf reads the schema number of a JSON object whose other keys may not decode
// as this schema's; ok is false when there is no whole number under "schema".
func schemaOf(b []byte) (int, bool) {
	var head struct {
		Schema *int `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err != nil || head.Schema == nil {
		return 0, false
	}
	return *head.Schema, true
}

func schemaError(s int) error {
	return fmt.Errorf("decoding report: schema %d, want %d", s, Schema)
}
