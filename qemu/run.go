package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/selftest"
)

// RunOptions are one `peerboot run`: which build output boots, how, and where
// its console and summary go. Run checks them (Validate), boots, and decodes
// the node's self-test report from the console.
type RunOptions struct {
	Mode Mode
	// OutDir is the build output (disk.img, peerboot.iso, pxe/); "" when EFI or
	// PXEDir stands for it.
	OutDir string
	// EFI boots this UKI from a temporary GPT disk instead of OutDir's disk.img.
	EFI string
	// PXEDir is the TFTP directory holding boot.ipxe (default OutDir/pxe).
	PXEDir                     string
	SecureBoot, TPM, TPMEKCert bool
	TPMStateDir                string
	Net                        bool
	Accel                      string // "kvm", "tcg" or "" (auto)
	Timeout                    time.Duration
	// LogFile is the console log (default OutDir/console-MODE.log, or beside EFI,
	// or in PXEDir when there is no OutDir).
	LogFile string
	// Verbose, if set, also gets every console byte.
	Verbose io.Writer
	// ReportFile, if set, receives the decoded report JSON.
	ReportFile string
	// KVMHint is Options.KVMHint.
	KVMHint string
	// Out gets the verdict's summary, or why there is none.
	Out io.Writer
	// Reply is Options.Reply: what to type on the serial console after a line.
	Reply func(line string) string
}

// Run's outcomes other than a pass, for the caller's exit codes.
var (
	// ErrOptions: the options contradict each other or name nothing to boot.
	ErrOptions = errors.New("bad run options")
	// ErrRefused: the firmware refused the image under Secure Boot.
	ErrRefused = errors.New("refused by the firmware")
	// ErrNoReport: the guest said no verdict (powered off, or the timeout).
	ErrNoReport = errors.New("no self-test report")
	// ErrVerdict: the report's verdict is not pass.
	ErrVerdict = errors.New("self-test verdict not pass")
)

// outcome is an error of one of the kinds above, worded for the user alone.
type outcome struct {
	kind error
	msg  string
}

func (e *outcome) Error() string        { return e.msg }
func (e *outcome) Is(target error) bool { return target == e.kind }

func fail(kind error, format string, a ...any) error {
	return &outcome{kind: kind, msg: fmt.Sprintf(format, a...)}
}

// Validate refuses options no boot can honour, before anything is started.
func (o *RunOptions) Validate() error {
	bad := func(format string, a ...any) error { return fail(ErrOptions, format, a...) }
	pxe := o.Mode == PXE || o.Mode == UEFIPXE
	switch {
	case pxe && (o.SecureBoot || o.EFI != ""):
		return bad("--secure-boot and --efi boot a disk, not --pxe or --uefi-pxe")
	case o.Mode == PXE && o.TPM:
		return bad("--tpm needs UEFI (OVMF measures the boot): use --uefi-pxe, not --pxe")
	case (o.TPMStateDir != "" || o.TPMEKCert) && !o.TPM:
		return bad("--tpm-state and --tpm-ek-cert need --tpm")
	case o.PXEDir != "" && !pxe:
		return bad("--pxe-dir needs --pxe or --uefi-pxe")
	case o.Mode == ISO && o.EFI != "":
		return bad("--efi boots a UKI from a disk, not --iso")
	case o.Accel != "" && o.Accel != "kvm" && o.Accel != "tcg":
		return bad("--accel: want kvm or tcg, got %q", o.Accel)
	case o.OutDir == "" && o.EFI == "" && o.PXEDir == "":
		return bad("run: want OUTDIR (or --efi FILE, or --pxe-dir DIR)")
	}
	return nil
}

// RunResult is what a run saw: the report (nil without one) and the boot.
type RunResult struct {
	Report  *selftest.Report
	Boot    *Result
	LogFile string
}

// Run boots the output as o says and waits for the node's self-test report.
// The error wraps ErrOptions, ErrRefused, ErrNoReport or ErrVerdict for
// those outcomes; any other error is the host's (QEMU, files).
func Run(ctx context.Context, o RunOptions) (*RunResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	pxeDir := o.PXEDir
	if pxeDir == "" {
		pxeDir = filepath.Join(o.OutDir, output.PXEDir)
	}
	if err := o.bootFilePresent(pxeDir); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "peerboot-run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	disk := filepath.Join(o.OutDir, output.DiskFile)
	if o.EFI != "" {
		disk = filepath.Join(work, "efi-disk.img")
		if err := diskAround(o.EFI, disk); err != nil {
			return nil, fail(ErrOptions, "%s", err)
		}
	}
	logFile := o.LogFile
	if logFile == "" {
		logFile = defaultLogFile(o.OutDir, o.EFI, pxeDir, o.Mode)
	}
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	var console io.Writer = logf
	if o.Verbose != nil {
		console = io.MultiWriter(logf, o.Verbose)
	}
	res := &RunResult{LogFile: logFile}
	boot, err := Boot(ctx, Options{
		Mode: o.Mode, Disk: disk, PXEDir: pxeDir, ISO: filepath.Join(o.OutDir, output.ISOFile), SecureBoot: o.SecureBoot,
		TPM: o.TPM, TPMStateDir: o.TPMStateDir, TPMEKCert: o.TPMEKCert, Net: o.Net,
		Timeout: o.Timeout, WorkDir: work, Console: console, Accel: o.Accel,
		KVMHint: o.KVMHint,
		Reply:   o.Reply,
		Stop: func(line string) bool {
			if r := reportIn(line); r != nil {
				res.Report = r
			}
			return false // let the guest finish its on_pass/on_fail action
		},
		Succeeded: func() bool { return res.Report != nil },
	})
	if err != nil {
		return nil, err
	}
	res.Boot = boot
	return res, o.verdict(res)
}

// bootFilePresent refuses a directory that lacks what the mode boots (not a
// build output, or one whose recipe's outputs.formats leaves that file out): the
// user's mistake, said before QEMU starts and before a console log is written
// into the directory.
func (o *RunOptions) bootFilePresent(pxeDir string) error {
	if o.EFI != "" {
		return nil
	}
	dir, name := o.OutDir, output.DiskFile
	switch {
	case (o.Mode == PXE || o.Mode == UEFIPXE) && o.PXEDir != "":
		if _, err := os.Stat(filepath.Join(pxeDir, output.PXEScript)); err != nil {
			return fail(ErrOptions, "--pxe-dir %s: no %s", pxeDir, output.PXEScript)
		}
		return nil
	case o.Mode == PXE || o.Mode == UEFIPXE:
		name = output.PXEDir + "/" + output.PXEScript
	case o.Mode == ISO:
		name = output.ISOFile
	}
	if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
		return fail(ErrOptions, "%s: no %s: not a build output (peerboot build writes out/RECIPE; outputs.formats names what it holds)", dir, name)
	}
	return nil
}

// reportIn decodes a console line carrying the report, or gives nil.
func reportIn(line string) *selftest.Report {
	if !strings.Contains(line, selftest.Marker) {
		return nil
	}
	r, err := selftest.DecodeLine(line)
	if err != nil {
		return nil
	}
	return r
}

func defaultLogFile(dir, efi, pxeDir string, mode Mode) string {
	name := "console-" + string(mode) + ".log"
	switch {
	case dir == "" && efi != "":
		return efi + "." + name
	case dir == "":
		return filepath.Join(pxeDir, name)
	}
	return filepath.Join(dir, name)
}

// verdict writes the run's summary to o.Out and says how it ended.
func (o *RunOptions) verdict(res *RunResult) error {
	boot, out := res.Boot, o.Out
	if boot.Refused != "" {
		what := output.DiskFile
		if o.Mode == ISO {
			what = output.ISOFile
		}
		if o.EFI != "" {
			what = o.EFI
		}
		fmt.Fprintf(out, "FAIL: the firmware refused to boot %s with Secure Boot enforced (unsigned, altered, or signed with a key not in db):\n  %s\nfull console: %s\n", what, strings.TrimSpace(boot.Refused), res.LogFile)
		return fail(ErrRefused, "%s: Secure Boot refused the image: %s", what, strings.TrimSpace(boot.Refused))
	}
	if res.Report == nil {
		last := boot.Lines
		if len(last) > 20 {
			last = last[len(last)-20:]
		}
		why := "the guest powered off without a report"
		if boot.TimedOut {
			why = fmt.Sprintf("no report within %s", o.Timeout)
		}
		fmt.Fprintf(out, "FAIL: %s (%s boot). Last console lines:\n  %s\nfull console: %s\n", why, o.Mode, strings.Join(last, "\n  "), res.LogFile)
		return fail(ErrNoReport, "%s", why)
	}
	if o.ReportFile != "" {
		b, err := selftest.Encode(res.Report)
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.ReportFile, b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprint(out, selftest.Summary(res.Report))
	fmt.Fprintf(out, "%s boot (%s): %s from power-on to shutdown; console: %s\n", o.Mode, boot.Accel, boot.Duration.Round(100*time.Millisecond), res.LogFile)
	if res.Report.Verdict != selftest.Pass {
		return fail(ErrVerdict, "self-test verdict: %s", res.Report.Verdict)
	}
	return nil
}

// diskAround writes a temporary GPT disk whose ESP holds uki as
// /EFI/BOOT/BOOTX64.EFI, with the image stage's layout.
func diskAround(uki, disk string) error {
	b, err := os.ReadFile(uki)
	if err != nil {
		return fmt.Errorf("--efi: %w", err)
	}
	// Anything else boots to the firmware's shell and waits out the timeout.
	if !bytes.HasPrefix(b, []byte("MZ")) {
		return fmt.Errorf("--efi %s: not an EFI executable (no MZ header): want a UKI such as out/default/peerboot.efi", uki)
	}
	d, err := image.StandardDisk("peerboot run --efi", image.MinDiskSize(int64(len(b))), 0, b)
	if err != nil {
		return fmt.Errorf("%s: %w", disk, err)
	}
	f, err := os.Create(disk)
	if err != nil {
		return err
	}
	if err := image.WriteDisk(f, d); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", disk, err)
	}
	return f.Close()
}
