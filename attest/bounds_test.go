package attest_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// The size and nonce bounds hold at exactly their limit and refuse one past it
// (make mutants' attest survivors: each was a < that could be <= unnoticed).
func TestEvidenceBounds(t *testing.T) {
	tp, _ := booted(t)
	ev, err := tp.Quote("n", []byte("body"), attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A header of exactly MaxHeaderBytes is read (and fails later, as not base64);
	// one byte more is refused for its size.
	if _, err := attest.Decode(strings.Repeat("*", attest.MaxHeaderBytes)); err == nil || strings.Contains(err.Error(), "at most") {
		t.Errorf("a header of exactly the limit: %v", err)
	}
	if _, err := attest.Decode(strings.Repeat("*", attest.MaxHeaderBytes+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a header one past the limit: %v", err)
	}
	// Encode: evidence that encodes to exactly the limit is encoded; one more is refused.
	size := func(e *attest.Evidence) int {
		b, _ := json.Marshal(e)
		return base64.RawURLEncoding.EncodedLen(len(b))
	}
	c := *ev
	c.EKCert = nil
	for size(&c) < attest.MaxHeaderBytes-100 {
		c.EKCert = append(c.EKCert, 0)
	}
	for size(&c) < attest.MaxHeaderBytes { // one JSON byte at a time: 16384 = 4/3 of 12288
		c.Phase += "x"
	}
	if size(&c) != attest.MaxHeaderBytes {
		t.Fatalf("could not make evidence of exactly %d encoded bytes (%d)", attest.MaxHeaderBytes, size(&c))
	}
	if s, err := attest.Encode(&c); err != nil || len(s) != attest.MaxHeaderBytes {
		t.Errorf("evidence of exactly the limit: %d bytes, %v", len(s), err)
	}
	c.Phase += "xxx"
	if _, err := attest.Encode(&c); err == nil || !strings.Contains(err.Error(), "the collector takes at most") {
		t.Errorf("evidence past the limit: %v", err)
	}
	// A nonce of 128 bytes is well formed; 129 is not.
	for n, ok := range map[int]bool{128: true, 129: false} {
		c := *ev
		c.Nonce = strings.Repeat("a", n)
		h, err := attest.Encode(&c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = attest.Decode(h)
		if ok != (err == nil) {
			t.Errorf("a %d-byte nonce: %v", n, err)
		}
	}
}

// A PCR 11 mismatch says why when the TPM's PCR 11 is zero (nothing measured
// the UKI), and only then.
func TestPCR11ZeroSaysWhy(t *testing.T) {
	body := []byte("report")
	fresh := swtpmtest.Start(t)
	ev, err := fresh.Quote("n", body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = attest.Verify(ev, body, attest.Expect{Nonce: "n", PCR11: extendAll("x")})
	if err == nil || !strings.Contains(err.Error(), "PCR 11 mismatch") || !strings.Contains(err.Error(), "PCR 11 is zero: nothing measured the UKI") {
		t.Errorf("a zero PCR 11: %v", err)
	}
	tp, _ := booted(t)
	ev, err = tp.Quote("n", body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = attest.Verify(ev, body, attest.Expect{Nonce: "n", PCR11: extendAll("x")})
	if err == nil || !strings.Contains(err.Error(), "PCR 11 mismatch") || strings.Contains(err.Error(), "is zero") {
		t.Errorf("a measured PCR 11 that differs: %v", err)
	}
}
