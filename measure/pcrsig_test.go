package measure_test

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/measure"
)

// signedUKI builds a UKI the way the image stage does with sign.pcr_key:
// .pcrpkey in, predict, sign, then .pcrsig added.
func signedUKI(t *testing.T, stub []byte, key *rsa.PrivateKey, edit func(*image.UKI)) []byte {
	t.Helper()
	pkey, err := measure.PublicKeyPEM(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	u := testUKI(t, stub, pkey)
	if edit != nil {
		edit(&u)
	}
	p, err := measure.Predict(writeUKI(t, u))
	if err != nil {
		t.Fatal(err)
	}
	if u.PCRSig, err = measure.Sign(p, key); err != nil {
		t.Fatal(err)
	}
	return writeUKI(t, u)
}

func TestSignDeterministicAndChecks(t *testing.T) {
	key := testKey(t)
	a := signedUKI(t, synthStub(t), key, nil)
	b := signedUKI(t, synthStub(t), key, nil)
	if !bytes.Equal(a, b) {
		t.Fatal("the same inputs and key gave two different signed UKIs")
	}
	res, err := measure.Check(a)
	if err != nil {
		t.Fatalf("Check of a freshly signed UKI: %v", err)
	}
	if !res.Signed || strings.Join(res.Phases, ",") != strings.Join(measure.DefaultPhases, ",") {
		t.Errorf("Check: %+v", res)
	}
	unsigned := writeUKI(t, testUKI(t, synthStub(t), nil))
	if res, err := measure.Check(unsigned); err != nil || res.Signed {
		t.Errorf("Check of an unsigned UKI: %+v, %v", res, err)
	}
}

// sectionRange is where a section's file data lies.
func sectionRange(t *testing.T, uki []byte, name string) (int, int) {
	t.Helper()
	img, err := measure.ParsePE(uki)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := img.Lookup(name)
	if !ok {
		t.Fatalf("no %s", name)
	}
	return int(s.PointerToRaw), int(s.PointerToRaw + min(s.VirtualSize, s.SizeOfRawData))
}

func TestCheckTampered(t *testing.T) {
	key, other := testKey(t), testKey(t)
	good := signedUKI(t, synthStub(t), key, nil)
	otherPEM, _ := measure.PublicKeyPEM(&other.PublicKey)
	tests := []struct {
		name   string
		tamper func(b []byte) []byte
		want   string
	}{
		{"one .cmdline byte", func(b []byte) []byte {
			s, _ := sectionRange(t, b, ".cmdline")
			b[s+8] ^= 0x01 // "console=ttyS0" -> "console<ttyS0"
			return b
		}, "matches no PCR 11 value predicted"},
		{"one .initrd byte", func(b []byte) []byte {
			s, e := sectionRange(t, b, ".initrd")
			b[(s+e)/2] ^= 0x80
			return b
		}, "matches no PCR 11 value predicted"},
		{"a signature byte", func(b []byte) []byte {
			s, e := sectionRange(t, b, ".pcrsig")
			i := bytes.Index(b[s:e], []byte(`"sig":"`)) + s + 10
			b[i] = map[bool]byte{true: 'B', false: 'A'}[b[i] == 'A']
			return b
		}, "signature does not verify"},
		{"another key in .pcrpkey", func(b []byte) []byte {
			s, e := sectionRange(t, b, ".pcrpkey")
			if len(otherPEM) != e-s {
				t.Fatalf("test keys' PEM differ in length (%d, %d)", len(otherPEM), e-s)
			}
			copy(b[s:e], otherPEM)
			return b
		}, "but .pcrpkey is"},
		{"not JSON", func(b []byte) []byte {
			s, _ := sectionRange(t, b, ".pcrsig")
			b[s] = '['
			return b
		}, ".pcrsig: not JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := measure.Check(tc.tamper(append([]byte(nil), good...)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// .pcrsig without .pcrpkey.
	p, _ := measure.Predict(writeUKI(t, testUKI(t, synthStub(t), nil)))
	sig, _ := measure.Sign(p, key)
	u := testUKI(t, synthStub(t), nil)
	u.PCRSig = sig
	if _, err := measure.Check(writeUKI(t, u)); err == nil || !strings.Contains(err.Error(), "no .pcrpkey") {
		t.Errorf("Check without .pcrpkey: %v", err)
	}
}

// startSwtpm runs swtpm as a TPM 2.0 on a unix socket (and its control socket
// beside it, where libtss2's swtpm TCTI looks) until the test ends.
func startSwtpm(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("swtpm")
	if err != nil {
		testguard.Skip(t, "swtpm not found (Debian package swtpm)")
	}
	for _, lib := range []string{"libtss2-esys.so.0", "libtss2-rc.so.0", "libtss2-mu.so.0", "libtss2-tcti-swtpm.so.0"} {
		if m, _ := filepath.Glob("/usr/lib/*/" + lib); len(m) == 0 {
			testguard.Skipf(t, "%s not found: systemd-measure sign needs it (Debian packages libtss2-esys-3.0.2-0, libtss2-rc0, libtss2-mu0, libtss2-tcti-swtpm0)", lib)
		}
	}
	dir, err := os.MkdirTemp("", "pb-swtpm-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tpm")
	cmd := exec.Command(bin, "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--server", "type=unixio,path="+sock, "--ctrl", "type=unixio,path="+sock+".ctrl", "--flags", "startup-clear")
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock + ".ctrl"); err == nil {
			if _, err := os.Stat(sock); err == nil {
				return sock
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("swtpm did not open %s: %s", sock, logb.String())
	return ""
}

// TestSignMatchesSystemdMeasure: `systemd-measure sign` over the same section
// bytes and key (its policy digests from a TPM trial session, here swtpm's)
// prints exactly the .pcrsig Sign writes.
func TestSignMatchesSystemdMeasure(t *testing.T) {
	tool := systemdMeasure(t)
	sock := startSwtpm(t)
	key := testKey(t)
	uki := signedUKI(t, synthStub(t), key, nil)
	secs := handSections(t, uki)
	dir := t.TempDir()
	der, _ := x509.MarshalPKCS8PrivateKey(key)
	keyFile := filepath.Join(dir, "pcr.key")
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	pubFile := filepath.Join(dir, "pcr.pub")
	os.WriteFile(pubFile, bytes.TrimRight(secs[".pcrpkey"], "\x00"), 0o644)
	args := append([]string{"sign", "--bank=sha256", "--json=short", "--private-key=" + keyFile, "--public-key=" + pubFile, "--tpm2-device=swtpm:path=" + sock}, sectionFiles(t, secs)...)
	cmd := exec.Command(tool, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("systemd-measure sign: %v: %s", err, stderr.String())
	}
	if got := bytes.TrimRight(secs[".pcrsig"], "\x00"); !bytes.Equal(got, out) {
		t.Errorf(".pcrsig differs from systemd-measure sign:\n ours:    %s\n systemd: %s", got, out)
	}
}
