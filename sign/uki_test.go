package sign

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
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

// signedPE is minimalPE with a certificate table (its entry's size set).
func signedPE() []byte {
	return peWith(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[minPESec+4:], 0x100); return b })
}

// pe32 is minimalPE as a PE32 image: its optional header's magic 0x10b, 16 data
// directories counted 92 bytes into it, a certificate table when signed.
func pe32(signed bool) []byte {
	return peWith(func(b []byte) []byte {
		le := binary.LittleEndian
		le.PutUint16(b[minPEOpt:], 0x10b)
		le.PutUint32(b[minPEOpt+92:], 16)
		if signed {
			le.PutUint32(b[minPEOpt+96+4*8+4:], 0x100)
		}
		return b
	})
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
		{"signed", signedPE(), true, ""},
		// The MS-DOS header: 64 bytes starting "MZ".
		{"empty", nil, false, "not a PE image (no MZ header)"},
		{"MZ and nothing more", []byte("MZ"), false, "not a PE image (no MZ header)"},
		{"M without Z", peWith(func(b []byte) []byte { b[1] = 'X'; return b }), false, "not a PE image (no MZ header)"},
		{"Z without M", peWith(func(b []byte) []byte { b[0] = 'X'; return b }), false, "not a PE image (no MZ header)"},
		{"an MS-DOS header and nothing more", minimalPE(1)[:0x40], false, "not a PE image (no PE signature)"},
		// The PE header, where the MS-DOS header's last field points.
		{"PE header offset past the end", peWith(func(b []byte) []byte { le.PutUint32(b[0x3c:], 0x10000); return b }), false, "not a PE image (no PE signature)"},
		{"PE header offset 2 bytes before the end", peWith(func(b []byte) []byte { le.PutUint32(b[0x3c:], uint32(len(b)-2)); return b }), false, "not a PE image (no PE signature)"},
		{"PE header offset at the MZ header", peWith(func(b []byte) []byte { le.PutUint32(b[0x3c:], 0); return b }), false, "not a PE image (no PE signature)"},
		{"no PE signature where the offset points", peWith(func(b []byte) []byte { b[0x40] = 'X'; return b }), false, "not a PE image (no PE signature)"},
		{"cut inside the COFF header", minimalPE(1)[:minPEOpt+1], false, "not a PE image (no PE signature)"},
		{"unknown optional header magic", peWith(func(b []byte) []byte { le.PutUint16(b[minPEOpt:], 0x107); return b }), false, "not a PE image (unknown optional header magic)"},
		// PE32 (32-bit) images keep their data directories 16 bytes earlier.
		{"PE32, unsigned", pe32(false), false, ""},
		{"PE32, signed", pe32(true), true, ""},
		// The certificate table is the fifth data directory: an image
		// declaring four has none, whatever bytes follow the fourth.
		{"four data directories", peWith(func(b []byte) []byte {
			le.PutUint32(b[minPEDirs-4:], 4)
			le.PutUint32(b[minPESec+4:], 0x100)
			return b
		}), false, ""},
		{"four data directories, cut right after the count", peWith(func(b []byte) []byte { le.PutUint32(b[minPEDirs-4:], 4); return b[:minPEDirs] }), false, ""},
		{"cut inside the certificate table's entry", signedPE()[:minPESec+6], false, "PE image truncated in its data directories"},
		// Its size, the entry's last field, is all PESigned reads.
		{"cut right after the certificate table's entry", signedPE()[:minPESec+8], true, ""},
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

// A db certificate that is not the db key's is refused before sbsign runs:
// the UKI would carry a signature its certificate cannot verify. The message
// names the certificate given.
func TestSignRefusesAnotherKeysCertificate(t *testing.T) {
	dir := writeSynthetic(t, false)
	unsigned := read(t, dir, output.UKIFile)
	o := signOpts(ArtifactKeyFile)
	o.DBCert = key(ModuleCertFile)
	err := SignOutput(context.Background(), dir, o)
	const want = `db certificate "CN=peerboot TEST module signing key (NOT FOR PRODUCTION),O=peerboot test keys" is not the db key's certificate`
	if err == nil || err.Error() != want {
		t.Fatalf("SignOutput = %v, want %q", err, want)
	}
	if !bytes.Equal(read(t, dir, output.UKIFile), unsigned) {
		t.Error("the UKI was changed")
	}
}

// A disk too small for the UKI is refused, naming the disk, and nothing is
// written in its place (peerboot sign rebuilds disk.img at its published size
// around the signed, larger UKI).
func TestWriteDiskTooSmall(t *testing.T) {
	p := filepath.Join(t.TempDir(), output.DiskFile)
	err := WriteDisk(p, 8<<20, "sha256:"+strings.Repeat("ab", 32), 1700000000, minimalPE(7))
	want := fmt.Sprintf("%s: a 8 MiB disk is too small for a 0 MiB UKI plus the %d MiB report partition", p, image.ReportsSize>>20)
	if err == nil || err.Error() != want {
		t.Fatalf("WriteDisk = %v, want %q", err, want)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s after a refused write: %v, want it absent", p, err)
	}
}
