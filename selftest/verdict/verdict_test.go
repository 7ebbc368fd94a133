package verdict

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/selftest"
)

var (
	vm   = &recipe.Platform{GPUs: 0}
	four = &recipe.Platform{GPUs: 4}
)

// verdictCases are TestVerdict's rows; docs/selftest-findings.md cites them by name.
var verdictCases = []struct {
	name     string
	report   func() *selftest.Report
	platform *recipe.Platform
	verdict  string
	failing  []string // checks with fail findings, in order
	warns    []string // checks that must have a warn finding
	hint     string   // a substring some finding's hint must contain
}{
	{name: "vm pass", report: vmReport, platform: vm, verdict: selftest.Pass},
	{name: "vm pass without recipe", report: vmReport, platform: nil, verdict: selftest.Pass},
	{name: "vm nvml init ok too", report: func() *selftest.Report {
		r := vmReport()
		r.NVML.Init = &selftest.Status{Name: "NVML_SUCCESS"}
		return r
	}, platform: vm, verdict: selftest.Pass},
	{name: "vm unknown symbol", report: func() *selftest.Report {
		r := vmReport()
		r.Modules[0] = selftest.Module{Name: "nvidia", File: "updates/nvidia.ko", Result: selftest.ModError, Errno: 2, Error: "no such file or directory",
			KernelLog: []string{"nvidia: Unknown symbol drm_gem_prime_fd_to_handle (err -2)"}}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "Unknown symbol"},
	{name: "vm bad module format", report: func() *selftest.Report {
		r := vmReport()
		r.Modules[0] = selftest.Module{Name: "nvidia", File: "updates/nvidia.ko", Result: selftest.ModError, Errno: 8, Error: "exec format error"}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "Invalid module format"},
	{name: "vm module file missing", report: func() *selftest.Report {
		r := vmReport()
		r.Modules[0] = selftest.Module{Name: "nvidia", Result: selftest.ModError, Errno: 2, Error: "nvidia.ko not found"}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "no .ko"},
	{name: "vm signature rejected", report: func() *selftest.Report {
		r := vmReport()
		r.Modules[0] = selftest.Module{Name: "nvidia", File: "nvidia.ko", Result: selftest.ModError, Errno: 129, Error: "key was rejected by service"}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "signature"},
	// A phase child that died (p2pcheck adds p2pcheck.<phase> with its own hint) leaves
	// cuInit or nvmlInit uncalled: the finding still says where to look.
	{name: "gpus cuInit not called", report: func() *selftest.Report {
		r := gpuReport(4)
		r.CUDA.CuInit = nil
		return r
	}, platform: four, verdict: selftest.Fail, failing: []string{"cuda.init"}, hint: "p2pcheck.cuda"},
	{name: "vm nvmlInit not called", report: func() *selftest.Report {
		r := vmReport()
		r.NVML.Init = nil
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"nvml.init"}, hint: "p2pcheck.nvml"},
	{name: "vm nvidia not attempted", report: func() *selftest.Report {
		r := vmReport()
		r.Modules = []selftest.Module{}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "--modules-json"},
	{name: "vm nvidia loaded", report: func() *selftest.Report {
		r := vmReport()
		r.Modules[0].Result = selftest.ModLoaded
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"driver.nvidia"}, hint: "platform.gpus"},
	{name: "vm no libcuda", report: func() *selftest.Report {
		r := vmReport()
		r.CUDA = selftest.CUDA{Library: "libcuda.so.1", Error: "libcuda.so.1: cannot open shared object file"}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"cuda.load"}, hint: "libcuda1"},
	{name: "vm driver mismatch", report: func() *selftest.Report {
		r := vmReport()
		r.CUDA.CuInit = &selftest.Status{Name: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", Code: 803}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"cuda.init"}, hint: "different versions"},
	{name: "vm no libnvidia-ml", report: func() *selftest.Report {
		r := vmReport()
		r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Error: "not found"}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"nvml.load"}},
	{name: "vm nvml version mismatch", report: func() *selftest.Report {
		r := vmReport()
		r.NVML.Init = &selftest.Status{Name: "NVML_ERROR_LIB_RM_VERSION_MISMATCH", Code: 18}
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"nvml.init"}, hint: "libnvidia-ml1"},
	{name: "vm stalled", report: func() *selftest.Report {
		r := vmReport()
		r.DeadlineExceeded = "cuda"
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"deadline"}},
	{name: "vm but sysfs shows a GPU", report: func() *selftest.Report {
		r := gpuReport(1)
		return r
	}, platform: vm, verdict: selftest.Fail, failing: []string{"gpus.count", "driver.nvidia", "cuda.init"}},
	{name: "4 gpus pass", report: func() *selftest.Report { return gpuReport(4) }, platform: four, verdict: selftest.Pass},
	{name: "gpus pass without recipe", report: func() *selftest.Report { return gpuReport(2) }, platform: nil, verdict: selftest.Pass},
	{name: "3 of 4 gpus", report: func() *selftest.Report { return gpuReport(3) }, platform: four, verdict: selftest.Fail,
		failing: []string{"gpus.count"}, hint: "Above 4G"},
	{name: "gpus nvidia ENODEV", report: func() *selftest.Report {
		r := gpuReport(4)
		r.Modules[0].Result = selftest.ModENODEV
		r.CUDA.CuInit = &selftest.Status{Name: "CUDA_ERROR_NO_DEVICE", Code: 100}
		return r
	}, platform: four, verdict: selftest.Fail, failing: []string{"driver.nvidia", "cuda.init"}, hint: "nouveau"},
	{name: "gpus narrow link warns only", report: func() *selftest.Report {
		r := gpuReport(4)
		r.GPUs[2].Link.CurrentWidth = 4
		r.NVML = selftest.NVML{Library: "libnvidia-ml.so.1", Error: "missing"}
		return r
	}, platform: four, verdict: selftest.Pass, warns: []string{"pcie.link", "nvml.load"}, hint: "reseat"},
	{name: "dependency failures do not fail", report: func() *selftest.Report {
		r := gpuReport(4)
		r.Modules = append(r.Modules, selftest.Module{Name: "ib_core", RequiredBy: "nvidia-peermem", Result: selftest.ModError, Errno: 2},
			selftest.Module{Name: "nvidia-peermem", Result: selftest.ModSkipped, Error: "ib_core not loaded"})
		return r
	}, platform: four, verdict: selftest.Pass},
	{name: "other module fails warns", report: func() *selftest.Report {
		r := gpuReport(4)
		r.Modules = append(r.Modules, selftest.Module{Name: "nvidia_drm", Result: selftest.ModError, Errno: 2, Error: "Unknown symbol drm_gem_prime_fd_to_handle"})
		return r
	}, platform: four, verdict: selftest.Pass, warns: []string{"driver.nvidia_drm"}},
	{name: "gpus nvml init fails warns", report: func() *selftest.Report {
		r := gpuReport(4)
		r.NVML.Init = &selftest.Status{Name: "NVML_ERROR_UNKNOWN", Code: 999}
		return r
	}, platform: four, verdict: selftest.Pass, warns: []string{"nvml.init"}},
}

func TestVerdict(t *testing.T) {
	for _, tt := range verdictCases {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.report()
			Judge(r, FromPlatform(tt.platform))
			if r.Verdict != tt.verdict {
				t.Errorf("verdict %s, want %s; findings:\n%s", r.Verdict, tt.verdict, dump(r.Findings))
			}
			var failing []string
			for _, f := range r.Findings {
				if f.Status == selftest.SevFail {
					failing = append(failing, f.ID)
					if f.Hint == "" && f.ID != "deadline" {
						t.Errorf("fail finding %s has no hint", f.ID)
					}
				}
			}
			if strings.Join(failing, ",") != strings.Join(tt.failing, ",") {
				t.Errorf("failing checks %v, want %v\n%s", failing, tt.failing, dump(r.Findings))
			}
			for _, w := range tt.warns {
				found := false
				for _, f := range r.Findings {
					found = found || (f.ID == w && f.Status == selftest.SevWarn)
				}
				if !found {
					t.Errorf("no warn %s finding:\n%s", w, dump(r.Findings))
				}
			}
			if tt.hint != "" && !strings.Contains(dump(r.Findings), tt.hint) {
				t.Errorf("no finding mentions %q:\n%s", tt.hint, dump(r.Findings))
			}
		})
	}
}

// An earlier fail finding (from the init: recipe unreadable, p2pcheck crashed) keeps
// the verdict failed whatever the rules say.
func TestJudgeKeepsEarlierFailures(t *testing.T) {
	r := vmReport()
	r.Add(selftest.SevFail, "recipe", "cannot read /etc/peerboot/recipe.toml", "rebuild the image")
	Judge(r, FromPlatform(&recipe.Platform{}))
	if r.Verdict != selftest.Fail {
		t.Errorf("verdict %s, want fail", r.Verdict)
	}
}

func dump(fs []selftest.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Status + " " + f.ID + ": " + f.Message + " | " + f.Hint + "\n")
	}
	return b.String()
}
