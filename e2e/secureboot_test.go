package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Secure Boot in OVMF: the default image, signed with Debian's snakeoil key
// (enrolled in OVMF_VARS_4M.snakeoil.fd), boots to a PASS verdict with Secure
// Boot enforced; the unsigned UKI and the signed UKI with one byte flipped are
// refused by the firmware ("Access Denied"), and run says so with exit 6.
func TestSecureBootDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds (a store hit after TestBuildAndBootDefault) and boots QEMU four times; runs in `make test`")
	}
	const snakeoilKey, snakeoilCert = "/usr/share/ovmf/PkKek-1-snakeoil.key", "/usr/share/ovmf/PkKek-1-snakeoil.pem"
	for _, f := range []string{snakeoilKey, snakeoilCert} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("Debian's ovmf package is needed: %v", err)
		}
	}
	tmp := t.TempDir()
	fetchBuildDefault(t, tmp)
	dir := filepath.Join(tmp, "default")
	unsigned := filepath.Join(tmp, "unsigned.efi")
	b, err := os.ReadFile(filepath.Join(dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(unsigned, b, 0o644)

	keys := filepath.Join(tmp, "keys")
	if out, code := peerboot(t, "keys", "init", keys); code != 0 {
		t.Fatalf("keys init: exit %d\n%s", code, out)
	}
	t.Setenv("PEERBOOT_KEY_PASSPHRASE", "snakeoil")
	out, code := peerboot(t, "sign", dir, "--db-key", "file:"+snakeoilKey, "--db-cert", "file:"+snakeoilCert, "--artifact-key", "file:"+filepath.Join(keys, "artifact.key"))
	t.Logf("sign:\n%s", out)
	if code != 0 {
		t.Fatalf("sign: exit %d", code)
	}
	if !strings.Contains(out, "peerboot.iso: rewritten around the signed UKI") {
		t.Error("sign did not rebuild peerboot.iso around the signed UKI")
	}
	out, code = peerboot(t, "verify", dir, "--key", filepath.Join(keys, "cosign.pub"), "--db-cert", snakeoilCert)
	t.Logf("verify:\n%s", out)
	if code != 0 {
		t.Fatalf("verify: exit %d", code)
	}

	t.Run("signed", func(t *testing.T) {
		out, code := peerboot(t, "run", "--secure-boot", dir)
		t.Logf("run --secure-boot:\n%s", out)
		if code != 0 || !strings.Contains(out, "self-test: PASS") {
			t.Fatalf("signed disk under Secure Boot: exit %d, want a PASS verdict", code)
		}
		console, _ := os.ReadFile(filepath.Join(dir, "console-uefi.log"))
		if !strings.Contains(string(console), "secureboot: Secure boot enabled") {
			t.Error("the kernel did not report Secure Boot enabled: the firmware did not enforce it")
		}
	})
	// The ISO as a BMC would mount it, signed UKI inside, same firmware.
	t.Run("signed ISO", func(t *testing.T) {
		out, code := peerboot(t, "run", "--secure-boot", "--iso", dir)
		t.Logf("run --secure-boot --iso:\n%s", out)
		if code != 0 || !strings.Contains(out, "self-test: PASS") {
			t.Fatalf("signed ISO under Secure Boot: exit %d, want a PASS verdict", code)
		}
		console, _ := os.ReadFile(filepath.Join(dir, "console-iso.log"))
		if !strings.Contains(string(console), "secureboot: Secure boot enabled") {
			t.Error("the kernel did not report Secure Boot enabled: the firmware did not enforce it")
		}
	})
	flipped := filepath.Join(tmp, "flipped.efi")
	s, _ := os.ReadFile(filepath.Join(dir, "peerboot.efi"))
	s[len(s)/2] ^= 0x01 // inside the kernel section, covered by the Authenticode hash
	os.WriteFile(flipped, s, 0o644)
	for name, efi := range map[string]string{"unsigned": unsigned, "flipped": flipped} {
		t.Run(name, func(t *testing.T) {
			out, code := peerboot(t, "run", "--secure-boot", "--efi", efi, "--log", filepath.Join(tmp, name+".log"))
			t.Logf("run --secure-boot --efi %s:\n%s", name, out)
			if code != 6 || !strings.Contains(out, "refused") || !strings.Contains(out, "Access Denied") {
				t.Errorf("%s UKI under Secure Boot: exit %d, want 6 with the firmware's Access Denied", name, code)
			}
		})
	}
}
