package tpmquote_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"
	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/node/tpmquote"
)

// extend is PCR extension written out: v' = sha256(v || digest).
func extend(v [32]byte, digest [32]byte) [32]byte {
	return sha256.Sum256(append(v[:], digest[:]...))
}

// The phase word's digest is sha256 of its bytes, no terminator, as
// systemd-pcrphase (v252 src/boot/pcrphase.c) extends it. The value is
// coreutils' (printf enter-initrd | sha256sum), not this package's arithmetic.
func TestPhaseDigest(t *testing.T) {
	got := tpmquote.PhaseDigest("enter-initrd")
	if want := "51e6b92f405d1f98d96e3de343d61d420ad6923b25de21d766f9298192f14fed"; hex.EncodeToString(got[:]) != want {
		t.Fatalf("PhaseDigest(enter-initrd) = %x, want %s", got, want)
	}
}

// A quote made by the package on a genuine TPM (swtpm) verifies: attest.Verify
// accepts it, and its signature checks with crypto/ecdsa directly against the
// AK public, over sha256 of the TPMS_ATTEST bytes.
func TestQuoteSwtpm(t *testing.T) {
	tp := swtpmtest.Start(t)
	// What the stub would have measured before: two events of our own.
	var pcr11 [32]byte
	for _, e := range []string{".linux", "kernel"} {
		if err := tp.Extend(tpmquote.PhasePCR, []byte(e)); err != nil {
			t.Fatal(err)
		}
		pcr11 = extend(pcr11, sha256.Sum256([]byte(e)))
	}
	if err := tpmquote.ExtendPhase(tp.T, attest.PhaseEnterInitrd); err != nil {
		t.Fatal(err)
	}
	pcr11 = extend(pcr11, sha256.Sum256([]byte(attest.PhaseEnterInitrd)))

	body := []byte(`{"verdict":"pass"}`)
	ev, err := tpmquote.Quote(tp.T, "nonce-1", body, attest.PhaseEnterInitrd)
	if err != nil {
		t.Fatal(err)
	}
	if ev.PCRs["11"] != hex.EncodeToString(pcr11[:]) {
		t.Fatalf("PCR 11 %s, the extensions written out give %x", ev.PCRs["11"], pcr11)
	}
	if ev.PCRs["4"] != hex.EncodeToString(make([]byte, 32)) {
		t.Errorf("PCR 4 of a fresh TPM: %s, want zeros", ev.PCRs["4"])
	}
	if len(ev.EKCert) != 0 {
		t.Errorf("a TPM with no EK certificate in NV gave %d bytes of one", len(ev.EKCert))
	}
	res, err := attest.Verify(ev, body, attest.Expect{Nonce: "nonce-1", PCR11: pcr11})
	if err != nil {
		t.Fatalf("attest.Verify refused the package's own quote: %v", err)
	}
	if !res.FirstUse || res.AKName == "" {
		t.Errorf("result %+v", res)
	}

	// The signature, checked without attest: ECDSA P-256 over sha256(quote).
	pub, err := tpm2.Unmarshal[tpm2.TPMTPublic](ev.AKPublic)
	if err != nil {
		t.Fatal(err)
	}
	ecc, err := pub.Unique.ECC()
	if err != nil {
		t.Fatal(err)
	}
	point := make([]byte, 65) // SEC 1 uncompressed: 0x04, X, Y, each 32 bytes big-endian
	point[0] = 4
	copy(point[33-len(ecc.X.Buffer):33], ecc.X.Buffer)
	copy(point[65-len(ecc.Y.Buffer):], ecc.Y.Buffer)
	key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := tpm2.Unmarshal[tpm2.TPMTSignature](ev.Signature)
	if err != nil {
		t.Fatal(err)
	}
	es, err := sig.Signature.ECDSA()
	if err != nil {
		t.Fatalf("signature is not ECDSA: %v", err)
	}
	digest := sha256.Sum256(ev.Quote)
	r, s := new(big.Int).SetBytes(es.SignatureR.Buffer), new(big.Int).SetBytes(es.SignatureS.Buffer)
	if !ecdsa.Verify(key, digest[:], r, s) {
		t.Fatal("the quote's ECDSA signature does not verify with the AK public")
	}
	tampered := bytes.Clone(ev.Quote)
	tampered[len(tampered)-1] ^= 1
	if d := sha256.Sum256(tampered); ecdsa.Verify(key, d[:], r, s) {
		t.Fatal("the signature verifies over a changed quote too")
	}
	// The quote is bound to the body: another body fails the digest check.
	if _, err := attest.Verify(ev, []byte(`{"verdict":"fail"}`), attest.Expect{Nonce: "nonce-1", PCR11: pcr11}); err == nil {
		t.Error("the quote verified for another report body")
	}

	// Same TPM, second quote: the same AK and EK (primaries re-derived from
	// the seed), so the collector's first-use record holds.
	ev2, err := tpmquote.Quote(tp.T, "nonce-2", body, attest.PhaseEnterInitrd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.AKPublic, ev2.AKPublic) || !bytes.Equal(ev.EKPublic, ev2.EKPublic) {
		t.Error("a second quote on the same TPM has another AK or EK")
	}
	if _, err := attest.Verify(ev2, body, attest.Expect{Nonce: "nonce-2", PCR11: pcr11, AKName: res.AKName}); err != nil {
		t.Errorf("second quote against the recorded AK: %v", err)
	}
	// The handles were flushed: a TPM without a resource manager has 3
	// transient slots, so a leak would show after a few quotes.
	for i := range 4 {
		if _, err := tpmquote.Quote(tp.T, "n", body, attest.PhaseEnterInitrd); err != nil {
			t.Fatalf("quote %d: %v (handles leaked?)", i+3, err)
		}
	}
}

// An EK certificate in NV (here: one written to the RSA EK index, longer than
// one NV read) comes with the evidence byte for byte.
func TestQuoteEKCertFromNV(t *testing.T) {
	tp := swtpmtest.Start(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test EK", Organization: []string{"peerboot test, a long organisation name so the certificate spans NV reads"}},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), DNSNames: []string{"a.example", "b.example", "c.example", "d.example", "e.example", "f.example", "g.example", "h.example", "i.example", "j.example"}}
	cert, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert) <= 512 {
		t.Fatalf("test certificate %d bytes: want more than one NV chunk", len(cert))
	}
	owner := tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)}
	nvPub := tpm2.TPMSNVPublic{
		NVIndex: tpm2.TPMHandle(tpmquote.EKCertRSAIndex), NameAlg: tpm2.TPMAlgSHA256,
		Attributes: tpm2.TPMANV{OwnerWrite: true, OwnerRead: true, AuthRead: true, NoDA: true, NT: tpm2.TPMNTOrdinary},
		DataSize:   uint16(len(cert)),
	}
	if _, err := (tpm2.NVDefineSpace{AuthHandle: owner, PublicInfo: tpm2.New2B(nvPub)}).Execute(tp.T); err != nil {
		t.Fatal(err)
	}
	rp, err := tpm2.NVReadPublic{NVIndex: nvPub.NVIndex}.Execute(tp.T)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(cert); off += 512 {
		end := min(off+512, len(cert))
		if _, err := (tpm2.NVWrite{AuthHandle: owner, NVIndex: tpm2.NamedHandle{Handle: nvPub.NVIndex, Name: rp.NVName},
			Data: tpm2.TPM2BMaxNVBuffer{Buffer: cert[off:end]}, Offset: uint16(off)}).Execute(tp.T); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := tpmquote.Quote(tp.T, "n", []byte("{}"), attest.PhaseEnterInitrd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.EKCert, cert) {
		t.Fatalf("EK certificate: got %d bytes, want the %d written", len(ev.EKCert), len(cert))
	}
	if _, err := tpmquote.ReadNV(tp.T, tpmquote.EKCertRSAIndex, 100); err == nil {
		t.Error("an NV index larger than the limit was read")
	}
}

func TestDevice(t *testing.T) {
	type call struct {
		path string
		mode uint32
		dev  int
	}
	write := func(t *testing.T, root string, files map[string]string) {
		for p, c := range files {
			p = filepath.Join(root, p)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		want    string // relative to root
		mknod   *call
		wantErr string
	}{
		{name: "no TPM", files: map[string]string{"dev/null": ""}, wantErr: "no TPM 2.0"},
		{name: "resource manager node present", files: map[string]string{"sys/class/tpm/tpm0/dev": "10:224\n", "sys/class/tpmrm/tpmrm0/dev": "253:65536\n", "dev/tpmrm0": ""}, want: "dev/tpmrm0"},
		{name: "devtmpfs lacks the nodes", files: map[string]string{"sys/class/tpm/tpm0/dev": "10:224\n", "sys/class/tpmrm/tpmrm0/dev": "253:65536\n", "dev/null": ""},
			want: "dev/tpmrm0", mknod: &call{"dev/tpmrm0", unix.S_IFCHR | 0o600, int(unix.Mkdev(253, 65536))}},
		{name: "no resource manager (older kernel)", files: map[string]string{"sys/class/tpm/tpm0/dev": "10:224\n", "dev/null": ""},
			want: "dev/tpm0", mknod: &call{"dev/tpm0", unix.S_IFCHR | 0o600, int(unix.Mkdev(10, 224))}},
		{name: "garbled dev file", files: map[string]string{"sys/class/tpm/tpm0/dev": "ten\n", "dev/null": ""}, wantErr: "want MAJOR:MINOR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tc.files)
			var got *call
			path, err := tpmquote.Device(filepath.Join(root, "sys"), filepath.Join(root, "dev"), func(p string, mode uint32, dev int) error {
				rel, _ := filepath.Rel(root, p)
				got = &call{rel, mode, dev}
				return nil
			})
			if tc.wantErr != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr)) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if tc.name == "no TPM" && !errors.Is(err, tpmquote.ErrNoTPM) {
					t.Errorf("not ErrNoTPM: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if path != filepath.Join(root, tc.want) {
				t.Errorf("path %s, want %s", path, tc.want)
			}
			if (got == nil) != (tc.mknod == nil) || (got != nil && *got != *tc.mknod) {
				t.Errorf("mknod %+v, want %+v", got, tc.mknod)
			}
		})
	}
}

// A TPM manufactured by swtpm_setup (EK certificates in NV, signed by
// swtpm_localca's CA) sends its RSA EK certificate, and it certifies exactly
// the EK this package creates from the TCG template: the collector's EK chain
// check passes with that CA as the bundle.
func TestQuoteSwtpmSetupEKCert(t *testing.T) {
	setup, err := exec.LookPath("swtpm_setup")
	if err != nil {
		testguard.Skip(t, "swtpm_setup not installed (Debian package swtpm-tools; make test-deps)")
	}
	state := t.TempDir()
	if out, err := exec.Command(setup, "--tpm2", "--tpmstate", state, "--create-ek-cert", "--create-platform-cert", "--lock-nvram").CombinedOutput(); err != nil {
		t.Fatalf("swtpm_setup: %v\n%s", err, out)
	}
	ev, err := tpmquote.Quote(startOn(t, state), "n", []byte("{}"), attest.PhaseEnterInitrd)
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.EKCert) == 0 {
		t.Fatal("no EK certificate read from NV 0x01c00002")
	}
	roots := x509.NewCertPool()
	for _, f := range []string{"swtpm-localca-rootca-cert.pem", "issuercert.pem"} {
		pem, err := os.ReadFile(filepath.Join("/var/lib/swtpm-localca", f))
		if err != nil {
			t.Fatal(err)
		}
		roots.AppendCertsFromPEM(pem)
	}
	zero := [32]byte{}
	res, err := attest.Verify(ev, []byte("{}"), attest.Expect{Nonce: "n", PCR11: zero, EKRoots: roots})
	if err != nil {
		t.Fatalf("EK chain check: %v", err)
	}
	if !res.EKChecked {
		t.Error("EK chain not checked")
	}
}

// startOn runs swtpm on an existing state directory (swtpmtest.Start always
// makes a fresh one) and connects to it.
func startOn(t *testing.T, state string) transport.TPM {
	t.Helper()
	dir, err := os.MkdirTemp("", "swtpm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tpm.sock")
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--server", "type=unixio,path="+sock,
		"--ctrl", "type=unixio,path="+filepath.Join(dir, "ctrl.sock"), "--flags", "not-need-init,startup-clear", "--tpmstate", "dir="+state)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("swtpm did not listen within 10 s")
		}
	}
	tp, err := linuxudstpm.Open(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	return tp
}
