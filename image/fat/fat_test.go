package fat

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// needTool skips when a cross-checking tool is absent (a failure under CI,
// where `make deps` installs dosfstools and mtools).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testguard.Skipf(t, "%s not installed (make deps installs dosfstools mtools); skipping the cross-check", name)
	}
	return p
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func testFiles() map[string][]byte {
	return map[string][]byte{
		"EFI/BOOT/BOOTX64.EFI":               pattern(300000, 1),
		"loader/entries/peerboot.conf":       []byte("title peerboot\n"),
		"A Long File Name With Spaces.txt":   pattern(513, 2),
		"mixedCase.Txt":                      pattern(4096, 3),
		"lower.txt":                          []byte("lower\n"),
		"empty":                              nil,
		"reports/":                           nil,
		"deep/er/and/deeper/file.bin":        pattern(70000, 4),
		"ünïcode-näme.dat":                   []byte("x"),
		"longnamedirectory/another long one": pattern(10, 5),
		"longnamedirectory/another long two": pattern(11, 6),
	}
}

func writeImage(t *testing.T, p Params) (string, Type) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fs.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	typ, err := Write(f, p)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	st, _ := f.Stat()
	if st.Size() != p.Size {
		t.Fatalf("image is %d bytes, want %d", st.Size(), p.Size)
	}
	return path, typ
}

func TestTypes(t *testing.T) {
	for _, tc := range []struct {
		size int64
		req  Type
		want Type
	}{
		{32 << 20, Auto, FAT16},
		{33 << 20, Auto, FAT32},
		{64 << 20, FAT32, FAT32},
		{64 << 20, FAT16, FAT16},
		{512 << 20, Auto, FAT32},
		{4 << 20, Auto, FAT16},
	} {
		g, err := chooseGeometry(tc.req, tc.size)
		if err != nil {
			t.Fatalf("%d %v: %v", tc.size, tc.req, err)
		}
		if g.typ != tc.want {
			t.Errorf("%d MiB %v: got %v, want %v", tc.size>>20, tc.req, g.typ, tc.want)
		}
		if g.typ == FAT32 && g.clusters < minFAT32Clusters || g.typ == FAT16 && (g.clusters >= minFAT32Clusters || g.clusters < minFAT16Clusters) {
			t.Errorf("%d MiB: %v with %d clusters is out of range", tc.size>>20, g.typ, g.clusters)
		}
		if end := uint64(g.dataStart) + uint64(g.clusters)*uint64(g.secPerClus); end > uint64(g.totalSectors) {
			t.Errorf("%d MiB: data runs past the end", tc.size>>20)
		}
	}
	if _, err := chooseGeometry(FAT32, 32<<20); err == nil {
		t.Error("FAT32 on 32 MiB should be refused (too few clusters)")
	}
	if _, err := chooseGeometry(Auto, 1<<20); err == nil {
		t.Error("1 MiB should be refused")
	}
	if _, err := chooseGeometry(Auto, 1000); err == nil {
		t.Error("size not a multiple of 512 should be refused")
	}
}

func TestRejects(t *testing.T) {
	for name, files := range map[string]map[string][]byte{
		"dotdot":     {"a/../b": nil},
		"empty comp": {"a//b": []byte("x")},
		"bad char":   {"a:b": []byte("x")},
		"case clash": {"A.TXT": nil, "a.txt": nil},
		"file+dir":   {"a": []byte("x"), "a/b": []byte("y")},
		"dir data":   {"d/": []byte("x")},
	} {
		_, err := Write(discard{}, Params{Size: 8 << 20, Files: files})
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Write(discard{}, Params{Size: 8 << 20, Files: map[string][]byte{"big": make([]byte, 9<<20)}}); err == nil {
		t.Error("file larger than the volume accepted")
	}
	if _, err := Write(discard{}, Params{Size: 8 << 20, Label: "WAY TOO LONG LABEL"}); err == nil {
		t.Error("long label accepted")
	}
}

type discard struct{}

func (discard) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

func TestShortNames(t *testing.T) {
	sn, nt, ok := plainShort("BOOTX64.EFI")
	if !ok || string(sn[:]) != "BOOTX64 EFI" || nt != 0 {
		t.Errorf("BOOTX64.EFI -> %q %x %v", sn, nt, ok)
	}
	sn, nt, ok = plainShort("lower.txt")
	if !ok || string(sn[:]) != "LOWER   TXT" || nt != 0x18 {
		t.Errorf("lower.txt -> %q %x %v", sn, nt, ok)
	}
	if _, _, ok = plainShort("mixedCase.txt"); ok {
		t.Error("mixedCase.txt must need a long name")
	}
	used := map[[11]byte]bool{}
	a, _ := aliasShort("another long one", used)
	used[a] = true
	b, _ := aliasShort("another long two", used)
	if string(a[:]) != "ANOTHE~1   " || string(b[:]) != "ANOTHE~2   " {
		t.Errorf("aliases %q %q", a, b)
	}
}

// TestFsckAndMtools formats both FAT types and has the reference tools
// check the result and read every file back.
func TestFsckAndMtools(t *testing.T) {
	needTool(t, "fsck.vfat")
	needTool(t, "mcopy")
	for _, tc := range []struct {
		size int64
		typ  Type
	}{{64 << 20, FAT32}, {32 << 20, FAT16}, {300 << 20, FAT32}} {
		files := testFiles()
		path, typ := writeImage(t, Params{Size: tc.size, Label: "PEERBOOT", VolumeID: 0x1234ABCD, Epoch: 1700000000, Files: files})
		if typ != tc.typ {
			t.Fatalf("%d MiB: got %v want %v", tc.size>>20, typ, tc.typ)
		}
		out := run(t, "fsck.vfat", "-n", "-v", path)
		if strings.Contains(out, "differences between boot sector and its backup") || strings.Contains(strings.ToLower(out), "free cluster summary wrong") {
			t.Errorf("fsck.vfat complained:\n%s", out)
		}
		info := run(t, "minfo", "-i", path, "::")
		if !strings.Contains(info, "PEERBOOT") || !strings.Contains(info, "serial number: 1234ABCD") {
			t.Errorf("minfo does not show the label and volume id:\n%s", info)
		}
		dir := t.TempDir()
		run(t, "mcopy", "-s", "-n", "-i", path, "::/", dir)
		for name, want := range files {
			if strings.HasSuffix(name, "/") {
				st, err := os.Stat(filepath.Join(dir, name))
				if err != nil || !st.IsDir() {
					t.Errorf("directory %s missing after mcopy: %v", name, err)
				}
				continue
			}
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: content differs (got %d bytes, want %d)", name, len(got), len(want))
			}
		}
		listing := run(t, "mdir", "-i", path, "::/EFI/BOOT")
		if !strings.Contains(listing, "BOOTX64  EFI    300000") {
			t.Errorf("mdir listing:\n%s", listing)
		}
	}
}

func TestDeterministic(t *testing.T) {
	p := Params{Size: 40 << 20, Label: "ESP", VolumeID: 7, Epoch: 1, Files: testFiles()}
	a, _ := writeImage(t, p)
	b, _ := writeImage(t, p)
	ha, hb := hashFile(t, a), hashFile(t, b)
	if ha != hb {
		t.Fatalf("two writes differ: %x vs %x", ha, hb)
	}
	p.VolumeID = 8
	c, _ := writeImage(t, p)
	if hashFile(t, c) == ha {
		t.Fatal("volume id does not reach the image")
	}
}

func hashFile(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestFatTime(t *testing.T) {
	d, tm, tenths := fatTime(0)
	if d != 1<<5|1 || tm != 0 || tenths != 0 {
		t.Errorf("epoch 0 -> %x %x %d, want clamp to 1980-01-01", d, tm, tenths)
	}
	// 2023-11-14 22:13:21 UTC
	d, tm, tenths = fatTime(1700000001)
	if d != uint16(43<<9|11<<5|14) || tm != uint16(22<<11|13<<5|10) || tenths != 100 {
		t.Errorf("got %x %x %d", d, tm, tenths)
	}
}
