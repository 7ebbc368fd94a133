package sign

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"strings"
	"testing"
)

// OpenEnvelope returns the payload of exactly what SignEnvelope and
// MarshalEnvelope wrote, and refuses any other envelope for its reason:
// other JSON around the same fields, another payload type, no signature, a
// signature by another key or over other bytes. A valid signature after
// invalid ones still opens it; when none is valid, each one's reason is named.
func TestOpenEnvelope(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(`{"statement":1}`)
	env, err := SignEnvelope(ec, InTotoPayloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	good, err := MarshalEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenEnvelope(good, ec.Public(), InTotoPayloadType); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the envelope as written: %q, %v", got, err)
	}
	edEnv, err := SignEnvelope(ed, InTotoPayloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	edGood, _ := MarshalEnvelope(edEnv)
	if got, err := OpenEnvelope(edGood, ed.Public(), InTotoPayloadType); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("an Ed25519 envelope: %q, %v", got, err)
	}

	marshal := func(e Envelope) []byte {
		b, err := MarshalEnvelope(&e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var indented bytes.Buffer
	json.Indent(&indented, bytes.TrimSpace(good), "", " ")
	indented.WriteByte('\n')
	otherEnv, _ := SignEnvelope(other, InTotoPayloadType, payload)
	overOther, _ := SignEnvelope(ec, InTotoPayloadType, []byte(`{"statement":2}`))
	forged := *env
	forged.Signatures = []EnvelopeSig{{KeyID: env.Signatures[0].KeyID, Sig: overOther.Signatures[0].Sig}}
	badB64 := *env
	badB64.Signatures = []EnvelopeSig{{KeyID: env.Signatures[0].KeyID, Sig: "@@@"}}
	none := *env
	none.Signatures = []EnvelopeSig{}
	typed := *env
	typed.PayloadType = "application/json"
	both := *env
	both.Signatures = []EnvelopeSig{otherEnv.Signatures[0], forged.Signatures[0]}
	for name, c := range map[string]struct {
		b   []byte
		err string
	}{
		"indented":        {indented.Bytes(), "not in canonical form"},
		"trailing line":   {append(append([]byte{}, good...), good...), "not in canonical form"},
		"payload type":    {marshal(typed), `payloadType "application/json"`},
		"no signature":    {marshal(none), "has no signatures"},
		"another key":     {marshal(*otherEnv), "keyid"},
		"other payload":   {marshal(forged), "does not verify"},
		"bad base64":      {marshal(badB64), "signature 0: not base64"},
		"both bad":        {marshal(both), "(signature 0: keyid "},
		"not an envelope": {[]byte("{}\n{}"), "not in canonical form"},
	} {
		if got, err := OpenEnvelope(c.b, ec.Public(), InTotoPayloadType); err == nil || got != nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %q, %v; want an error containing %q", name, got, err, c.err)
		}
	}
	if _, err := OpenEnvelope(marshal(both), ec.Public(), InTotoPayloadType); err == nil || !strings.Contains(err.Error(), "; signature 1: ECDSA P-256 signature does not verify") {
		t.Errorf("two bad signatures: %v, want both named", err)
	}
	// A good signature after a bad one opens it.
	mixed := *env
	mixed.Signatures = []EnvelopeSig{otherEnv.Signatures[0], env.Signatures[0]}
	if got, err := OpenEnvelope(marshal(mixed), ec.Public(), InTotoPayloadType); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("a good signature after another key's: %q, %v", got, err)
	}
	// Artifact keys are ECDSA P-256 or Ed25519: no other curve, no RSA.
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := SignEnvelope(p384, InTotoPayloadType, payload); err == nil || !strings.Contains(err.Error(), "want ECDSA P-256 or Ed25519") {
		t.Errorf("a P-384 key signed: %v", err)
	}
	if err := VerifyBlob(p384.Public(), payload, []byte("sig")); err == nil || !strings.Contains(err.Error(), "want ECDSA P-256 or Ed25519") {
		t.Errorf("a P-384 key verified: %v", err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyBlob(rk.Public(), payload, []byte("sig")); err == nil || !strings.Contains(err.Error(), "want ECDSA P-256 or Ed25519") {
		t.Errorf("an RSA key verified: %v", err)
	}
}
