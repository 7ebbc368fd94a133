package e2e

import (
	"github.com/peerboot/peerboot/internal/testguard"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/selftest"
)

// The default image's PXE bundle offers a burn-in entry (the recipe's
// selftest.soak.menu); booted with that entry's command line in QEMU (no GPU), the
// init asks p2pcheck for the soak and the verdict says it was skipped and why: the
// GPU-less default recipe on a GPU-less box has nothing to burn in.
func TestBootBurnInEntryDefault(t *testing.T) {
	testguard.Short(t, "builds the default image and boots QEMU; runs in `make test`")
	outRoot := t.TempDir()
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	dir := filepath.Join(outRoot, "default")
	script, err := os.ReadFile(filepath.Join(dir, "pxe", "boot.ipxe"))
	if err != nil {
		t.Fatal(err)
	}
	// The bundle's burn-in entry: its label and kernel line, booted alone (the menu
	// would take the normal boot after its timeout).
	var burnIn []string
	in := false
	for _, l := range strings.Split(string(script), "\n") {
		switch {
		case l == ":burnin":
			in = true
		case strings.HasPrefix(l, ":"):
			in = false
		case in && l != "":
			burnIn = append(burnIn, l)
		}
	}
	if !strings.Contains(string(script), "item burnin burn-in (8 h)") || len(burnIn) != 3 || !strings.HasSuffix(burnIn[0], " peerboot.soak=8h0m0s") {
		t.Fatalf("boot.ipxe has no burn-in entry:\n%s", script)
	}
	pxe := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.Symlink(filepath.Join(dir, "pxe", f), filepath.Join(pxe, f)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pxe, "boot.ipxe"), []byte("#!ipxe\n"+strings.Join(burnIn, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	report, logFile := filepath.Join(t.TempDir(), "report.json"), filepath.Join(t.TempDir(), "console.log")
	out, code := peerboot(t, "run", "--pxe", "--timeout", "20m", "--pxe-dir", pxe, "--log", logFile, "--report", report, dir)
	t.Logf("run --pxe (burn-in entry):\n%s", out)
	if code != 0 {
		t.Fatalf("run: exit %d", code)
	}
	console, _ := os.ReadFile(logFile)
	if !strings.Contains(string(console), "burn-in: soaking for 8h0m0s after the self-test (peerboot.soak)") {
		t.Errorf("the console does not say the burn-in was asked for:\n%s", console)
	}
	r := readReport(t, report)
	var skipped *selftest.Finding
	for i := range r.Findings {
		if r.Findings[i].ID == "soak.skipped" {
			skipped = &r.Findings[i]
		}
	}
	if r.Verdict != selftest.Pass || skipped == nil || skipped.Status != selftest.SevInfo || !strings.Contains(skipped.Message, "the recipe expects no GPUs (platform.gpus = 0) and the box has none") {
		t.Errorf("verdict %s, soak.skipped %+v; findings %+v", r.Verdict, skipped, r.Findings)
	}
}
