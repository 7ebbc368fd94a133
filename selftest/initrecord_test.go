package selftest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// ParseInitRecord's refusals: an empty record, and either form with a wrong type,
// each named as the module outcomes the init handed over.
func TestParseInitRecordRefuses(t *testing.T) {
	for _, in := range []string{"", "  \n", `[{"name": 1}]`, `{"findings": {}}`, `[`, `{"modules": [}`} {
		_, err := ParseInitRecord([]byte(in))
		if err == nil || !strings.HasPrefix(err.Error(), "module outcomes: ") {
			t.Errorf("ParseInitRecord(%q): %v", in, err)
		}
	}
	rec, err := ParseInitRecord([]byte("\n\t[]\n"))
	if err != nil || len(rec.Modules) != 0 || rec.Findings != nil {
		t.Errorf("an empty list: %+v, %v", rec, err)
	}
}

// Merge puts the init's modules, findings and durations before p2pcheck's own, in
// their order, without sharing the record's arrays.
func TestMergeOrder(t *testing.T) {
	rec := &InitRecord{
		Modules:   []Module{{Name: "nvidia"}, {Name: "nvidia-uvm"}},
		Findings:  []Finding{{ID: "recipe"}},
		Durations: []Duration{{Phase: PhaseModules, MS: 5}},
	}
	r := New()
	r.Modules = []Module{{Name: "ib_core"}}
	r.Findings = []Finding{{ID: "p2p.status"}, {ID: "copy.slow"}}
	r.Durations = []Duration{{Phase: PhaseCUDA, MS: 40}}
	r.Merge(rec)
	if want := []Module{{Name: "nvidia"}, {Name: "nvidia-uvm"}, {Name: "ib_core"}}; !reflect.DeepEqual(r.Modules, want) {
		t.Errorf("modules %+v", r.Modules)
	}
	if want := []Finding{{ID: "recipe"}, {ID: "p2p.status"}, {ID: "copy.slow"}}; !reflect.DeepEqual(r.Findings, want) {
		t.Errorf("findings %+v", r.Findings)
	}
	if want := []Duration{{Phase: PhaseModules, MS: 5}, {Phase: PhaseCUDA, MS: 40}}; !reflect.DeepEqual(r.Durations, want) {
		t.Errorf("durations %+v", r.Durations)
	}
	r.Modules[0].Name = "changed"
	if rec.Modules[0].Name != "nvidia" {
		t.Error("the merged report shares the record's modules")
	}
}

// ReadKernel: the release and command line, trimmed; missing files leave them empty.
func TestReadKernel(t *testing.T) {
	proc := t.TempDir()
	if got := ReadKernel(proc); got != (Kernel{}) {
		t.Errorf("empty proc: %+v", got)
	}
	if err := os.MkdirAll(filepath.Join(proc, "sys", "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys", "kernel", "osrelease"), []byte("6.12.9-peerboot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "cmdline"), []byte("console=ttyS0 iommu=pt \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := ReadKernel(proc), (Kernel{Release: "6.12.9-peerboot", Cmdline: "console=ttyS0 iommu=pt"}); got != want {
		t.Errorf("ReadKernel: %+v, want %+v", got, want)
	}
}
