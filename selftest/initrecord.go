package selftest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// InitRecord is what the init hands p2pcheck (--modules-json): the module outcomes only
// the init saw, plus its own findings and phase durations, so that p2pcheck's report and
// verdict cover the whole boot. A bare JSON array of modules is accepted as well.
type InitRecord struct {
	Modules   []Module   `json:"modules"`
	Findings  []Finding  `json:"findings"`
	Durations []Duration `json:"durations"`
}

// ParseInitRecord reads an InitRecord, or a bare []Module.
func ParseInitRecord(b []byte) (*InitRecord, error) {
	var rec InitRecord
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &rec.Modules); err != nil {
			return nil, fmt.Errorf("module outcomes: %w", err)
		}
		return &rec, nil
	}
	if err := json.Unmarshal(trimmed, &rec); err != nil {
		return nil, fmt.Errorf("module outcomes: %w", err)
	}
	return &rec, nil
}

// Merge adds an init record to a report: its modules, findings and durations first,
// because they happened first.
func (r *Report) Merge(rec *InitRecord) {
	r.Modules = append(append([]Module{}, rec.Modules...), r.Modules...)
	r.Findings = append(append([]Finding{}, rec.Findings...), r.Findings...)
	r.Durations = append(append([]Duration{}, rec.Durations...), r.Durations...)
}

// ReadKernel reads the running kernel's release and command line under proc (normally
// /proc). Missing files leave fields empty: the report must be produced regardless.
func ReadKernel(proc string) Kernel {
	rel, _ := os.ReadFile(filepath.Join(proc, "sys", "kernel", "osrelease"))
	cmd, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
	return Kernel{Release: strings.TrimSpace(string(rel)), Cmdline: strings.TrimSpace(string(cmd))}
}
