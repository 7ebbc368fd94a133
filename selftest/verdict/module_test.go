package verdict

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// nvidia.ko's failed load gets the next step its errno and the kernel's
// words point to, each on its own; the message carries the outcome with the
// errno, the evidence the kernel's last line (else the outcome).
func TestModuleHints(t *testing.T) {
	for _, c := range []struct {
		name string
		m    selftest.Module
		hint string
		msg  string // a substring of the message
		ev   string // the evidence
	}{
		{"skipped", selftest.Module{Result: selftest.ModSkipped}, "fix the module it depends on first", "did not load: skipped", "skipped"},
		{"unknown symbol in the log", selftest.Module{Result: selftest.ModError, Error: "finit_module", KernelLog: []string{"nvidia: loading", "nvidia: Unknown symbol drm_gem_x (err -2)"}},
			"Unknown symbol: the module was built against another kernel", "did not load: finit_module", "nvidia: Unknown symbol drm_gem_x (err -2)"},
		{"ENOENT with a file", selftest.Module{Result: selftest.ModError, Error: "finit_module", Errno: errnoENOENT, File: "updates/nvidia.ko"},
			"Unknown symbol", "did not load: finit_module (errno 2)", "finit_module (errno 2)"},
		{"ENOENT without a file", selftest.Module{Result: selftest.ModError, Error: "modprobe", Errno: errnoENOENT}, "no .ko for it", "(errno 2)", "modprobe (errno 2)"},
		{"ENOEXEC", selftest.Module{Result: selftest.ModError, Errno: errnoENOEXEC}, "Invalid module format", "did not load: error (errno 8)", "error (errno 8)"},
		{"invalid format in the log", selftest.Module{Result: selftest.ModError, KernelLog: []string{"nvidia: Invalid module format"}}, "Invalid module format", "did not load: error", "nvidia: Invalid module format"},
		{"version disagreement in the log", selftest.Module{Result: selftest.ModError, KernelLog: []string{"nvidia: disagrees about version of symbol module_layout"}}, "Invalid module format", "", ""},
		{"EKEYREJECTED", selftest.Module{Result: selftest.ModError, Errno: errnoEKEYREJECTED}, "module signature rejected", "(errno 129)", ""},
		{"EBADMSG", selftest.Module{Result: selftest.ModError, Errno: errnoEBADMSG}, "module signature rejected", "(errno 74)", ""},
		{"signature in the log", selftest.Module{Result: selftest.ModError, KernelLog: []string{"Loading of unsigned module is rejected: signature and/or required key missing"}}, "module signature rejected", "", ""},
		{"ENODEV as an errno", selftest.Module{Result: selftest.ModError, Errno: errnoENODEV}, "no device for this module", "(errno 19)", ""},
		{"another errno", selftest.Module{Result: selftest.ModError, Errno: 5}, "see kernel_log for the kernel's reason", "(errno 5)", ""},
	} {
		r := healthyReport(2)
		m := c.m
		m.Name = "nvidia"
		r.Modules[0] = m
		Judge(r, FromRecipe(healthyRecipe(2)))
		var f *selftest.Finding
		for k := range r.Findings {
			if r.Findings[k].ID == "driver.nvidia" {
				f = &r.Findings[k]
			}
		}
		switch {
		case f == nil:
			t.Errorf("%s: no driver.nvidia finding", c.name)
		case f.Status != selftest.SevFail || !strings.Contains(f.Hint, c.hint) || !strings.Contains(f.Message, c.msg) || c.ev != "" && f.Evidence != c.ev:
			t.Errorf("%s: %s %q, evidence %q, hint %q; want fail ~%q, evidence %q, hint ~%q", c.name, f.Status, f.Message, f.Evidence, f.Hint, c.msg, c.ev, c.hint)
		}
	}
}
