package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/qemu"
	"github.com/peerboot/peerboot/store"
)

func runCmd(g *globals) *cobra.Command {
	var uefi, pxe, uefiPXE, iso, verbose, secureBoot, tpm, tpmEKCert, netOn bool
	var reportFile, logFile, accel, efiFile, tpmState, pxeDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run [--uefi|--iso|--pxe|--uefi-pxe] [--secure-boot] [--tpm] [--net] [--efi FILE] OUTDIR",
		Short: "Boot a build output in QEMU and return its self-test verdict",
		Long: `run boots OUTDIR (as written by peerboot build, e.g. out/default) in QEMU q35: --uefi
(the default) boots disk.img with OVMF, --iso boots peerboot.iso with OVMF as a
read-only CD-ROM and no disk (as a BMC's virtual media), --pxe boots pxe/ with iPXE
over user-mode networking and QEMU's TFTP. The serial console goes to a log file (and, with -v, the
terminal); the PEERBOOT-REPORT line is decoded, written to --report, summarised, and
the exit code is 0 only for a pass verdict (9 for fail; a timeout is a fail).

--secure-boot boots with UEFI Secure Boot enforced: OVMF_CODE_4M.secboot.fd with
Debian's OVMF_VARS_4M.snakeoil.fd (the snakeoil test key in PK, KEK and db; sign with
/usr/share/ovmf/PkKek-1-snakeoil.key, passphrase "snakeoil"). An image the firmware
refuses ("Access Denied") ends the run at once with exit 6 (integrity).
--efi FILE boots that UKI instead of OUTDIR's disk, from a temporary GPT disk built
around it; OUTDIR may then be left out (the console log goes beside FILE).

--uefi-pxe network-boots OVMF: it runs the virtio NIC's iPXE EFI ROM, whose DHCP
(QEMU's) names boot.ipxe from OUTDIR/pxe (or --pxe-dir DIR) over TFTP; the host is
10.0.2.2, so a boot.ipxe may chain "http://10.0.2.2:PORT/boot.ipxe?mac=${net0/mac}"
of a peerboot serve, or a UKI with "chain URL ARGS" (ARGS become the kernel command
line while Secure Boot is off). --net gives a --uefi or --iso boot the same
user-mode network (no NIC ROM, so the disk still boots).
--tpm gives the VM a TPM 2.0 (swtpm, on QEMU's tpm-crb): OVMF measures the boot
into it, systemd-stub extends PCR 11, and the init quotes PCRs 4, 7 and 11 for
its report. --tpm-state DIR keeps the TPM's state there, so the node keeps its
EK and AK from boot to boot (default: a fresh TPM per run). --tpm-ek-cert has
swtpm_setup manufacture a new state with EK certificates in NV (signed by
swtpm_localca's CA in /var/lib/swtpm-localca), so the node sends one.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := btoi(uefi) + btoi(pxe) + btoi(iso) + btoi(uefiPXE); n > 1 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("choose one of --uefi, --iso, --pxe and --uefi-pxe"))
			}
			opt := qemu.RunOptions{Mode: qemu.UEFI, EFI: efiFile, PXEDir: pxeDir,
				SecureBoot: secureBoot, TPM: tpm, TPMEKCert: tpmEKCert, TPMStateDir: tpmState, Net: netOn,
				Accel: accel, Timeout: timeout, LogFile: logFile, ReportFile: reportFile, Out: cmd.OutOrStdout()}
			switch {
			case pxe:
				opt.Mode = qemu.PXE
			case iso:
				opt.Mode = qemu.ISO
			case uefiPXE:
				opt.Mode = qemu.UEFIPXE
			}
			if len(args) == 1 {
				opt.OutDir = args[0]
			}
			if verbose {
				opt.Verbose = cmd.ErrOrStderr()
			}
			if err := opt.Validate(); err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			if opt.OutDir != "" {
				if err := outDirArg(opt.OutDir); err != nil {
					return err
				}
			}
			if err := runToolsPresent(!pxe, pxe || uefiPXE); err != nil {
				return err
			}
			st, err := g.openStore()
			if err != nil {
				return err
			}
			opt.KVMHint = st.HintPath(store.KVMFailsHint)
			_, err = qemu.Run(cmd.Context(), opt)
			return runExit(err)
		},
	}
	cmd.Flags().BoolVar(&uefi, "uefi", false, "boot disk.img with OVMF (default)")
	cmd.Flags().BoolVar(&pxe, "pxe", false, "boot pxe/ with iPXE over user-mode networking")
	cmd.Flags().BoolVar(&uefiPXE, "uefi-pxe", false, "network-boot OVMF through the NIC's iPXE EFI ROM (boot.ipxe from pxe/ or --pxe-dir)")
	cmd.Flags().StringVar(&pxeDir, "pxe-dir", "", "TFTP directory holding boot.ipxe for --pxe/--uefi-pxe (default OUTDIR/pxe)")
	cmd.Flags().BoolVar(&tpm, "tpm", false, "give the VM a TPM 2.0 (swtpm): measured boot and the init's quote")
	cmd.Flags().StringVar(&tpmState, "tpm-state", "", "keep the TPM's state in this directory (the same EK and AK at every boot)")
	cmd.Flags().BoolVar(&tpmEKCert, "tpm-ek-cert", false, "manufacture a new TPM with EK certificates in NV (swtpm_setup; CA in /var/lib/swtpm-localca)")
	cmd.Flags().BoolVar(&netOn, "net", false, "user-mode networking for --uefi/--iso (host 10.0.2.2)")
	cmd.Flags().BoolVar(&iso, "iso", false, "boot peerboot.iso with OVMF as a CD-ROM (BMC virtual media)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also stream the console to the terminal")
	cmd.Flags().StringVar(&reportFile, "report", "", "write the decoded report JSON here")
	cmd.Flags().StringVar(&logFile, "log", "", "console log file (default OUTDIR/console-MODE.log)")
	cmd.Flags().StringVar(&accel, "accel", "", "kvm or tcg (default: KVM when usable, falling back to TCG)")
	cmd.Flags().BoolVar(&secureBoot, "secure-boot", false, "enforce UEFI Secure Boot (OVMF with the snakeoil test key enrolled)")
	cmd.Flags().StringVar(&efiFile, "efi", "", "boot this UKI (from a temporary disk) instead of OUTDIR/disk.img")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "give up (a fail) after this long")
	return cmd
}

// runExit gives a run's outcome its exit code.
func runExit(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, qemu.ErrOptions):
		return exitcode.Tag(exitcode.Usage, err)
	case errors.Is(err, qemu.ErrRefused):
		return exitcode.Tag(exitcode.Integrity, err)
	case errors.Is(err, qemu.ErrNoReport), errors.Is(err, qemu.ErrVerdict):
		return exitcode.Tag(exitcode.Selftest, err)
	}
	return exitcode.Tag(exitcode.Internal, err)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runToolsPresent checks the host tools a boot needs before anything starts:
// QEMU, OVMF for a UEFI boot, the iPXE ROMs for a network boot. A missing one is
// exit 7 (host tools) with the package to install, as doctor --for run says.
func runToolsPresent(uefi, netboot bool) error {
	for _, n := range hostNeeds {
		if n.use != useRun {
			continue
		}
		needed := n.command == "qemu-system-x86_64" ||
			(uefi && n.pkg == "ovmf") || (netboot && n.pkg == "ipxe-qemu")
		if needed && !n.present() {
			return exitcode.Tag(exitcode.HostTools, fmt.Errorf("run needs %s (%s), which is missing: apt-get install %s (`peerboot doctor --for run` checks them all)", n.what, n.pkg, n.pkg))
		}
	}
	return nil
}
