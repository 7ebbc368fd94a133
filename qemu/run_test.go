package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

func TestRunValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		o    RunOptions
		want string // "" valid
	}{
		{"disk", RunOptions{Mode: UEFI, OutDir: "out/default"}, ""},
		{"efi alone", RunOptions{Mode: UEFI, EFI: "x.efi"}, ""},
		{"pxe dir alone", RunOptions{Mode: UEFIPXE, PXEDir: "pxe"}, ""},
		{"tpm under uefi-pxe", RunOptions{Mode: UEFIPXE, OutDir: "o", TPM: true}, ""},
		{"secure boot over pxe", RunOptions{Mode: PXE, OutDir: "o", SecureBoot: true}, "--secure-boot and --efi boot a disk, not --pxe or --uefi-pxe"},
		{"efi over uefi-pxe", RunOptions{Mode: UEFIPXE, OutDir: "o", EFI: "x"}, "--secure-boot and --efi boot a disk, not --pxe or --uefi-pxe"},
		{"tpm over bios pxe", RunOptions{Mode: PXE, OutDir: "o", TPM: true}, "--tpm needs UEFI"},
		{"tpm state without tpm", RunOptions{Mode: UEFI, OutDir: "o", TPMStateDir: "s"}, "--tpm-state and --tpm-ek-cert need --tpm"},
		{"ek cert without tpm", RunOptions{Mode: UEFI, OutDir: "o", TPMEKCert: true}, "--tpm-state and --tpm-ek-cert need --tpm"},
		{"pxe dir on a disk boot", RunOptions{Mode: UEFI, OutDir: "o", PXEDir: "p"}, "--pxe-dir needs --pxe or --uefi-pxe"},
		{"efi on an iso", RunOptions{Mode: ISO, EFI: "x"}, "--efi boots a UKI from a disk, not --iso"},
		{"accel", RunOptions{Mode: UEFI, OutDir: "o", Accel: "hvf"}, `--accel: want kvm or tcg, got "hvf"`},
		{"nothing to boot", RunOptions{Mode: UEFI}, "run: want OUTDIR (or --efi FILE, or --pxe-dir DIR)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.o.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.Is(err, ErrOptions) {
				t.Fatalf("got %v, want ErrOptions %q", err, c.want)
			}
		})
	}
}

// Run refuses bad options and a missing --efi file before QEMU is started.
func TestRunRefusesBeforeBooting(t *testing.T) {
	_, err := Run(context.Background(), RunOptions{Mode: UEFI, EFI: filepath.Join(t.TempDir(), "absent.efi")})
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "--efi: open ") {
		t.Fatalf("missing UKI: %v, want ErrOptions naming --efi", err)
	}
	if _, err := Run(context.Background(), RunOptions{Mode: PXE}); !errors.Is(err, ErrOptions) {
		t.Fatalf("nothing to boot: %v", err)
	}
	// A file that is no EFI executable would boot to the firmware's shell and wait
	// out --timeout (3 minutes) before calling it a fail.
	junk := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(junk, []byte("hello\n"), 0o644)
	_, err = Run(context.Background(), RunOptions{Mode: UEFI, EFI: junk, Timeout: time.Second})
	if !errors.Is(err, ErrOptions) || err.Error() != "--efi "+junk+": not an EFI executable (no MZ header): want a UKI such as out/default/peerboot.efi" {
		t.Fatalf("junk UKI: %v, want ErrOptions saying it is no EFI executable", err)
	}
	if _, err := os.Stat(junk + ".console-uefi.log"); err == nil {
		t.Error("a console log was left beside the refused --efi file")
	}
}

// A directory that lacks what the mode boots (not a build output, or one built
// without that format) is the user's mistake: ErrOptions naming the file, before
// QEMU is started and before a console log is left in the directory.
func TestRunRefusesMissingBootFile(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		want string
	}{
		{UEFI, "no disk.img"},
		{ISO, "no peerboot.iso"},
		{PXE, "no pxe/boot.ipxe"},
		{UEFIPXE, "no pxe/boot.ipxe"},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			dir := t.TempDir()
			_, err := Run(context.Background(), RunOptions{Mode: c.mode, OutDir: dir, Timeout: time.Second})
			if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), dir+": "+c.want+": not a build output") {
				t.Errorf("got %v, want ErrOptions %q", err, dir+": "+c.want+": not a build output")
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left in %s: %v", dir, left)
			}
		})
	}
}

func TestDefaultLogFile(t *testing.T) {
	for _, c := range []struct {
		dir, efi, pxe string
		mode          Mode
		want          string
	}{
		{"out/d", "", "out/d/pxe", UEFI, "out/d/console-uefi.log"},
		{"out/d", "x.efi", "out/d/pxe", UEFI, "out/d/console-uefi.log"},
		{"", "k/x.efi", "pxe", UEFI, "k/x.efi.console-uefi.log"},
		{"", "", "tftp", UEFIPXE, "tftp/console-uefi-pxe.log"},
	} {
		if got := defaultLogFile(c.dir, c.efi, c.pxe, c.mode); got != c.want {
			t.Errorf("%+v: %s, want %s", c, got, c.want)
		}
	}
}

// The verdict of each way a boot can end: its summary on Out, and its kind.
func TestRunVerdict(t *testing.T) {
	pass := &selftest.Report{Schema: selftest.Schema, Verdict: selftest.Pass}
	failed := &selftest.Report{Schema: selftest.Schema, Verdict: selftest.Fail}
	line, err := selftest.EncodeLine(failed)
	if err != nil {
		t.Fatal(err)
	}
	if r := reportIn("[   3.1] " + line); r == nil || r.Verdict != selftest.Fail {
		t.Fatalf("reportIn did not decode its own line: %v", r)
	}
	if r := reportIn("PEERBOOT-REPORT not-base64"); r != nil {
		t.Fatalf("a garbled line decoded: %v", r)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		o      RunOptions
		res    RunResult
		kind   error
		errMsg string
		out    string
	}{
		{"pass", RunOptions{Mode: UEFI, ReportFile: filepath.Join(dir, "r.json")},
			RunResult{Report: pass, Boot: &Result{Accel: "kvm", Duration: 1234 * time.Millisecond}, LogFile: "c.log"},
			nil, "", "uefi boot (kvm): 1.2s from power-on to shutdown; console: c.log\n"},
		{"fail verdict", RunOptions{Mode: PXE},
			RunResult{Report: failed, Boot: &Result{Accel: "tcg"}, LogFile: "c.log"},
			ErrVerdict, "self-test verdict: fail", "pxe boot (tcg)"},
		{"powered off", RunOptions{Mode: UEFI},
			RunResult{Boot: &Result{Lines: []string{"a", "b"}}, LogFile: "c.log"},
			ErrNoReport, "the guest powered off without a report", "FAIL: the guest powered off without a report (uefi boot). Last console lines:\n  a\n  b\nfull console: c.log\n"},
		{"timeout", RunOptions{Mode: ISO, Timeout: time.Minute},
			RunResult{Boot: &Result{TimedOut: true}, LogFile: "c.log"},
			ErrNoReport, "no report within 1m0s", "FAIL: no report within 1m0s (iso boot)"},
		{"refused", RunOptions{Mode: ISO, SecureBoot: true},
			RunResult{Boot: &Result{Refused: "BdsDxe: failed to load Boot0001: Access Denied\n"}, LogFile: "c.log"},
			ErrRefused, "peerboot.iso: Secure Boot refused the image: BdsDxe: failed to load Boot0001: Access Denied", "FAIL: the firmware refused to boot peerboot.iso"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			c.o.Out = &out
			err := c.o.verdict(&c.res)
			if c.kind == nil {
				if err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, c.kind) || err.Error() != c.errMsg {
				t.Fatalf("got %v, want %v %q", err, c.kind, c.errMsg)
			}
			if !strings.Contains(out.String(), c.out) {
				t.Errorf("summary %q lacks %q", out.String(), c.out)
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	var got selftest.Report
	if err != nil || json.Unmarshal(b, &got) != nil || got.Verdict != selftest.Pass {
		t.Fatalf("--report file: %v %s", err, b)
	}
}
