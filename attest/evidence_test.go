package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

func sampleEvidence() *Evidence {
	z := strings.Repeat("00", 32)
	return &Evidence{
		Version:      1,
		Nonce:        "n-0123456789abcdef",
		ReportSHA256: strings.Repeat("ab", 32),
		Phase:        PhaseEnterInitrd,
		PCRs:         map[string]string{"4": z, "7": z, "11": z},
		Quote:        []byte{0xff, 'T', 'C', 'G'},
		Signature:    []byte{0, 0x18},
		AKPublic:     []byte{0, 0x23},
		EKPublic:     []byte{0, 1},
	}
}

func TestQualifyingData(t *testing.T) {
	var d [32]byte
	copy(d[:], bytes.Repeat([]byte{0xab}, 32))
	// Written out independently of the function: the prefix, NUL, nonce, NUL, digest.
	want := sha256.Sum256(append([]byte("peerboot-attest-v1\x00n1\x00"), d[:]...))
	if got := QualifyingData("n1", d); !bytes.Equal(got, want[:]) {
		t.Fatalf("QualifyingData = %x, want %x", got, want)
	}
	if bytes.Equal(QualifyingData("n1", d), QualifyingData("n2", d)) {
		t.Fatal("different nonces give the same qualifying data")
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	ev := sampleEvidence()
	ev.EKCert = []byte{0x30, 0x82}
	s, err := Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(ev)
	b, _ := json.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("round trip changed the evidence:\n%s\n%s", a, b)
	}
	if _, err := Decode(s + "=="); err != nil {
		t.Fatalf("padded form refused: %v", err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	enc := func(mut func(m map[string]any)) string {
		b, _ := json.Marshal(sampleEvidence())
		var m map[string]any
		json.Unmarshal(b, &m)
		mut(m)
		b, _ = json.Marshal(m)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	good, _ := Encode(sampleEvidence())
	for _, tc := range []struct {
		name, header, want string
	}{
		{"empty", "", "empty"},
		{"too long", strings.Repeat("A", MaxHeaderBytes+1), "at most"},
		{"not base64", "!!!", "not base64url"},
		{"std base64 chars", strings.ReplaceAll(good, "-", "+") + "+/", "not base64url"},
		{"not JSON", base64.RawURLEncoding.EncodeToString([]byte("nope")), "JSON"},
		{"trailing data", base64.RawURLEncoding.EncodeToString(append(mustJSON(sampleEvidence()), []byte(" {}")...)), "data after"},
		{"unknown field", enc(func(m map[string]any) { m["extra"] = 1 }), "unknown field"},
		{"version", enc(func(m map[string]any) { m["v"] = 2 }), "v: want 1, got 2"},
		{"no nonce", enc(func(m map[string]any) { delete(m, "nonce") }), "nonce: missing"},
		{"nonce with space", enc(func(m map[string]any) { m["nonce"] = "a b" }), "nonce:"},
		{"digest short", enc(func(m map[string]any) { m["report_sha256"] = "abcd" }), "report_sha256: want 64 hex digits"},
		{"digest not hex", enc(func(m map[string]any) { m["report_sha256"] = strings.Repeat("zz", 32) }), "report_sha256"},
		{"no phase", enc(func(m map[string]any) { m["phase"] = "" }), "phase: missing"},
		{"pcr missing", enc(func(m map[string]any) { delete(m["pcrs"].(map[string]any), "11") }), "pcrs: 11 missing"},
		{"pcr extra", enc(func(m map[string]any) { m["pcrs"].(map[string]any)["0"] = strings.Repeat("00", 32) }), "pcrs: want exactly"},
		{"pcr not hex", enc(func(m map[string]any) { m["pcrs"].(map[string]any)["7"] = "xy" }), "pcrs[7]"},
		{"no quote", enc(func(m map[string]any) { delete(m, "quote") }), "quote: missing"},
		{"no ak", enc(func(m map[string]any) { m["ak_public"] = "" }), "ak_public: missing"},
		{"no ek", enc(func(m map[string]any) { delete(m, "ek_public") }), "ek_public: missing"},
		{"no signature", enc(func(m map[string]any) { delete(m, "signature") }), "signature: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.header)
			if err == nil {
				t.Fatalf("Decode accepted %q", clip(tc.header))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzDecode: outside bytes never panic the decoder, and whatever it accepts
// re-encodes to evidence it accepts again, with the same content.
func FuzzDecode(f *testing.F) {
	good, _ := Encode(sampleEvidence())
	f.Add(good)
	f.Add("")
	f.Add("e30")                    // {}
	f.Add(good[:len(good)/2])       // truncated
	f.Add(strings.Repeat("A", 100)) // zeros
	f.Add(hex.EncodeToString([]byte("x")))
	f.Fuzz(func(t *testing.T, s string) {
		ev, err := Decode(s)
		if err != nil {
			return
		}
		again, err := Encode(ev)
		if err != nil {
			return // JSON escaping can make the re-encoding longer than the limit: Encode refuses it, which is right
		}
		ev2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-encoded evidence refused: %v", err)
		}
		if !bytes.Equal(mustJSON(ev), mustJSON(ev2)) {
			t.Fatal("re-encoding changed the evidence")
		}
	})
}

func TestCheckSelection(t *testing.T) {
	sel := func(h tpm2.TPMAlgID, bits ...byte) tpm2.TPMLPCRSelection {
		return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: h, PCRSelect: bits}}}
	}
	for _, tc := range []struct {
		name string
		sel  tpm2.TPMLPCRSelection
		want string
	}{
		{"4 7 11", sel(tpm2.TPMAlgSHA256, 0x90, 0x08, 0x00), ""},
		{"4 7 11 in four bytes", sel(tpm2.TPMAlgSHA256, 0x90, 0x08, 0x00, 0x00), ""},
		{"sha1 bank", sel(tpm2.TPMAlgSHA1, 0x90, 0x08, 0x00), "bank"},
		{"no 11", sel(tpm2.TPMAlgSHA256, 0x90, 0x00, 0x00), "bitmap"},
		{"and 0", sel(tpm2.TPMAlgSHA256, 0x91, 0x08, 0x00), "bitmap"},
		{"and 23", sel(tpm2.TPMAlgSHA256, 0x90, 0x08, 0x80), "bitmap"},
		{"two banks", tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{Hash: tpm2.TPMAlgSHA256, PCRSelect: []byte{0x90, 8, 0}}, {Hash: tpm2.TPMAlgSHA1, PCRSelect: []byte{0, 0, 0}}}}, "2 banks"},
	} {
		err := checkSelection(tc.sel)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// FuzzVerifyParsers: the TPM structures in the evidence are outside bytes;
// whatever they hold, Verify refuses them with a reason and never panics.
func FuzzVerifyParsers(f *testing.F) {
	f.Add([]byte{0xff, 'T', 'C', 'G', 0x80, 0x18}, []byte{0, 0x18, 0, 0x0b, 0, 1, 1, 0, 1, 2}, []byte{0, 0x23, 0, 0x0b, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{}, []byte{0, 0x14, 0, 0x0b, 0xff, 0xff}, []byte{0, 1, 0, 0x0b, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, quote, sig, pub []byte) {
		ev := sampleEvidence()
		body := []byte("{}")
		s := sha256.Sum256(body)
		ev.ReportSHA256 = hex.EncodeToString(s[:])
		ev.Quote, ev.Signature, ev.AKPublic, ev.EKPublic = quote, sig, pub, pub
		if len(quote) == 0 || len(sig) == 0 || len(pub) == 0 {
			return
		}
		if _, err := Verify(ev, body, Expect{Nonce: ev.Nonce}); err == nil {
			t.Fatal("random TPM structures verified")
		} else if !IsRefusal(err) {
			t.Fatalf("not a refusal: %v", err)
		}
	})
}
