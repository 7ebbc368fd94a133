package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCommandLine(t *testing.T) {
	// Paths with a comma: QEMU's option lists need it doubled, or cut the path there.
	work := filepath.Join(t.TempDir(), "a,b")
	os.Mkdir(work, 0o755)
	disk := filepath.Join(work, "in.img")
	os.WriteFile(disk, []byte("disk"), 0o644)
	pxe := filepath.Join(t.TempDir(), "p,x")
	os.Mkdir(pxe, 0o755)
	esc := func(p string) string { return strings.ReplaceAll(p, ",", ",,") }
	os.WriteFile(filepath.Join(pxe, "boot.ipxe"), []byte("#!ipxe\n"), 0o644)

	if firstExisting(OVMFCode) != "" {
		args, copyPath, err := commandLine(Options{Mode: UEFI, Disk: disk, WorkDir: work, Accel: "tcg"})
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Join(args, " ")
		for _, want := range []string{"-machine q35", "-accel tcg", "if=pflash,format=raw,unit=0,readonly=on", "file=" + esc(filepath.Join(work, "OVMF_VARS.fd")), "if=virtio,format=raw,file=" + esc(copyPath), "-nic none", "-no-reboot"} {
			if !strings.Contains(line, want) {
				t.Errorf("UEFI command line lacks %q:\n%s", want, line)
			}
		}
		if copyPath == disk {
			t.Error("UEFI boots the output disk itself, not a private copy")
		}
	}
	if firstExisting(OVMFCode) != "" {
		iso := filepath.Join(work, "in.iso")
		os.WriteFile(iso, []byte("iso"), 0o644)
		args, copyPath, err := commandLine(Options{Mode: ISO, ISO: iso, WorkDir: work, Accel: "tcg"})
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Join(args, " ")
		for _, want := range []string{"if=pflash,format=raw,unit=0,readonly=on", "if=none,id=cd,format=raw,media=cdrom,readonly=on,file=" + esc(iso), "-device ide-cd,drive=cd,bootindex=0", "-nic none"} {
			if !strings.Contains(line, want) {
				t.Errorf("ISO command line lacks %q:\n%s", want, line)
			}
		}
		if copyPath != "" || strings.Contains(line, "if=virtio") {
			t.Errorf("ISO boot attaches a disk too: %s", line)
		}
		if _, _, err := commandLine(Options{Mode: ISO, ISO: filepath.Join(work, "missing.iso"), WorkDir: work}); err == nil {
			t.Error("a missing ISO accepted")
		}
	}
	if firstExisting(OVMFCode) != "" {
		args, _, err := commandLine(Options{Mode: UEFI, Disk: disk, WorkDir: work, Accel: "tcg", Net: true})
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Join(args, " ")
		if !strings.Contains(line, "-netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile=") || strings.Contains(line, "-nic none") {
			t.Errorf("UEFI --net command line: %s", line)
		}
		args, copyPath, err := commandLine(Options{Mode: UEFIPXE, PXEDir: pxe, WorkDir: work, Accel: "tcg"})
		if err != nil {
			t.Fatal(err)
		}
		line = strings.Join(args, " ")
		for _, want := range []string{"if=pflash,format=raw,unit=0,readonly=on", "-boot n", "user,model=virtio-net-pci,tftp=" + esc(pxe) + ",bootfile=boot.ipxe"} {
			if !strings.Contains(line, want) {
				t.Errorf("UEFI PXE command line lacks %q:\n%s", want, line)
			}
		}
		if copyPath != "" || strings.Contains(line, "if=virtio") || strings.Contains(line, "-nic none") {
			t.Errorf("UEFI PXE attaches a disk or no NIC: %s", line)
		}
		if _, _, err := commandLine(Options{Mode: UEFIPXE, PXEDir: t.TempDir(), WorkDir: work}); err == nil || !strings.Contains(err.Error(), "no boot.ipxe") {
			t.Errorf("UEFI PXE without boot.ipxe: %v", err)
		}
		if _, _, err := commandLine(Options{Mode: UEFIPXE, PXEDir: pxe, WorkDir: work, SecureBoot: true}); err == nil {
			t.Error("Secure Boot of the unsigned iPXE ROM accepted")
		}
	}
	args, _, err := commandLine(Options{Mode: PXE, PXEDir: pxe, Accel: "kvm"})
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.Join(args, " "); !strings.Contains(line, "user,model=virtio-net-pci,tftp="+esc(pxe)+",bootfile=boot.ipxe") || !strings.Contains(line, "-accel kvm -cpu host") {
		t.Errorf("PXE command line: %s", line)
	}
	if _, _, err := commandLine(Options{Mode: PXE, PXEDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no boot.ipxe") {
		t.Errorf("missing boot.ipxe: %v", err)
	}
	if _, _, err := commandLine(Options{Mode: "floppy"}); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, _, err := commandLine(Options{Mode: PXE, PXEDir: pxe, Accel: "hvf"}); err == nil {
		t.Error("unknown accelerator accepted")
	}
}

// Reply types on the serial console: QEMU's stdin under -serial stdio. The QEMU here
// is a stand-in script on PATH (a real boot that answers is e2e's
// TestStickBurnInPrompt): it prints a prompt, reads a line and prints what it got.
func TestBootReplyTypesOnTheConsole(t *testing.T) {
	fake := t.TempDir()
	script := "#!/bin/sh\necho 'guest: press b then Enter'\nread answer\necho \"guest: got [$answer]\"\n"
	if err := os.WriteFile(filepath.Join(fake, "qemu-system-x86_64"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	pxe := t.TempDir()
	os.WriteFile(filepath.Join(pxe, "boot.ipxe"), []byte("#!ipxe\n"), 0o644)
	for _, tt := range []struct {
		name  string
		reply func(string) string
		want  string
	}{
		{"answers the prompt", func(l string) string {
			if strings.Contains(l, "press b") {
				return "b\n"
			}
			return ""
		}, "guest: got [b]"},
		// No Reply: the console has no input, as before (stdin is /dev/null).
		{"no reply", nil, "guest: got []"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Boot(context.Background(), Options{Mode: PXE, PXEDir: pxe, Accel: "tcg", Timeout: time.Minute, WorkDir: t.TempDir(), Reply: tt.reply})
			if err != nil {
				t.Fatal(err)
			}
			if res.TimedOut || len(res.Lines) != 2 || res.Lines[1] != tt.want {
				t.Errorf("console %q (timed out: %v), want the second line %q", res.Lines, res.TimedOut, tt.want)
			}
		})
	}
}
