package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/qemu"
	"github.com/peerboot/peerboot/reportdisk"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/store"
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

// The default recipe's USB disk image has no boot menu (the UKI boots directly), so
// the init offers the recipe's burn-in (selftest.soak.menu = 8h) on the console. In
// QEMU (UEFI from disk.img, no GPU, no NIC): typing b then Enter on the serial
// console makes the boot a burn-in chosen on the console, which the report records
// (init.soak) and, with no GPU to soak, skips (soak.skipped) with a PASS; typing
// nothing boots the self-test alone after the prompt's timeout. Either way the
// report is also on the disk's report partition. The third boot is the default
// with a report URL and still no NIC: the network is down, the POST fails, and the
// burn-in's final report is on the partition all the same.
func TestStickBurnInPrompt(t *testing.T) {
	testguard.Short(t, "builds the default image (and a variant) and boots QEMU three times; runs in `make test`")
	work := t.TempDir()
	build := func(recipe ...string) string {
		outRoot := t.TempDir()
		if out, code := peerboot(t, append(append([]string{"build"}, recipe...), "--out", outRoot)...); code != 0 {
			t.Fatalf("build %v: exit %d\n%s", recipe, code, out)
		}
		return filepath.Join(outRoot, "default", "disk.img")
	}
	const url = "http://10.0.2.2:9/reports"
	disks := map[string]string{"default": build()}
	disks["report-url"] = build(variantRecipe(t, work, "report-url", "[boot]\nreport_url = \""+url+"\"\n"))
	const prompt = "peerboot: press b then Enter for burn-in (8h0m0s); booting the self-test in 5 s"
	for _, tt := range []struct {
		name, disk string
		answer     string // typed after the prompt; "" types nothing
	}{
		{"b", "default", "b\n"},
		{"nothing", "default", ""},
		{"b, network down", "report-url", "b\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var console bytes.Buffer
			var typed []string
			// qemu.Boot, not Run: the disk copy stays in WorkDir for the partition check.
			res, err := qemu.Boot(context.Background(), qemu.Options{Mode: qemu.UEFI, Disk: disks[tt.disk], WorkDir: t.TempDir(),
				Timeout: 20 * time.Minute, Console: &console,
				KVMHint: (&store.Store{Root: cacheDir()}).HintPath(store.KVMFailsHint),
				Reply: func(line string) string {
					if tt.answer != "" && strings.Contains(line, prompt) {
						typed = append(typed, line)
						return tt.answer
					}
					return ""
				},
				Succeeded: func() bool { return strings.Contains(console.String(), selftest.Marker) }})
			if err != nil || res.TimedOut {
				t.Fatalf("boot: %v (timed out: %v)\n%s", err, res != nil && res.TimedOut, tailOf(console.String(), 40))
			}
			out := console.String()
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "burn-in") || strings.Contains(l, "report POST") || strings.Contains(l, "report saved") || strings.Contains(l, "peerboot: network:") {
					t.Logf("console: %s", strings.TrimSpace(l))
				}
			}
			if !strings.Contains(out, prompt) || tt.answer != "" && len(typed) == 0 {
				t.Fatalf("no burn-in prompt on the serial console:\n%s", tailOf(out, 60))
			}
			r, err := selftest.FindLine(console.Bytes())
			if err != nil {
				t.Fatalf("no report on the console: %v\n%s", err, tailOf(out, 40))
			}
			var initSoak, skipped *selftest.Finding
			for i := range r.Findings {
				switch r.Findings[i].ID {
				case "init.soak":
					initSoak = &r.Findings[i]
				case "soak.skipped":
					skipped = &r.Findings[i]
				}
			}
			if r.Verdict != selftest.Pass {
				t.Errorf("verdict %s; findings %+v", r.Verdict, r.Findings)
			}
			if tt.answer != "" {
				if !strings.Contains(out, "burn-in: soaking for 8h0m0s after the self-test (chosen on the console)") {
					t.Errorf("the console does not say the burn-in was chosen there:\n%s", tailOf(out, 60))
				}
				if initSoak == nil || initSoak.Evidence != "console: b" || skipped == nil || skipped.Status != selftest.SevInfo {
					t.Errorf("init.soak %+v, soak.skipped %+v; findings %+v", initSoak, skipped, r.Findings)
				}
			} else {
				if !strings.Contains(out, "peerboot: no burn-in chosen: booting the self-test") || strings.Contains(out, "burn-in: soaking") {
					t.Errorf("the boot did not go on without a burn-in:\n%s", tailOf(out, 60))
				}
				if initSoak != nil || skipped != nil {
					t.Errorf("soaked without an answer: init.soak %+v, soak.skipped %+v", initSoak, skipped)
				}
			}
			if tt.disk == "report-url" && !strings.Contains(out, "report POST to "+url+" failed") {
				t.Errorf("the POST with the network down did not fail on the console:\n%s", tailOf(out, 60))
			}
			// The same report on the disk's report partition: written with no network.
			found, err := reportdisk.Read(res.DiskCopy)
			if err != nil || len(found) != 1 || found[0].Report == nil || found[0].Report.StartedAt != r.StartedAt || found[0].Report.Verdict != r.Verdict {
				t.Errorf("report partition of the booted disk: %d reports, %v", len(found), err)
			}
			t.Logf("%s: %s from power-on to shutdown (%s)", tt.name, res.Duration.Round(100*time.Millisecond), res.Accel)
		})
	}
}

// The prompt is the init's, so it works where a boot loader's menu could not: the
// default image signed with Debian's snakeoil key, its ISO booted as a BMC mounts it
// with Secure Boot enforced (OVMF), b typed on the serial console: the kernel says
// Secure Boot is on and the boot is a burn-in chosen on the console.
func TestBurnInPromptSecureBootISO(t *testing.T) {
	testguard.Short(t, "builds and signs the default image and boots QEMU; runs in `make test`")
	const snakeoilKey, snakeoilCert = "/usr/share/ovmf/PkKek-1-snakeoil.key", "/usr/share/ovmf/PkKek-1-snakeoil.pem"
	for _, f := range []string{snakeoilKey, snakeoilCert} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("Debian's ovmf package is needed: %v", err)
		}
	}
	tmp := t.TempDir()
	if out, code := peerboot(t, "build", "--out", tmp); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	dir := filepath.Join(tmp, "default")
	keys := filepath.Join(tmp, "keys")
	if out, code := peerboot(t, "keys", "init", keys); code != 0 {
		t.Fatalf("keys init: exit %d\n%s", code, out)
	}
	t.Setenv("PEERBOOT_KEY_PASSPHRASE", "snakeoil")
	if out, code := peerboot(t, "sign", dir, "--db-key", "file:"+snakeoilKey, "--db-cert", "file:"+snakeoilCert, "--artifact-key", "file:"+filepath.Join(keys, "artifact.key")); code != 0 {
		t.Fatalf("sign: exit %d\n%s", code, out)
	}
	const prompt = "peerboot: press b then Enter for burn-in (8h0m0s); booting the self-test in 5 s"
	var console bytes.Buffer
	typed := 0
	res, err := qemu.Run(context.Background(), qemu.RunOptions{Mode: qemu.ISO, OutDir: dir, SecureBoot: true, Timeout: 20 * time.Minute,
		LogFile: filepath.Join(t.TempDir(), "console.log"), Verbose: &console,
		KVMHint: (&store.Store{Root: cacheDir()}).HintPath(store.KVMFailsHint),
		Reply: func(line string) string {
			if strings.Contains(line, prompt) {
				typed++
				return "b\n"
			}
			return ""
		}})
	out := console.String()
	if err != nil {
		t.Fatalf("run --secure-boot --iso: %v\n%s", err, tailOf(out, 40))
	}
	for _, want := range []string{"secureboot: Secure boot enabled", "burn-in: soaking for 8h0m0s after the self-test (chosen on the console)"} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, tailOf(out, 60))
		}
	}
	var initSoak *selftest.Finding
	for i := range res.Report.Findings {
		if res.Report.Findings[i].ID == "init.soak" {
			initSoak = &res.Report.Findings[i]
		}
	}
	if typed != 1 || initSoak == nil || initSoak.Evidence != "console: b" || res.Report.Verdict != selftest.Pass {
		t.Errorf("typed %d, init.soak %+v, verdict %s", typed, initSoak, res.Report.Verdict)
	}
	t.Logf("signed ISO under Secure Boot, b typed: %s from power-on to shutdown (%s)", res.Boot.Duration.Round(100*time.Millisecond), res.Boot.Accel)
}
