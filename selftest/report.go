// Package selftest is the boot-time self-test's data model: the report every boot
// produces (schema 1), its JSON and console encodings, the verdict rules and the
// human summary. It probes nothing that needs the NVIDIA libraries itself, so the
// static init can import it; cmd/p2pcheck owns the dlopen side.
package selftest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Schema is the report schema version. Bump it when a field changes meaning or
// disappears; adding a field is compatible and keeps the version.
const Schema = 1

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
	Schema           int        `json:"schema"`
	Verdict          string     `json:"verdict"`
	Findings         []Finding  `json:"findings"`
	Recipe           RecipeRef  `json:"recipe"`
	Kernel           Kernel     `json:"kernel"`
	Modules          []Module   `json:"modules"`
	GPUs             []GPU      `json:"gpus"`
	CUDA             CUDA       `json:"cuda"`
	NVML             NVML       `json:"nvml"`
	Durations        []Duration `json:"durations"`
	StartedAt        string     `json:"started_at"`        // RFC 3339, UTC
	DeadlineExceeded string     `json:"deadline_exceeded"` // the phase that stalled, or ""
}

// Finding is one observation; any "fail" finding makes the verdict fail.
type Finding struct {
	Severity string `json:"severity"` // fail, warn, info
	Check    string `json:"check"`    // stable id, e.g. "driver.nvidia"
	Message  string `json:"message"`
	Hint     string `json:"hint,omitempty"` // what to look at next
}

// RecipeRef names the recipe the image was built from.
type RecipeRef struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
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
	KernelLog  []string `json:"kernel_log"`        // /dev/kmsg lines that appeared during the load
	Version    string   `json:"version,omitempty"` // /sys/module/<name>/version, for modules found already loaded
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
	Loaded        bool    `json:"loaded"`
	Error         string  `json:"error"`
	CuInit        *Status `json:"cu_init"`        // nil: not called
	DriverVersion int     `json:"driver_version"` // cuDriverGetVersion, e.g. 12020; 0: unknown
}

// NVML is what the management library said.
type NVML struct {
	Library       string  `json:"library"`
	Loaded        bool    `json:"loaded"`
	Error         string  `json:"error"`
	Init          *Status `json:"init"` // nvmlInit_v2; nil: not called
	DriverVersion string  `json:"driver_version"`
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
		Schema:    Schema,
		Verdict:   Fail,
		Findings:  []Finding{},
		Modules:   []Module{},
		GPUs:      []GPU{},
		Durations: []Duration{},
	}
}

// Add appends a finding.
func (r *Report) Add(sev, check, msg, hint string) {
	r.Findings = append(r.Findings, Finding{Severity: sev, Check: check, Message: msg, Hint: hint})
}

// Settle sets the verdict from the findings: any fail finding fails the boot.
func (r *Report) Settle() {
	r.Verdict = Pass
	for _, f := range r.Findings {
		if f.Severity == SevFail {
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

// Decode parses a report and refuses other schema versions, so a collector never
// silently misreads a report from a newer image.
func Decode(b []byte) (*Report, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	r := &Report{}
	if err := d.Decode(r); err != nil {
		return nil, fmt.Errorf("decoding report: %w", err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("decoding report: schema %d, want %d", r.Schema, Schema)
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
	return r, nil
}
