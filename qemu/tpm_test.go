package qemu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

func needSWTPM(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(SWTPM); err != nil {
		testguard.Skip(t, "swtpm not installed (apt-get install swtpm swtpm-tools)")
	}
}

// processesWith lists the pids whose command line contains s: a leaked swtpm
// of a test shows up by its state directory.
func processesWith(s string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// swtpm starts, opens its control socket, and Stop leaves neither the process
// nor the socket behind; the state directory keeps the TPM's state.
func TestSWTPMStartStop(t *testing.T) {
	needSWTPM(t)
	state := filepath.Join(t.TempDir(), "state")
	tpm, err := startTPM(context.Background(), state, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tpm.Socket); err != nil {
		t.Fatalf("control socket: %v", err)
	}
	if len(processesWith("dir="+state)) != 1 {
		t.Fatalf("want one swtpm for %s, got pids %v", state, processesWith("dir="+state))
	}
	line := strings.Join(tpm.qemuArgs(), " ")
	for _, want := range []string{"socket,id=chrtpm,path=" + tpm.Socket, "emulator,id=tpm0,chardev=chrtpm", "tpm-crb,tpmdev=tpm0"} {
		if !strings.Contains(line, want) {
			t.Errorf("QEMU TPM args lack %q: %s", want, line)
		}
	}
	tpm.Stop()
	if !tpm.Exited() {
		t.Error("Stop returned with swtpm not waited for")
	}
	if pids := processesWith("dir=" + state); len(pids) > 0 {
		t.Errorf("swtpm still running after Stop: pids %v", pids)
	}
	if _, err := os.Stat(tpm.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

// A boot that ends by its timeout (here: a disk with nothing to boot) stops
// its swtpm too.
func TestTPMBootTimeoutStopsSWTPM(t *testing.T) {
	needSWTPM(t)
	if firstExisting(OVMFCode) == "" {
		testguard.Skip(t, "OVMF not installed (apt-get install ovmf)")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testguard.Skip(t, "qemu-system-x86_64 not installed")
	}
	work := t.TempDir()
	disk := filepath.Join(work, "empty.img")
	if err := os.WriteFile(disk, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "node-tpm")
	seen := make(chan []string, 1)
	go func() {
		for range 100 {
			if p := processesWith("dir=" + state); len(p) > 0 {
				seen <- p
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		seen <- nil
	}()
	res, err := Boot(context.Background(), Options{Mode: UEFI, Disk: disk, WorkDir: work, Accel: "tcg",
		Timeout: 8 * time.Second, TPM: true, TPMStateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut {
		t.Fatalf("the boot of an empty disk ended before its timeout: %v", tail(res.Lines, 5))
	}
	if p := <-seen; len(p) != 1 {
		t.Errorf("while QEMU ran: want one swtpm on %s, got %v", state, p)
	}
	if _, err := os.Stat(filepath.Join(state, "tpm2-00.permall")); err != nil {
		t.Errorf("the TPM kept no state for the next boot: %v", err)
	}
	if pids := processesWith("dir=" + state); len(pids) > 0 {
		t.Errorf("swtpm still running after the boot timed out: pids %v", pids)
	}
}

// TPMEKCert manufactures a TPM once: a new state gets swtpm_setup's EK
// certificates, an existing one is left as it is (its EK stays the node's).
func TestManufactureTPM(t *testing.T) {
	if _, err := exec.LookPath(SWTPMSetup); err != nil {
		testguard.Skip(t, "swtpm_setup not installed (apt-get install swtpm-tools)")
	}
	state := filepath.Join(t.TempDir(), "tpm")
	if err := manufactureTPM(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(state, "tpm2-00.permall"))
	if err != nil {
		t.Fatalf("no TPM state after swtpm_setup: %v", err)
	}
	before, _ := os.ReadFile(filepath.Join(state, "tpm2-00.permall"))
	if err := manufactureTPM(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	fi2, _ := os.Stat(filepath.Join(state, "tpm2-00.permall"))
	after, _ := os.ReadFile(filepath.Join(state, "tpm2-00.permall"))
	if !fi2.ModTime().Equal(fi.ModTime()) || string(before) != string(after) {
		t.Error("an existing TPM state was manufactured again (its EK would change)")
	}
}
