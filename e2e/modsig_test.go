package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/initramfs"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/sign/modsign"
)

// ekeyrejected is EKEYREJECTED on x86-64 ("Key was rejected by service"): what
// finit_module returns under module.sig_enforce=1 for a module signed by a key
// the kernel does not trust (or not signed at all).
const ekeyrejected = 129

// Module signatures, enforced (issue 6): the default recipe with
// sign.module_key/module_cert from a `peerboot keys init` key set and
// module.sig_enforce=1 on the kernel command line. The kernel is compiled with
// the module certificate in its built-in keyring and every module in the image
// is signed, so nvidia.ko still loads as far as ENODEV and the verdict passes;
// the output verifies with `verify --module-cert`. Then nvidia.ko in a copy of
// the same rootfs is re-signed with ANOTHER key by the kernel's own
// scripts/sign-file (not our signer) and booted with the same kernel and
// command line: the kernel refuses it with EKEYREJECTED.
//
// The key set lives in the store directory (<cache>/e2e-keys), made once: the
// kernel key includes the certificate's digest, so fresh keys on every run
// would cost a kernel compile (~9-20 min here) every time. The first run pays
// one compile; later runs hit the store.
func TestSignedModulesEnforced(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles a kernel with the module certificate (once per store) and boots QEMU twice; runs in `make test`")
	}
	keys := filepath.Join(cacheDir(), "e2e-keys")
	if _, err := os.Stat(filepath.Join(keys, "module.crt")); err != nil {
		if out, code := peerboot(t, "keys", "init", keys); code != 0 {
			t.Fatalf("keys init: exit %d\n%s", code, out)
		}
	}
	tmp := t.TempDir()
	recipe := signedRecipe(t, tmp, keys)
	if out, code := peerboot(t, "fetch", recipe); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	outRoot := filepath.Join(tmp, "out")
	out, code := peerboot(t, "build", recipe, "--out", outRoot)
	t.Logf("build:\n%s", out)
	if code != 0 {
		t.Fatalf("build: exit %d", code)
	}
	dir := filepath.Join(outRoot, "modsig")
	plan, _ := peerboot(t, "plan", recipe)
	kernelOut, modulesOut := stageDir(t, plan, "kernel"), stageDir(t, plan, "modules")
	if b, err := os.ReadFile(filepath.Join(kernelOut, "config")); err != nil || !strings.Contains(string(b), "CONFIG_SYSTEM_TRUSTED_KEYS=\".peerboot/trusted-certs.pem\"") {
		t.Fatalf("the kernel stage's config does not name the module certificate (%v)", err)
	}

	t.Run("verify", func(t *testing.T) {
		out, code := peerboot(t, "sign", dir, "--artifact-key", "file:"+filepath.Join(keys, "artifact.key"))
		if code != 0 {
			t.Fatalf("sign: exit %d\n%s", code, out)
		}
		out, code = peerboot(t, "verify", dir, "--key", filepath.Join(keys, "cosign.pub"), "--module-cert", filepath.Join(keys, "module.crt"))
		t.Logf("verify:\n%s", out)
		if code != 0 || !strings.Contains(out, "module signatures OK") {
			t.Fatalf("verify --module-cert: exit %d", code)
		}
	})

	t.Run("signed", func(t *testing.T) {
		report := filepath.Join(t.TempDir(), "report.json")
		out, code := peerboot(t, "run", "--uefi", "--report", report, dir)
		t.Logf("run --uefi:\n%s", out)
		r := readReport(t, report)
		if code != 0 || r.Verdict != selftest.Pass {
			t.Errorf("signed modules under module.sig_enforce=1: exit %d, verdict %s, findings %+v", code, r.Verdict, r.Findings)
		}
		if m := module(r, "nvidia"); m == nil || m.Result != selftest.ModENODEV {
			t.Errorf("nvidia.ko outcome %+v, want ENODEV: the kernel accepted its signature and it found no GPU", m)
		}
		console, _ := os.ReadFile(filepath.Join(dir, "console-uefi.log"))
		if !strings.Contains(string(console), "module.sig_enforce=1") {
			t.Error("the kernel command line lacks module.sig_enforce=1")
		}
		loaded := false // the kernel's "Loaded X.509 cert '<O>: <CN>: <key id>'"
		for _, l := range strings.Split(string(console), "\n") {
			loaded = loaded || strings.Contains(l, "Loaded X.509 cert '") && strings.Contains(l, "peerboot TEST module signing key")
		}
		if !loaded {
			t.Error("the console does not show the kernel loading the module certificate into its built-in keyring")
		}
	})

	t.Run("another key", func(t *testing.T) {
		other := filepath.Join(tmp, "other-keys")
		if out, code := peerboot(t, "keys", "init", other); code != 0 {
			t.Fatalf("keys init: exit %d\n%s", code, out)
		}
		// One more initrd segment holding only the re-signed nvidia.ko, after the
		// image's own: the kernel unpacks segments in turn and the later file
		// replaces the earlier, as the config layer replaces userspace files.
		orig, _ := filepath.Glob(filepath.Join(modulesOut, "root/usr/lib/modules/*/updates/dkms/nvidia.ko"))
		if len(orig) != 1 {
			t.Fatalf("nvidia.ko not found in the modules stage output (%v)", orig)
		}
		rel, _ := filepath.Rel(filepath.Join(modulesOut, "root"), orig[0])
		root := filepath.Join(tmp, "root")
		kos := []string{filepath.Join(root, rel)}
		os.MkdirAll(filepath.Dir(kos[0]), 0o755)
		b, err := os.ReadFile(orig[0])
		if err != nil {
			t.Fatal(err)
		}
		body, _, err := modsign.Split(b) // drop the good signature
		if err != nil {
			t.Fatalf("nvidia.ko in the image is not signed: %v", err)
		}
		if err := os.WriteFile(kos[0], body, 0o644); err != nil {
			t.Fatal(err)
		}
		signFile := filepath.Join(kernelOut, "build/scripts/sign-file")
		if out, err := exec.Command(signFile, "sha256", filepath.Join(other, "module.key"), filepath.Join(other, "module.crt"), kos[0]).CombinedOutput(); err != nil {
			t.Fatalf("sign-file: %v\n%s", err, out)
		}
		// The same kernel and command line, from the signed output's PXE bundle.
		bad := filepath.Join(tmp, "other-out")
		os.MkdirAll(filepath.Join(bad, "pxe"), 0o755)
		for _, f := range []string{"vmlinuz", "boot.ipxe"} {
			if out, err := exec.Command("cp", filepath.Join(dir, "pxe", f), filepath.Join(bad, "pxe", f)).CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		initrd, err := os.ReadFile(filepath.Join(dir, "pxe", "initrd.img"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(bad, "pxe", "initrd.img"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(initrd); err != nil {
			t.Fatal(err)
		}
		if _, err := initramfs.Pack(context.Background(), root, 1700000000, f); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		report := filepath.Join(t.TempDir(), "report.json")
		out, code := peerboot(t, "run", "--pxe", "--report", report, bad)
		t.Logf("run --pxe (nvidia.ko signed with another key): exit %d\n%s", code, out)
		r := readReport(t, report)
		m := module(r, "nvidia")
		if m == nil || m.Result != selftest.ModError || m.Errno != ekeyrejected {
			t.Errorf("nvidia.ko signed with another key: outcome %+v, want error with errno %d (EKEYREJECTED)", m, ekeyrejected)
		}
		console, _ := os.ReadFile(filepath.Join(bad, "console-pxe.log"))
		if !strings.Contains(string(console), "Loading of module with unavailable key is rejected") {
			t.Error("console lacks the kernel's \"Loading of module with unavailable key is rejected\"")
		}
		if code == 0 || r.Verdict == selftest.Pass {
			t.Errorf("exit %d, verdict %s: a refused nvidia.ko must not pass", code, r.Verdict)
		}
	})
}

// signedRecipe writes a recipe over recipes/default.toml that signs modules
// with the key set in keys and enforces module signatures, with the default
// lock beside it (signing changes no pinned input).
func signedRecipe(t *testing.T, dir, keys string) string {
	t.Helper()
	return variantRecipe(t, dir, "modsig", "name = \"modsig\"\n\n"+
		"[kernel]\ncmdline = \"console=ttyS0,115200 panic=-1 module.sig_enforce=1\"\n\n"+
		"[sign]\nmodule_key = "+quote("file:"+filepath.Join(keys, "module.key"))+"\n"+
		"module_cert = "+quote("file:"+filepath.Join(keys, "module.crt"))+"\n")
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// stageDir is the store output of the stage the plan names.
func stageDir(t *testing.T, plan, stage string) string {
	t.Helper()
	for _, line := range strings.Split(plan, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasSuffix(f[0], ".") && f[1] == stage && strings.HasPrefix(f[len(f)-1], stage+"-") {
			return filepath.Join(cacheDir(), "out", f[len(f)-1])
		}
	}
	t.Fatalf("no %s stage in plan:\n%s", stage, plan)
	return ""
}

func readReport(t *testing.T, path string) *selftest.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no report: %v", err)
	}
	r, err := selftest.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func module(r *selftest.Report, name string) *selftest.Module {
	for i := range r.Modules {
		if r.Modules[i].Name == name {
			return &r.Modules[i]
		}
	}
	return nil
}
