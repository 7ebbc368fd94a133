package verdict

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// Each layer's version is judged once, against the recipe's driver.version or,
// without one, NVML's: a .ko file whose version is the loaded module's is one
// fault (the module's), a .ko that matches the reference is none, a module not
// NVIDIA's is not the driver's, and without any reference nothing is compared.
func TestVersionMismatchOnce(t *testing.T) {
	const other = "550.54.15"
	for _, c := range []struct {
		name string
		set  func(r *selftest.Report, e *Expect)
		want []string // the version.mismatch findings' messages, in order (substrings)
	}{
		{"loaded module and its file both differ from the recipe", func(r *selftest.Report, e *Expect) {
			r.Modules[0].Version, r.Modules[0].KoVersion = other, other
		}, []string{"module nvidia is version " + other + ", recipe driver.version = " + testDriver}},
		{"the file matches the recipe, the loaded module does not", func(r *selftest.Report, e *Expect) {
			r.Modules[0].Version, r.Modules[0].KoVersion = other, testDriver
		}, []string{"module nvidia is version " + other}},
		{"NVML differs from the recipe, the module matches it", func(r *selftest.Report, e *Expect) {
			r.Modules[0].Version, r.NVML.DriverVersion = testDriver, other
		}, []string{"NVML reports driver " + other + ", recipe driver.version = " + testDriver}},
		{"no recipe version: the module is held to NVML's", func(r *selftest.Report, e *Expect) {
			e.DriverVersion = ""
			r.Modules[0].Version = other
		}, []string{"module nvidia is version " + other + ", NVML reports driver " + testDriver}},
		{"no recipe version, the module matches NVML", func(r *selftest.Report, e *Expect) {
			e.DriverVersion = ""
			r.Modules[0].Version, r.Modules[0].KoVersion = testDriver, testDriver
		}, nil},
		{"no reference at all", func(r *selftest.Report, e *Expect) {
			e.DriverVersion, r.NVML.DriverVersion = "", ""
			r.Modules[0].Version, r.Modules[0].KoVersion = testDriver, other
		}, nil},
		{"a module not NVIDIA's", func(r *selftest.Report, e *Expect) {
			r.Modules = append(r.Modules, selftest.Module{Name: "ecc", Result: selftest.ModLoaded, Version: "6.1.0", KoVersion: "6.1.0-3"})
		}, nil},
	} {
		r := healthyReport(2)
		e := FromRecipe(healthyRecipe(2))
		c.set(r, e)
		Judge(r, e)
		var got []string
		for _, f := range r.Findings {
			if f.ID == "version.mismatch" {
				got = append(got, f.Message)
			} else if f.Status != selftest.SevInfo {
				t.Errorf("%s: %s %s: %s", c.name, f.Status, f.ID, f.Message)
			}
		}
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.Contains(got[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: version.mismatch findings\n  %q\nwant\n  %q", c.name, got, c.want)
		}
	}
}
