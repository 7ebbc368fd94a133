package fat

import (
	"bytes"
	"os"
	"testing"
)

// The first file of the walk is the volume's last data (a later one, zz/,
// lies below it) and keeps its clusters while its size stays: two volumes
// whose big file differs only in its tail are equal up to the first
// differing byte of the file (what lets the store resume a disk's hash late,
// issue 34), and a file one cluster longer moves down by one.
func TestFilesFromTheTop(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  Type
		size int64
	}{
		{"FAT32", FAT32, 40 << 20},
		{"FAT16", FAT16, 16 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			big := pattern(3<<20+123, 7)
			files := func(b []byte) map[string][]byte {
				return map[string][]byte{"EFI/BOOT/BOOTX64.EFI": b, "zz/small.txt": []byte("small\n"), "reports/": nil}
			}
			p := Params{Size: tc.size, Type: tc.typ, Label: "T", VolumeID: 1, Epoch: 1700000000}
			p.Files = files(big)
			a := readImage(t, p)
			edited := bytes.Clone(big)
			edited[len(edited)-100] ^= 0xFF
			p.Files = files(edited)
			b := readImage(t, p)
			at := bytes.Index(a, big)
			if at < 0 {
				t.Fatal("the file is not contiguous in the volume")
			}
			g, err := chooseGeometry(tc.typ, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			cs := int64(g.clusterSize)
			dataEnd := int64(g.dataStart)*sectorSize + int64(g.clusters)*cs
			if end := int64(at) + (int64(len(big))+cs-1)/cs*cs; end != dataEnd {
				t.Errorf("the file's last cluster ends at %d, the data area at %d: not allocated from the top", end, dataEnd)
			}
			if d := firstDiff(a, b); d != at+len(big)-100 {
				t.Errorf("first differing byte at %d, want the edited one at %d", d, at+len(big)-100)
			}
			p.Files = files(append(bytes.Clone(big), pattern(int(cs), 9)...))
			c := readImage(t, p)
			if at2 := bytes.Index(c, big); at2 != at-int(cs) {
				t.Errorf("a file one cluster longer starts at %d, want %d", at2, at-int(cs))
			}
		})
	}
}

func readImage(t *testing.T, p Params) []byte {
	t.Helper()
	path, _ := writeImage(t, p)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
