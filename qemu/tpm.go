package qemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// SWTPM is the TPM 2.0 emulator (Debian's swtpm package) behind Options.TPM.
const SWTPM = "swtpm"

// tpmSocketWait bounds the wait for swtpm's control socket: it appears within
// milliseconds, but a loaded machine can be slow to run anything.
const tpmSocketWait = 10 * time.Second

// swtpm is one running emulator, owned by one boot.
type swtpm struct {
	cmd     *exec.Cmd
	sockDir string
	Socket  string // the control socket QEMU's chardev connects to
	Log     string
	done    chan error
}

// startTPM starts swtpm as the VM's TPM 2.0 and waits for its control socket.
// The state lives in stateDir, so a state dir that is kept is the same TPM
// (same endorsement seed, so the same EK and AK) at every boot. No
// --flags startup-clear: the firmware sends TPM2_Startup itself, as on a
// real machine, and measures into the freshly started PCRs.
func startTPM(ctx context.Context, stateDir, logDir string) (*swtpm, error) {
	path, err := exec.LookPath(SWTPM)
	if err != nil {
		return nil, fmt.Errorf("--tpm needs swtpm: %w (apt-get install swtpm swtpm-tools)", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("TPM state directory: %w", err)
	}
	// A unix socket path is at most 107 bytes; a work dir under a test's temp
	// dir can be longer, so the socket gets a short directory of its own.
	sockDir, err := os.MkdirTemp("", "swtpm-")
	if err != nil {
		return nil, err
	}
	t := &swtpm{sockDir: sockDir, Socket: filepath.Join(sockDir, "ctrl.sock"), Log: filepath.Join(logDir, "swtpm.log"), done: make(chan error, 1)}
	// Not CommandContext: stop ends it, after QEMU, so QEMU never loses its
	// TPM mid-boot. --terminate: it also exits when QEMU's connection drops
	// (QEMU killed), so not even a crash of this process leaks it for long.
	t.cmd = exec.Command(path, "socket", "--tpm2",
		"--tpmstate", "dir="+stateDir,
		"--ctrl", "type=unixio,path="+t.Socket,
		"--log", "file="+t.Log+",level=1",
		"--terminate")
	if err := t.cmd.Start(); err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("starting swtpm: %w", err)
	}
	go func() { t.done <- t.cmd.Wait() }()
	deadline := time.Now().Add(tpmSocketWait)
	for {
		// The file exists from bind(), before listen(): QEMU's connect in
		// between would be refused, so wait until a dial connects.
		if c, err := net.Dial("unix", t.Socket); err == nil {
			c.Close()
			return t, nil
		}
		select {
		case err := <-t.done:
			t.done <- err
			t.Stop()
			return nil, fmt.Errorf("swtpm exited before opening %s: %v%s", t.Socket, err, t.logTail())
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Stop()
			return nil, fmt.Errorf("swtpm did not open %s within %s%s", t.Socket, tpmSocketWait, t.logTail())
		}
	}
}

// qemuArgs attach the emulator as a CRB TPM: q35's OVMF finds it through the
// ACPI TPM2 table, and the kernel's tpm_crb driver binds it (TIS would work
// too; CRB is what current server firmware TPMs expose).
func (t *swtpm) qemuArgs() []string {
	return []string{"-chardev", "socket,id=chrtpm,path=" + t.Socket,
		"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
		"-device", "tpm-crb,tpmdev=tpm0"}
}

// Stop ends swtpm if it still runs (QEMU's exit normally ends it) and removes
// its socket directory. It waits for the process, so none is left behind.
func (t *swtpm) Stop() {
	select {
	case err := <-t.done:
		t.done <- err
	case <-time.After(2 * time.Second):
		t.cmd.Process.Kill()
		t.done <- <-t.done
	}
	os.RemoveAll(t.sockDir)
}

// Exited reports whether the process has been waited for (tests: nothing leaks).
func (t *swtpm) Exited() bool {
	return t.cmd.ProcessState != nil
}

func (t *swtpm) logTail() string {
	b, err := os.ReadFile(t.Log)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return " (swtpm log: " + strings.Join(tail(lines, 3), " | ") + ")"
}

// SWTPMSetup is swtpm's manufacturing tool (Debian's swtpm-tools).
const SWTPMSetup = "swtpm_setup"

// manufactureTPM gives a new state directory EK certificates in NV, as a TPM
// vendor does: swtpm_setup creates the EKs, has swtpm_localca sign their
// certificates, and locks the NV. A directory already holding a TPM
// (tpm2-00.permall) is left alone: its EK stays.
func manufactureTPM(ctx context.Context, stateDir string) error {
	if _, err := os.Stat(filepath.Join(stateDir, "tpm2-00.permall")); err == nil {
		return nil
	}
	path, err := exec.LookPath(SWTPMSetup)
	if err != nil {
		return fmt.Errorf("an EK certificate needs swtpm_setup: %w (apt-get install swtpm-tools)", err)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("TPM state directory: %w", err)
	}
	out, err := exec.CommandContext(ctx, path, "--tpm2", "--tpmstate", stateDir,
		"--create-ek-cert", "--create-platform-cert", "--lock-nvram").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("swtpm_setup in %s: %w (%s)", stateDir, err, strings.Join(tail(lines, 3), " | "))
	}
	return nil
}
