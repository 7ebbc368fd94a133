// Package swtpmtest starts swtpm (Debian's software TPM 2.0) for tests and
// makes genuine TPM2 quotes with it over go-tpm's unix-socket transport, by
// the node's own code (node/tpmquote). It is a test helper.
package swtpmtest

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/node/tpmquote"
)

// TPM is one running swtpm with a state directory of its own.
type TPM struct {
	T   transport.TPMCloser
	Dir string
	tb  testing.TB
	bin string
	cmd *exec.Cmd
}

// Start runs swtpm for tb and stops it at cleanup. No swtpm is a skip away
// from CI and a failure under CI (make test-deps installs swtpm).
func Start(tb testing.TB) *TPM {
	tb.Helper()
	bin, err := exec.LookPath("swtpm")
	if err != nil {
		testguard.Skip(tb, "swtpm not installed (Debian package swtpm; make test-deps)")
		return nil
	}
	// Unix socket paths are short (108 bytes): a directory of our own under /tmp.
	dir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o700); err != nil {
		tb.Fatal(err)
	}
	tp := &TPM{Dir: dir, tb: tb, bin: bin}
	tb.Cleanup(tp.stop)
	tp.start()
	return tp
}

// Reboot power-cycles the TPM: swtpm stops and starts again on the same state,
// so the keys stay (the same seeds) and the PCRs start from zero, as at a boot.
func (tp *TPM) Reboot() {
	tp.tb.Helper()
	tp.stop()
	tp.start()
}

func (tp *TPM) stop() {
	if tp.T != nil {
		tp.T.Close()
		tp.T = nil
	}
	if tp.cmd != nil {
		tp.cmd.Process.Kill()
		tp.cmd.Wait()
		tp.cmd = nil
	}
}

func (tp *TPM) start() {
	tb := tp.tb
	tb.Helper()
	sock, ctrl := filepath.Join(tp.Dir, "tpm.sock"), filepath.Join(tp.Dir, "ctrl.sock")
	os.Remove(sock)
	os.Remove(ctrl)
	cmd := exec.Command(tp.bin, "socket", "--tpm2",
		"--server", "type=unixio,path="+sock,
		"--ctrl", "type=unixio,path="+ctrl,
		"--flags", "not-need-init,startup-clear",
		"--tpmstate", "dir="+filepath.Join(tp.Dir, "state"))
	logPath := filepath.Join(tp.Dir, "swtpm.log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting swtpm: %v", err)
	}
	tp.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Bound is not yet listening: a connection is the sign it serves.
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("swtpm made no socket in 10s: %s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t, err := linuxudstpm.Open(sock)
	if err != nil {
		tb.Fatalf("opening swtpm's socket: %v", err)
	}
	tp.T = t
}

// Extend extends PCR pcr of the sha256 bank by sha256(data), as the stub does
// with a section's bytes.
func (tp *TPM) Extend(pcr int, data []byte) error {
	d := sha256.Sum256(data)
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: d[:]}}},
	}.Execute(tp.T)
	if err != nil {
		return fmt.Errorf("extending PCR %d: %w", pcr, err)
	}
	return nil
}

// AKTemplate is the node's attestation key (tpmquote.AKTemplate); a copy, so
// a test may alter it to make a key the collector must refuse.
var AKTemplate = tpmquote.AKTemplate

// Quote makes the evidence a node would send with body, by the node's own
// code (tpmquote.QuoteWith): an EK and an AK (primaries under the endorsement
// hierarchy, so the same TPM gives the same keys), the PCR values, and a
// quote bound to nonce and body. akTemplate nil is AKTemplate.
func (tp *TPM) Quote(nonce string, body []byte, phase string, akTemplate *tpm2.TPMTPublic) (*attest.Evidence, error) {
	if akTemplate == nil {
		akTemplate = &AKTemplate
	}
	return tpmquote.QuoteWith(tp.T, *akTemplate, nonce, body, phase)
}
