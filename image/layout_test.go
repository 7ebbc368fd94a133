package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// An overlay-type edit (the initrd's tail rewritten, its size moved within a
// MiB) leaves the standard disk and ISO equal to the previous build's up to
// the UKI: the UKI keeps its size, so the ESP's FAT keeps its clusters, and
// they are the ESP's last data. That is what lets the store resume a disk's
// sha256 from the previous build's midstates near the ESP's end (issue 34).
// The UKI's own headers change (the .initrd's VirtualSize, CheckSum), so the
// first difference is at most the UKI's first byte.
func TestStandardLayoutEditStaysLate(t *testing.T) {
	u := testUKI(t)
	u.Initrd = pattern(3<<20+5000, 2)
	before := buildUKI(t, u)
	v := u
	v.Initrd = append(bytes.Clone(u.Initrd[:len(u.Initrd)-20000]), pattern(23000, 9)...)
	after := buildUKI(t, v)
	if len(before) != len(after) {
		t.Fatalf("UKI %d bytes, before %d: the edit moved its size", len(after), len(before))
	}
	size := MinDiskSize(int64(len(before))) + 64<<20 // an ESP well bigger than the UKI, as the default's
	write := func(uki []byte) (disk, iso []byte) {
		dir := t.TempDir()
		d, err := StandardDisk("sha256:seed", size, 1700000000, uki)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "disk.img"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteDisk(f, d); err != nil {
			t.Fatal(err)
		}
		f.Close()
		g, err := os.Create(filepath.Join(dir, "boot.iso"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteISO(g, StandardISO("sha256:seed", 1700000000, uki)); err != nil {
			t.Fatal(err)
		}
		g.Close()
		disk, _ = os.ReadFile(filepath.Join(dir, "disk.img"))
		iso, _ = os.ReadFile(filepath.Join(dir, "boot.iso"))
		return disk, iso
	}
	d1, i1 := write(before)
	d2, i2 := write(after)
	for _, tc := range []struct {
		name string
		a, b []byte
	}{{"disk", d1, d2}, {"ISO", i1, i2}} {
		at := bytes.Index(tc.a, before)
		if at < 0 || len(tc.a) != len(tc.b) {
			t.Fatalf("%s: UKI at %d, sizes %d and %d", tc.name, at, len(tc.a), len(tc.b))
		}
		first := -1
		for i := range tc.a {
			if tc.a[i] != tc.b[i] {
				first = i
				break
			}
		}
		if first < at {
			t.Errorf("%s: first differing byte at %d, before the UKI at %d", tc.name, first, at)
		}
		t.Logf("%s: %d MiB, UKI at %.1f MiB, first difference at %.1f MiB", tc.name, len(tc.a)>>20, float64(at)/(1<<20), float64(first)/(1<<20))
	}
	if at := bytes.Index(d1, before); int64(at) < size/2 {
		t.Errorf("disk: the UKI starts at %d of %d: not at the ESP's top", at, size)
	}
}
