// Package qemu boots peerboot's outputs in QEMU (q35) the ways nodes boot them:
// UEFI from the GPT disk (OVMF), UEFI from the ISO as a CD-ROM (OVMF, as a BMC's
// virtual media) and PXE (iPXE over user-mode networking with QEMU's built-in
// TFTP, under SeaBIOS, or UEFIPXE: iPXE's EFI ROM under OVMF), optionally with
// a TPM 2.0 (swtpm), streams the serial console, and hands back the console text.
package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
)

// Mode is how the machine boots.
type Mode string

const (
	UEFI Mode = "uefi"
	PXE  Mode = "pxe"
	// ISO boots OVMF from the ISO attached as a read-only CD-ROM (AHCI):
	// the firmware finds its El Torito UEFI entry.
	ISO Mode = "iso"
	// UEFIPXE network-boots OVMF: the firmware runs the virtio NIC's iPXE EFI
	// option ROM (Debian's ipxe-qemu efi-virtio.rom), slirp's DHCP names
	// boot.ipxe and its TFTP serves PXEDir. An iPXE "chain URL ARGS" of a UKI
	// starts systemd-stub with ARGS as its load options, which the stub uses
	// as the kernel command line when Secure Boot is off (and measures into
	// PCR 12); its sections go into PCR 11 as on a disk boot.
	UEFIPXE Mode = "uefi-pxe"
)

// Firmware files from Debian's ovmf and ipxe-qemu packages.
var (
	OVMFCode = []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_CODE.fd"}
	// Secure Boot: the SMM-requiring code and Debian's VARS template with the
	// "snakeoil" test key enrolled in PK, KEK and db (/usr/share/ovmf/PkKek-1-snakeoil.*).
	SecureBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	SecureBootVars = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd"
	OVMFVars       = map[string]string{
		"/usr/share/OVMF/OVMF_CODE_4M.fd": "/usr/share/OVMF/OVMF_VARS_4M.fd",
		"/usr/share/OVMF/OVMF_CODE.fd":    "/usr/share/OVMF/OVMF_VARS.fd",
	}
)

// Options describe one boot.
type Options struct {
	Mode    Mode
	Disk    string // raw GPT disk (UEFI); a private copy is booted, the file is untouched
	PXEDir  string // directory served over TFTP, holding boot.ipxe (PXE)
	ISO     string // ISO 9660 image (ISO); attached read-only, never copied
	Cmdline string // extra kernel arguments: for PXE only (UEFI's are in the UKI)
	Memory  string // e.g. "2G"
	Timeout time.Duration
	Accel   string    // "kvm", "tcg", or "" (auto: KVM when usable, TCG if KVM fails)
	WorkDir string    // private VARS and disk copy
	Console io.Writer // every console byte, as it arrives
	// Stop, if set, is called with each console line; returning true ends the boot
	// early (the guest said all it has to say).
	Stop func(line string) bool
	// Reply, if set, is called with each console line; what it returns (e.g. "b\n")
	// is typed on the serial console, as a person at the box would type it. Without
	// it the console gets no input.
	Reply func(line string) string
	// Succeeded, if set, says after a boot whether it did its job; in auto mode a
	// KVM boot that did not is repeated under TCG (nested KVM can fail silently).
	Succeeded func() bool
	// KVMHint, if set, is a file that remembers that KVM failed on this host,
	// so later boots go straight to TCG instead of losing a boot to KVM.
	KVMHint string
	// SecureBoot (UEFI only) boots OVMF with Secure Boot enforced and the
	// snakeoil test key in db: q35 with SMM, a secure pflash, SecureBootCode and
	// a private copy of SecureBootVars. A boot the firmware refuses ends at once
	// with Result.Refused set.
	SecureBoot bool
	// TPM gives the VM a TPM 2.0 (swtpm, attached as tpm-crb): OVMF measures
	// the boot into it and systemd-stub extends PCR 11. swtpm runs for this
	// boot only and is stopped after it, also on a timeout or an error.
	TPM bool
	// TPMStateDir keeps the TPM's state (its endorsement seed: the same EK and
	// AK at every boot, as one node's chip). "" gives a fresh TPM in WorkDir.
	TPMStateDir string
	// TPMEKCert manufactures a new TPM state as a vendor would: swtpm_setup
	// writes RSA and ECC EK certificates (signed by swtpm_localca's CA, under
	// /var/lib/swtpm-localca) into NV, so the node sends an EK certificate. A
	// state dir that already holds a TPM is used as it is.
	TPMEKCert bool
	// Net (UEFI, ISO) gives the guest user-mode networking: a virtio NIC whose
	// DHCP is slirp's, the host at 10.0.2.2. The NIC has no option ROM, so
	// the firmware still boots the disk or CD. PXE and UEFIPXE always have it.
	Net bool
}

// Result is what a boot produced.
type Result struct {
	Lines    []string
	Duration time.Duration
	TimedOut bool
	DiskCopy string // the booted disk copy, with whatever the guest wrote to it
	Accel    string // the accelerator that ran the boot
	// Refused is the firmware's console line refusing to start the boot image
	// (Secure Boot: "BdsDxe: failed to load Boot0001 ... : Access Denied").
	Refused string

	kvmFailed bool
}

// kvmFailure is what QEMU prints when KVM cannot run the guest (seen in nested
// virtualisation, where OVMF's x87 instructions fail to emulate).
const kvmFailure = "KVM internal error"

// Boot runs QEMU until the guest powers off, Stop says so, or the timeout. In
// auto mode a KVM failure restarts the boot under TCG.
func Boot(ctx context.Context, opt Options) (*Result, error) {
	if opt.Accel != "" {
		return boot(ctx, opt)
	}
	opt.Accel = "tcg"
	if kvmUsable() && !exists(opt.KVMHint) {
		opt.Accel = "kvm"
	}
	res, err := boot(ctx, opt)
	if opt.Accel == "kvm" && res != nil && !res.TimedOut && (res.kvmFailed || (opt.Succeeded != nil && !opt.Succeeded())) {
		if opt.Console != nil {
			fmt.Fprintln(opt.Console, "peerboot run: the KVM boot failed here; booting again under TCG")
		}
		if opt.KVMHint != "" {
			os.MkdirAll(filepath.Dir(opt.KVMHint), 0o755)
			os.WriteFile(opt.KVMHint, []byte("KVM boots failed on this host; delete this file to try KVM again\n"), 0o644)
		}
		opt.Accel = "tcg"
		return boot(ctx, opt)
	}
	return res, err
}

func exists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Stat(path)
	return err == nil
}

func boot(ctx context.Context, opt Options) (*Result, error) {
	args, diskCopy, err := commandLine(opt)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if opt.TPM {
		state := opt.TPMStateDir
		if state == "" {
			state = filepath.Join(opt.WorkDir, "tpm")
		}
		if opt.TPMEKCert {
			if err := manufactureTPM(ctx, state); err != nil {
				return nil, err
			}
		}
		tpm, err := startTPM(ctx, state, opt.WorkDir)
		if err != nil {
			return nil, err
		}
		// Deferred before cmd.Wait runs: QEMU is gone (or killed by ctx) first.
		defer tpm.Stop()
		args = append(args, tpm.qemuArgs()...)
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	var typing io.WriteCloser
	if opt.Reply != nil {
		// -serial stdio: QEMU's stdin is the guest's serial input.
		if typing, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	res := &Result{DiskCopy: diskCopy, Accel: opt.Accel}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	stopped := false
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		res.Lines = append(res.Lines, line)
		if opt.Console != nil {
			fmt.Fprintln(opt.Console, line)
		}
		if strings.Contains(line, kvmFailure) {
			res.kvmFailed = true
			stopped = true
			cmd.Process.Kill()
			break
		}
		if opt.SecureBoot && IsRefusal(line) {
			res.Refused = line
			stopped = true
			cmd.Process.Kill()
			break
		}
		if typing != nil {
			if in := opt.Reply(line); in != "" {
				if _, err := io.WriteString(typing, in); err != nil && opt.Console != nil {
					fmt.Fprintf(opt.Console, "peerboot run: typing on the console: %v\n", err)
				}
			}
		}
		if opt.Stop != nil && opt.Stop(line) {
			stopped = true
			cmd.Process.Kill()
			break
		}
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	res.Duration = time.Since(start)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.TimedOut = true
		return res, nil
	}
	if err != nil && !stopped {
		return res, fmt.Errorf("qemu: %w (last lines: %s)", err, strings.Join(tail(res.Lines, 5), " | "))
	}
	return res, nil
}

func commandLine(opt Options) ([]string, string, error) {
	if opt.Memory == "" {
		opt.Memory = "2G"
	}
	machine := "q35"
	if opt.SecureBoot {
		if opt.Mode != UEFI && opt.Mode != ISO {
			//lint:ignore ST1005 Secure Boot is a proper noun
			return nil, "", fmt.Errorf("Secure Boot needs a UEFI boot mode (uefi, iso), not %q", opt.Mode)
		}
		machine = "q35,smm=on"
	}
	args := []string{"-machine", machine, "-m", opt.Memory, "-smp", "2", "-nographic", "-no-reboot",
		"-serial", "stdio", "-monitor", "none"}
	switch opt.Accel {
	case "kvm":
		args = append(args, "-accel", "kvm", "-cpu", "host")
	case "tcg", "":
		args = append(args, "-accel", "tcg", "-cpu", "max")
	default:
		return nil, "", fmt.Errorf("unknown accelerator %q (want kvm or tcg)", opt.Accel)
	}
	diskCopy := ""
	switch opt.Mode {
	case UEFI, ISO, UEFIPXE:
		code := firstExisting(OVMFCode)
		if code == "" {
			return nil, "", fmt.Errorf("OVMF firmware not found (%s): apt-get install ovmf", strings.Join(OVMFCode, ", "))
		}
		varsTemplate := OVMFVars[code]
		if opt.SecureBoot {
			code, varsTemplate = SecureBootCode, SecureBootVars
			for _, f := range []string{code, varsTemplate} {
				if _, err := os.Stat(f); err != nil {
					//lint:ignore ST1005 Secure Boot is a proper noun
					return nil, "", fmt.Errorf("Secure Boot firmware %s: %w (apt-get install ovmf)", f, err)
				}
			}
			// The secure variable store is only writable from SMM.
			args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
		}
		vars := filepath.Join(opt.WorkDir, "OVMF_VARS.fd")
		if err := fsutil.CopyFile(varsTemplate, vars, 0o644); err != nil {
			return nil, "", fmt.Errorf("private OVMF VARS copy: %w", err)
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+optValue(code),
			"-drive", "if=pflash,format=raw,unit=1,file="+optValue(vars))
		switch {
		case opt.Mode == UEFIPXE:
			if _, err := os.Stat(filepath.Join(opt.PXEDir, output.PXEScript)); err != nil {
				return nil, "", fmt.Errorf("no boot.ipxe in %s", opt.PXEDir)
			}
			return append(args, "-boot", "n",
				"-nic", "user,model=virtio-net-pci,tftp="+optValue(opt.PXEDir)+",bootfile=boot.ipxe"), "", nil
		case opt.Net:
			// romfile= (empty): no iPXE ROM, so OVMF offers no network boot
			// entry ahead of the disk.
			args = append(args, "-netdev", "user,id=net0", "-device", "virtio-net-pci,netdev=net0,romfile=")
		default:
			args = append(args, "-nic", "none")
		}
		if opt.Mode == ISO {
			if _, err := os.Stat(opt.ISO); err != nil {
				return nil, "", fmt.Errorf("ISO: %w", err)
			}
			// A CD-ROM with no disk beside it: what a node booted from
			// virtual media sees (its reports go to the console and report_url).
			args = append(args, "-drive", "if=none,id=cd,format=raw,media=cdrom,readonly=on,file="+optValue(opt.ISO),
				"-device", "ide-cd,drive=cd,bootindex=0")
			break
		}
		diskCopy = filepath.Join(opt.WorkDir, output.DiskFile)
		if err := fsutil.CopyFile(opt.Disk, diskCopy, 0o644); err != nil {
			return nil, "", fmt.Errorf("disk copy: %w", err)
		}
		args = append(args, "-drive", "if=virtio,format=raw,file="+optValue(diskCopy))
	case PXE:
		if _, err := os.Stat(filepath.Join(opt.PXEDir, output.PXEScript)); err != nil {
			return nil, "", fmt.Errorf("no boot.ipxe in %s", opt.PXEDir)
		}
		// SeaBIOS runs the iPXE option ROM of the virtio NIC; slirp's DHCP names
		// boot.ipxe and its TFTP serves the bundle.
		args = append(args, "-boot", "n",
			"-nic", "user,model=virtio-net-pci,tftp="+optValue(opt.PXEDir)+",bootfile=boot.ipxe")
	default:
		return nil, "", fmt.Errorf("unknown boot mode %q (want uefi, iso, pxe or uefi-pxe)", opt.Mode)
	}
	return args, diskCopy, nil
}

// optValue writes a path into a QEMU option list (-drive file=…, -nic tftp=…), where
// commas separate options: a comma in the path is written twice, or QEMU would cut
// the path there (a test's temp dir named after a subtest "b, network down" did).
func optValue(path string) string { return strings.ReplaceAll(path, ",", ",,") }

func kvmUsable() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func firstExisting(paths []string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// IsRefusal says whether a console line is OVMF's boot manager refusing an
// image: with Secure Boot, an unsigned or altered image fails to load with
// EFI_SECURITY_VIOLATION, which OVMF prints as "Access Denied".
func IsRefusal(line string) bool {
	return strings.Contains(line, "failed to load") && strings.Contains(line, "Access Denied")
}
