package attestation

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestPredict: a build's PCR 11 prediction, or the reason there is none; a
// missing prediction is logged (reports of that build cannot be attested), a
// prediction is not.
func TestPredict(t *testing.T) {
	predictor := func(uki []byte) ([32]byte, error) {
		if string(uki) == "bad" {
			return [32]byte{}, errors.New("not a PE file")
		}
		return [32]byte{0xab}, nil
	}
	uki := func(b []byte, err error) func() ([]byte, error) { return func() ([]byte, error) { return b, err } }
	for _, c := range []struct {
		name    string
		predict func([]byte) ([32]byte, error)
		uki     func() ([]byte, error)
		pcr     string // prefix
		why     string
	}{
		{"predicted", predictor, uki([]byte("uki"), nil), "ab00", ""},
		{"no predictor", nil, uki([]byte("uki"), nil), "", "predicts no PCR 11"},
		{"no UKI", predictor, nil, "", "has no UKI"},
		{"UKI unreadable", predictor, uki(nil, errors.New("gone")), "", "reading peerboot.efi: gone"},
		{"not predictable", predictor, uki([]byte("bad"), nil), "", "predicting PCR 11: not a PE file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			s := New(Config{Secret: []byte("s"), PredictPCR11: c.predict, Log: slog.New(slog.NewTextHandler(&log, nil))})
			p := s.predict(Build{ID: "0123456789abcdef", Recipe: "r", UKI: c.uki})
			if !strings.HasPrefix(p.pcr11, c.pcr) || (c.pcr == "") != (p.pcr11 == "") || !strings.Contains(p.why, c.why) || (c.why == "") != (p.why == "") {
				t.Errorf("prediction %q, why %q; want %q..., why %q", p.pcr11, p.why, c.pcr, c.why)
			}
			if logged := strings.Contains(log.String(), "no PCR 11 prediction"); logged != (c.why != "") {
				t.Errorf("logged %q, want the missing prediction logged: %t", log.String(), c.why != "")
			}
		})
	}
}

func TestClip(t *testing.T) {
	s64 := strings.Repeat("a", 64)
	if got := Clip(s64); got != s64 {
		t.Errorf("Clip of 64 bytes: %q, want it whole", got)
	}
	if got := Clip(s64 + "b"); got != s64+"…" {
		t.Errorf("Clip of 65 bytes: %q", got)
	}
}
