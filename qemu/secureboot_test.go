package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecureBootCommandLine(t *testing.T) {
	for _, f := range []string{SecureBootCode, SecureBootVars} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("Debian's ovmf package is needed: %v", err)
		}
	}
	work := t.TempDir()
	disk := filepath.Join(work, "in.img")
	os.WriteFile(disk, []byte("disk"), 0o644)
	args, _, err := commandLine(Options{Mode: UEFI, Disk: disk, WorkDir: work, Accel: "tcg", SecureBoot: true})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{"-machine q35,smm=on", "-global driver=cfi.pflash01,property=secure,value=on", "unit=0,readonly=on,file=" + SecureBootCode, "unit=1,file=" + filepath.Join(work, "OVMF_VARS.fd")} {
		if !strings.Contains(line, want) {
			t.Errorf("Secure Boot command line lacks %q:\n%s", want, line)
		}
	}
	got, _ := os.ReadFile(filepath.Join(work, "OVMF_VARS.fd"))
	want, _ := os.ReadFile(SecureBootVars)
	if !bytes.Equal(got, want) {
		t.Error("the private VARS copy is not the snakeoil template")
	}
	// Without Secure Boot nothing changes.
	args, _, _ = commandLine(Options{Mode: UEFI, Disk: disk, WorkDir: work, Accel: "tcg"})
	if line := strings.Join(args, " "); strings.Contains(line, "smm=on") || strings.Contains(line, "secure") {
		t.Errorf("plain UEFI command line mentions Secure Boot: %s", line)
	}
	if _, _, err := commandLine(Options{Mode: PXE, PXEDir: work, SecureBoot: true}); err == nil {
		t.Error("Secure Boot with PXE accepted")
	}
}

func TestIsRefusal(t *testing.T) {
	// As OVMF printed it for an unsigned and an altered UKI (Debian ovmf 2022.11).
	if !IsRefusal(`BdsDxe: failed to load Boot0002 "UEFI Misc Device" from PciRoot(0x0)/Pci(0x2,0x0): Access Denied`) {
		t.Error("the Access Denied line is not a refusal")
	}
	for _, l := range []string{
		`BdsDxe: failed to load Boot0001 "UEFI QEMU DVD-ROM QM00005 " from PciRoot(0x0)/Pci(0x1F,0x2)/Sata(0x2,0xFFFF,0x0): Not Found`,
		`BdsDxe: starting Boot0002 "UEFI Misc Device" from PciRoot(0x0)/Pci(0x2,0x0)`,
	} {
		if IsRefusal(l) {
			t.Errorf("%q taken for a refusal", l)
		}
	}
}
