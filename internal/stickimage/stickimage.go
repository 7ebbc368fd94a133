// Package stickimage makes, for tests, a small disk laid out as the image stage
// lays out a USB stick (FAT32 ESP, FAT16 reports partition) with one self-test
// report already on it, as if the stick had been booted: the fixture of the
// packages that write sticks (flash) and read them back (reportdisk).
package stickimage

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/selftest"
)

// Report is a minimal PASS report of the default recipe started at the given
// RFC 3339 time, encoded as the init writes it.
func Report(t testing.TB, started string) []byte {
	t.Helper()
	r := selftest.New()
	r.Recipe = selftest.RecipeRef{Name: "default", Digest: "sha256:" + strings.Repeat("ab", 32)}
	r.Kernel = selftest.Kernel{Release: "6.1.0-peerboot"}
	r.StartedAt = started
	r.Verdict = selftest.Pass
	b, err := selftest.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Write writes the stick into a temporary directory and returns its path; seed
// derives its GUIDs, so two callers' disks differ.
func Write(t testing.TB, seed string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), output.DiskFile)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	efi := bytes.Repeat([]byte("peerboot UKI "), 200000)
	err = image.WriteDisk(f, image.Disk{
		DiskGUID: image.DeriveGUID(seed, "disk"), Epoch: 1700000000,
		ESP: image.Partition{Size: 40 << 20, GUID: image.DeriveGUID(seed, "esp"), Label: "ESP", VolumeID: 1,
			Files: map[string][]byte{"EFI/BOOT/BOOTX64.EFI": efi}},
		Reports: image.Partition{Size: 32 << 20, GUID: image.DeriveGUID(seed, "reports"), Label: bootproto.ReportsLabel, VolumeID: 2,
			Files: map[string][]byte{"reports/": nil, "report-20250601T120000Z.json": Report(t, "2025-06-01T12:00:00Z")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
