package image

import (
	"os"
	"path/filepath"
	"testing"
)

// A UKI just under a whole MiB still fits the ISO's ESP: the FAT tables (8
// bytes per 512-byte cluster at this size) come on top of the slack. An 84.7
// MiB UKI (the default recipe's with a TPM-enabled kernel) failed with
// "files do not fit" when the slack alone was added.
func TestStandardISOFitsUKIBelowMiB(t *testing.T) {
	for _, mib := range []int64{70, 85, 120} {
		uki := make([]byte, mib<<20-100<<10)
		f, err := os.Create(filepath.Join(t.TempDir(), "x.iso"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteISO(f, StandardISO(testSeed, 1700000000, uki)); err != nil {
			t.Errorf("a %d-byte UKI: %v", len(uki), err)
		}
		f.Close()
	}
}
