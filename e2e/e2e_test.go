// Package e2e builds the default recipe end to end and boots it in QEMU, both ways
// nodes boot (UEFI from the disk image, PXE over user-mode networking), reading the
// verdict from the serial console. It uses the real store ($PEERBOOT_CACHE or
// ~/.cache/peerboot), so the kernel compiles once per machine; `go test -short`
// skips it.
package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/selftest"
)

var bin string

func TestMain(m *testing.M) {
	dir := testbin.MustBuildTemp(map[string]string{"peerboot": "../cmd/peerboot", "peerboot-init": "../cmd/peerboot-init", "p2pcheck": "../cmd/p2pcheck"})
	bin = filepath.Join(dir, "peerboot")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func peerboot(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, errs, code, err := testbin.Run(bin, "..", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out + errs, code
}

func TestBuildAndBootDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a kernel and boots QEMU; runs in `make test`")
	}
	outRoot := t.TempDir()
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	out, code := peerboot(t, "build", "--out", outRoot)
	if code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	t.Logf("build:\n%s", out)
	dir := filepath.Join(outRoot, "default")
	for _, f := range []string{"peerboot.efi", "disk.img", "pxe/vmlinuz", "pxe/initrd.img", "pxe/boot.ipxe", "manifest.json", "SHA256SUMS"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("output lacks %s", f)
		}
	}
	// The kernel release the image must report: the compiled kernel's, from the store.
	plan, _ := peerboot(t, "plan")
	release := kernelRelease(t, plan)
	for _, mode := range []string{"--uefi", "--pxe"} {
		t.Run(strings.TrimPrefix(mode, "--"), func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "report.json")
			out, code := peerboot(t, "run", mode, "--report", report, dir)
			t.Logf("run %s:\n%s", mode, out)
			if code != 0 {
				t.Fatalf("run %s: exit %d", mode, code)
			}
			r := readReport(t, report)
			if r.Verdict != selftest.Pass {
				t.Errorf("verdict %s, findings %+v", r.Verdict, r.Findings)
			}
			if r.Kernel.Release != release {
				t.Errorf("kernel release %q, want the compiled kernel's %q", r.Kernel.Release, release)
			}
			var nvidia *selftest.Module
			for i := range r.Modules {
				if r.Modules[i].Name == "nvidia" {
					nvidia = &r.Modules[i]
				}
			}
			if nvidia == nil || nvidia.Result != selftest.ModENODEV {
				t.Errorf("nvidia.ko outcome %+v, want ENODEV (it links, and finds no GPU)", nvidia)
			}
			if r.CUDA.CuInit == nil || r.CUDA.CuInit.Name != "CUDA_ERROR_NO_DEVICE" {
				t.Errorf("cuInit %+v, want CUDA_ERROR_NO_DEVICE", r.CUDA.CuInit)
			}
		})
	}
}

// kernelRelease reads the release file of the kernel stage the plan names.
func kernelRelease(t *testing.T, plan string) string {
	for _, line := range strings.Split(plan, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasSuffix(f[0], ".") && f[1] == "kernel" && strings.HasPrefix(f[len(f)-1], "kernel-") {
			b, err := os.ReadFile(filepath.Join(cacheDir(), "out", f[len(f)-1], "release"))
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSpace(string(b))
		}
	}
	t.Fatalf("no kernel stage in plan:\n%s", plan)
	return ""
}
