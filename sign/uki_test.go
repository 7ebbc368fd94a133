package sign

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// Offsets in minimalPE: its PE header at 0x40, the optional header (PE32+) 24
// bytes on, its data directories 112 bytes into that, the certificate table's
// entry (the fifth directory) 32 bytes into those.
const (
	minPEOpt  = 0x40 + 24
	minPEDirs = minPEOpt + 112
	minPESec  = minPEDirs + 4*8
)

// peWith is minimalPE changed by edit.
func peWith(edit func(b []byte) []byte) []byte {
	return edit(minimalPE(1))
}

// PESigned reads a PE image's headers as far as its certificate table's entry:
// whatever a .efi file holds, it answers or says what is wrong, and never
// panics (SignPE calls it on every listed .efi before anything else).
func TestPESigned(t *testing.T) {
	le := binary.LittleEndian
	for _, c := range []struct {
		name    string
		b       []byte
		signed  bool
		wantErr string // "" = no error
	}{
		{"unsigned", minimalPE(1), false, ""},
		{"signed", peWith(func(b []byte) []byte { le.PutUint32(b[minPESec+4:], 0x100); return b }), true, ""},
		// The file ends inside the optional header, before the data
		// directory count: refused, where it once panicked (slice bounds).
		{"cut after the optional header's magic", minimalPE(1)[:minPEOpt+2], false, "PE image truncated in its optional header"},
		{"cut inside the optional header", minimalPE(1)[:minPEOpt+100], false, "PE image truncated in its optional header"},
		{"cut a byte before the data directory count ends", minimalPE(1)[:minPEDirs-1], false, "PE image truncated in its optional header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			signed, err := PESigned(c.b)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("PESigned: %v", err)
			case c.wantErr != "" && (err == nil || err.Error() != c.wantErr):
				t.Fatalf("PESigned = %v, %v; want the error %q", signed, err, c.wantErr)
			case signed != c.signed:
				t.Errorf("PESigned = %v, want %v", signed, c.signed)
			}
		})
	}
}

// peerboot sign refuses a listed .efi that is not a whole PE image before it
// runs sbsign, naming the file and what is wrong with it.
func TestSignRefusesABrokenUKI(t *testing.T) {
	for _, c := range []struct {
		name string
		uki  []byte
		want string
	}{
		{"not a PE", []byte(strings.Repeat("not a UKI\n", 10)), "not a PE image (no MZ header)"},
		{"cut inside the optional header", minimalPE(7)[:minPEOpt+100], "PE image truncated in its optional header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSyntheticWith(t, false, map[string][]byte{output.UKIFile: c.uki})
			err := SignOutput(context.Background(), dir, signOpts(ArtifactKeyFile))
			if want := filepath.Join(dir, output.UKIFile) + ": " + c.want; err == nil || err.Error() != want {
				t.Fatalf("SignOutput = %v, want %q", err, want)
			}
			if !bytes.Equal(read(t, dir, output.UKIFile), c.uki) {
				t.Error("the refused UKI was changed")
			}
		})
	}
}
