package main

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2/transport"
	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
	"github.com/peerboot/peerboot/node/tpmquote"
)

// sent is one report POST the test machine made.
type sent struct {
	url, token, attestation string
	body                    []byte
}

// closeless keeps the test's swtpm connection open when the init closes it.
type closeless struct{ transport.TPM }

func (closeless) Close() error { return nil }

// A boot on a node with a TPM (swtpm, PCR 11 as a stub left it) extends the
// phase, quotes, and POSTs the report with evidence the collector's check
// accepts: nonce from the command line or, without one, from the collector.
func TestBootAttestsReport(t *testing.T) {
	for _, tc := range []struct {
		name, cmdNonce, askedNonce string
	}{
		{name: "nonce on the command line", cmdNonce: "n-cmdline"},
		{name: "nonce from the collector", askedNonce: "n-asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := swtpmtest.Start(t)
			if err := tp.Extend(tpmquote.PhasePCR, []byte("the UKI's sections")); err != nil {
				t.Fatal(err)
			}
			var pcr11 [32]byte
			for _, e := range []string{"the UKI's sections", attest.PhaseEnterInitrd} {
				d := sha256.Sum256([]byte(e))
				pcr11 = sha256.Sum256(append(pcr11[:], d[:]...))
			}
			cmdline := "console=ttyS0 peerboot.on_fail=poweroff peerboot.report_url=http://10.0.2.2:9/reports?node=n1 peerboot.token=tok"
			if tc.cmdNonce != "" {
				cmdline += " peerboot.nonce=" + tc.cmdNonce
			}
			b := newFakeBox(t, cmdline, &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
			var posts []sent
			var asked []string
			b.m.post = func(url, token string, body []byte, attestation string) error {
				posts = append(posts, sent{url, token, attestation, body})
				return nil
			}
			b.m.tpmOpen = func() (transport.TPMCloser, string, error) { return closeless{tp.T}, "/dev/tpmrm0", nil }
			b.m.askNonce = func(url, token string) (string, error) {
				asked = append(asked, url+" "+token)
				return tc.askedNonce, nil
			}
			b.m.run(&bootState{})

			if len(posts) != 1 || posts[0].attestation == "" {
				t.Fatalf("posts %+v; console:\n%s", posts, b.console.String())
			}
			nonce := tc.cmdNonce
			if nonce == "" {
				nonce = tc.askedNonce
				if len(asked) != 1 || asked[0] != "http://10.0.2.2:9/attest/nonce?node=n1 tok" {
					t.Errorf("nonce requests %v", asked)
				}
			} else if len(asked) != 0 {
				t.Errorf("asked the collector for a nonce although the command line had one: %v", asked)
			}
			ev, err := attest.Decode(posts[0].attestation)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := attest.Verify(ev, posts[0].body, attest.Expect{Nonce: nonce, PCR11: pcr11}); err != nil {
				t.Fatalf("the collector's check refuses the init's evidence: %v", err)
			}
			for _, want := range []string{"(systemd-stub's measurements) extended with \"enter-initrd\"", "TPM quote over PCRs 4, 7, 11", "for nonce " + nonce} {
				if !strings.Contains(b.console.String(), want) {
					t.Errorf("console lacks %q:\n%s", want, b.console.String())
				}
			}
		})
	}
}

// Without a TPM (or without a nonce) the report still goes, under the token
// alone, and one console line says why.
func TestBootUnattested(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tpm     bool
		stub    bool // PCR 11 as systemd-stub leaves it; false: zero, a kernel iPXE booted without the stub
		askErr  error
		wantMsg string
	}{
		{name: "no TPM", wantMsg: "TPM: none usable, reports go unattested: no TPM 2.0"},
		{name: "collector gives no nonce", tpm: true, stub: true, askErr: errors.New("HTTP 404"), wantMsg: "attestation: no nonce from the collector, the report goes unattested: HTTP 404"},
		{name: "PXE boot without the stub", tpm: true, wantMsg: "PCR 11 is zero (not booted through systemd-stub, so no image was measured): reports go unattested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBox(t, "peerboot.on_fail=poweroff peerboot.report_url=http://10.0.2.2:9/reports peerboot.token=tok", &kmodtest.Loader{Errs: map[string]error{"nvidia": unix.ENODEV}})
			var posts []sent
			b.m.post = func(url, token string, body []byte, attestation string) error {
				posts = append(posts, sent{url, token, attestation, body})
				return nil
			}
			b.m.tpmOpen = func() (transport.TPMCloser, string, error) { return nil, "", tpmquote.ErrNoTPM }
			if tc.tpm {
				tp := swtpmtest.Start(t)
				if tc.stub {
					if err := tp.Extend(tpmquote.PhasePCR, []byte("the UKI's sections")); err != nil {
						t.Fatal(err)
					}
				}
				b.m.tpmOpen = func() (transport.TPMCloser, string, error) { return closeless{tp.T}, "/dev/tpm0", nil }
			}
			asked := 0
			b.m.askNonce = func(string, string) (string, error) { asked++; return "", tc.askErr }
			b.m.run(&bootState{})
			if len(posts) != 1 || posts[0].attestation != "" || posts[0].token != "tok" {
				t.Fatalf("posts %+v", posts)
			}
			if n := strings.Count(b.console.String(), "unattested"); n != 1 || !strings.Contains(b.console.String(), tc.wantMsg) {
				t.Errorf("want one line %q, console:\n%s", tc.wantMsg, b.console.String())
			}
			if !tc.stub && asked != 0 {
				t.Errorf("asked the collector for a nonce %d times with nothing to attest", asked)
			}
		})
	}
}

func TestNonceURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://10.0.2.2:8080/reports?node=52:54:00:12:34:56": "http://10.0.2.2:8080/attest/nonce?node=52:54:00:12:34:56",
		"https://c.example/fleet/reports/":                    "https://c.example/fleet/attest/nonce",
		"http://c.example/r":                                  "http://c.example/r/attest/nonce",
	} {
		if got := nonceURL(in); got != want {
			t.Errorf("nonceURL(%s) = %s, want %s", in, got, want)
		}
	}
}
