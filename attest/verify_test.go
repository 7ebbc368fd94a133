package attest_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-tpm/tpm2"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// extendAll is PCR extension written out: v = sha256(v || sha256(event)).
func extendAll(events ...string) [32]byte {
	var v [32]byte
	for _, e := range events {
		d := sha256.Sum256([]byte(e))
		v = sha256.Sum256(append(v[:], d[:]...))
	}
	return v
}

// booted is a swtpm whose PCR 11 holds what a stub would have extended for a
// toy UKI (the test's own events: the arithmetic, not systemd's section rules,
// is what Verify depends on).
func booted(t *testing.T) (*swtpmtest.TPM, [32]byte) {
	tp := swtpmtest.Start(t)
	events := []string{".linux", "kernel bytes", ".cmdline", "console=ttyS0", "enter-initrd"}
	for _, e := range events {
		if err := tp.Extend(11, []byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tp.Extend(4, []byte("a loader")); err != nil {
		t.Fatal(err)
	}
	return tp, extendAll(events...)
}

func clone(ev *attest.Evidence) *attest.Evidence {
	c := *ev
	c.PCRs = map[string]string{}
	for k, v := range ev.PCRs {
		c.PCRs[k] = v
	}
	for _, b := range []*[]byte{&c.Quote, &c.Signature, &c.AKPublic, &c.EKPublic, &c.EKCert} {
		*b = append([]byte(nil), (*b)...)
	}
	return &c
}

func TestVerifySwtpm(t *testing.T) {
	tp, pcr11 := booted(t)
	body := []byte(`{"schema":2,"verdict":"PASS"}`)
	const nonce = "nonce-1"
	ev, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := hex.DecodeString(ev.PCRs["11"]); [32]byte(got) != pcr11 {
		t.Fatalf("swtpm's PCR 11 %x, the extension written out gives %x", got, pcr11)
	}
	akName, err := attest.AKName(ev.AKPublic)
	if err != nil {
		t.Fatal(err)
	}
	// Another AK of the same TPM (a different template, so a different key).
	otherTmpl := swtpmtest.AKTemplate
	otherTmpl.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{X: tpm2.TPM2BECCParameter{Buffer: []byte("other")}})
	other, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, &otherTmpl)
	if err != nil {
		t.Fatal(err)
	}
	// An unrestricted signing key can sign anything, TPM-looking or not.
	loose := swtpmtest.AKTemplate
	loose.ObjectAttributes.Restricted = false
	unrestricted, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, &loose)
	if err != nil {
		t.Fatal(err)
	}
	// A quote of the same TPM for another report.
	otherBody := []byte(`{"schema":2,"verdict":"FAIL"}`)
	forOther, err := tp.Quote(nonce, otherBody, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	good := attest.Expect{Nonce: nonce, PCR11: pcr11}
	for _, tc := range []struct {
		name   string
		ev     *attest.Evidence
		body   []byte
		expect func(*attest.Expect)
		want   string // "" passes
	}{
		{name: "first use", ev: ev},
		{name: "recorded AK", ev: ev, expect: func(e *attest.Expect) { e.AKName = akName }},
		{name: "body changed", ev: ev, body: otherBody, want: "report digest mismatch"},
		{name: "nonce not this boot's", ev: ev, expect: func(e *attest.Expect) { e.Nonce = "nonce-2" }, want: "nonce mismatch"},
		{name: "nonce rewritten in the evidence", ev: func() *attest.Evidence { c := clone(ev); c.Nonce = "nonce-2"; return c }(),
			expect: func(e *attest.Expect) { e.Nonce = "nonce-2" }, want: "extraData"},
		{name: "quote for another report, digest rewritten", body: body, ev: func() *attest.Evidence {
			c := clone(forOther)
			c.ReportSHA256 = ev.ReportSHA256
			return c
		}(), want: "extraData"},
		{name: "PCR 11 not the prediction", ev: ev, expect: func(e *attest.Expect) { e.PCR11 = extendAll(".cmdline", "console=ttyS1") }, want: "PCR 11 mismatch"},
		{name: "PCR 4 value rewritten", ev: func() *attest.Evidence { c := clone(ev); c.PCRs["4"] = strings.Repeat("00", 32); return c }(), want: "PCR digest mismatch"},
		{name: "PCR 11 value rewritten to the prediction", ev: func() *attest.Evidence {
			c := clone(ev)
			c.PCRs["11"] = hex.EncodeToString(make([]byte, 32))
			return c
		}(), expect: func(e *attest.Expect) { e.PCR11 = [32]byte{} }, want: "PCR digest mismatch"},
		{name: "phase", ev: func() *attest.Evidence { c := clone(ev); c.Phase = "ready"; return c }(), want: `phase "ready", want "enter-initrd"`},
		{name: "AK changed", ev: other, expect: func(e *attest.Expect) { e.AKName = akName }, want: "AK changed"},
		{name: "AK swapped under the quote", ev: func() *attest.Evidence { c := clone(ev); c.AKPublic = other.AKPublic; return c }(), want: "does not verify"},
		{name: "signature flipped", ev: func() *attest.Evidence { c := clone(ev); c.Signature[len(c.Signature)-1] ^= 1; return c }(), want: "does not verify"},
		{name: "quote flipped", ev: func() *attest.Evidence { c := clone(ev); c.Quote[len(c.Quote)-1] ^= 1; return c }(), want: "does not verify"},
		{name: "quote trailing byte", ev: func() *attest.Evidence { c := clone(ev); c.AKPublic = append(c.AKPublic, 0); return c }(), want: "trailing or non-canonical"},
		{name: "unrestricted key", ev: unrestricted, want: "not a restricted signing key"},
		{name: "not a TPM structure", ev: func() *attest.Evidence { c := clone(ev); c.Quote = []byte("hello"); return c }(), want: "does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.body
			if b == nil {
				b = body
			}
			e := good
			if tc.expect != nil {
				tc.expect(&e)
			}
			res, err := attest.Verify(tc.ev, b, e)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if res.AKName != akName || res.FirstUse != (e.AKName == "") || res.PCRs[11] != pcr11 {
					t.Fatalf("result %+v", res)
				}
				return
			}
			if err == nil {
				t.Fatalf("passed, want refused with %q", tc.want)
			}
			if !attest.IsRefusal(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with %q, want %q", err, tc.want)
			}
		})
	}
}

// TestVerifyEKChain: with roots, the EK certificate must chain to them and be
// for the EK public sent.
func TestVerifyEKChain(t *testing.T) {
	tp, pcr11 := booted(t)
	body := []byte(`{"verdict":"PASS"}`)
	ev, err := tp.Quote("n", body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	ekPub, err := tpm2.Unmarshal[tpm2.TPMTPublic](ev.EKPublic)
	if err != nil {
		t.Fatal(err)
	}
	ekKey, err := tpm2.Pub(*ekPub)
	if err != nil {
		t.Fatal(err)
	}
	ca := func() (*x509.Certificate, *ecdsa.PrivateKey) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test EK CA"}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, k
	}
	issue := func(caCert *x509.Certificate, caKey *ecdsa.PrivateKey, pub any) []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageKeyEncipherment}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, pub, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	caCert, caKey := ca()
	otherCA, otherKey := ca()
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	stranger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name string
		cert []byte
		want string
	}{
		{"chains", issue(caCert, caKey, ekKey), ""},
		{"no certificate", nil, "no EK certificate"},
		{"other CA", issue(otherCA, otherKey, ekKey), "does not chain"},
		{"another key's certificate", issue(caCert, caKey, &stranger.PublicKey), "another key"},
		{"not DER", []byte("junk"), "EK certificate:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clone(ev)
			c.EKCert = tc.cert
			res, err := attest.Verify(c, body, attest.Expect{Nonce: "n", PCR11: pcr11, EKRoots: roots})
			if tc.want == "" {
				if err != nil || !res.EKChecked {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
