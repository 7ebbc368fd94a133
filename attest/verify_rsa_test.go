package attest_test

import (
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"

	"github.com/peerboot/peerboot/attest"
)

// rsaAK is a restricted RSA-2048 signing key, RSASSA with hash: what a TPM
// without ECC (or another agent's AK) quotes with.
func rsaAK(hash tpm2.TPMAlgID, unique string) tpm2.TPMTPublic {
	return tpm2.TPMTPublic{
		Type:    tpm2.TPMAlgRSA,
		NameAlg: tpm2.TPMAlgSHA256,
		ObjectAttributes: tpm2.TPMAObject{
			FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true, UserWithAuth: true,
			Restricted: true, SignEncrypt: true, NoDA: true,
		},
		Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgRSA, &tpm2.TPMSRSAParms{
			Scheme: tpm2.TPMTRSAScheme{Scheme: tpm2.TPMAlgRSASSA,
				Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgRSASSA, &tpm2.TPMSSigSchemeRSASSA{HashAlg: hash})},
			KeyBits: 2048,
		}),
		Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: []byte(unique)}),
	}
}

// Quotes signed by an RSA AK are checked as ECC ones are: a good one passes,
// and a flipped signature, another RSA key, an ECC key under an RSASSA
// signature and a SHA-1 signature are each refused for their reason.
// (Issue 35: only ECC AKs were tested; the RSASSA branch could go unchecked.)
func TestVerifyRSAAK(t *testing.T) {
	tp, pcr11 := booted(t)
	body := []byte(`{"schema":2,"verdict":"PASS"}`)
	const nonce = "nonce-rsa"
	quote := func(tmpl tpm2.TPMTPublic) *attest.Evidence {
		t.Helper()
		ev, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, &tmpl)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ev := quote(rsaAK(tpm2.TPMAlgSHA256, ""))
	other := quote(rsaAK(tpm2.TPMAlgSHA256, "other"))
	sha1 := quote(rsaAK(tpm2.TPMAlgSHA1, ""))
	ecc, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := attest.Expect{Nonce: nonce, PCR11: pcr11}
	res, err := attest.Verify(ev, body, want)
	if err != nil {
		t.Fatalf("a good RSA AK quote: %v", err)
	}
	if name, _ := attest.AKName(ev.AKPublic); res.AKName != name || !strings.HasPrefix(name, "000b") {
		t.Fatalf("result %+v, AK name %s", res, name)
	}
	for _, tc := range []struct {
		name string
		ev   *attest.Evidence
		want string
	}{
		{"signature flipped", func() *attest.Evidence { c := clone(ev); c.Signature[len(c.Signature)-1] ^= 1; return c }(), "quote signature does not verify with the AK"},
		{"quote flipped", func() *attest.Evidence { c := clone(ev); c.Quote[len(c.Quote)-1] ^= 1; return c }(), "quote signature does not verify with the AK"},
		{"another RSA AK's public", func() *attest.Evidence { c := clone(ev); c.AKPublic = other.AKPublic; return c }(), "quote signature does not verify with the AK"},
		{"ECC AK under an RSASSA signature", func() *attest.Evidence { c := clone(ev); c.AKPublic = ecc.AKPublic; return c }(), "RSASSA, but the AK is not an RSA key"},
		{"RSA AK under an ECDSA signature", func() *attest.Evidence { c := clone(ecc); c.AKPublic = ev.AKPublic; return c }(), "ECDSA, but the AK is not an ECC key"},
		{"SHA-1 signature", sha1, "quote signature: hash 0x4, want SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := attest.Verify(tc.ev, body, want)
			if err == nil || !attest.IsRefusal(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}
