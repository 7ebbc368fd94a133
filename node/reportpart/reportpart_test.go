package reportpart

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// fatImage makes a FAT16 or FAT32 image with mkfs.vfat (an independent writer), as the
// image stage's report partition, or a stick formatted elsewhere, would be.
func fatImage(t *testing.T, label string, fat32 bool) string {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.vfat")
	if err != nil {
		testguard.Skip(t, "mkfs.vfat not installed (make deps installs dosfstools)")
	}
	p := filepath.Join(t.TempDir(), "part.img")
	args := []string{"-C", "-F", "16", "-n", label, p, "16384"}
	if fat32 {
		args = []string{"-C", "-F", "32", "-n", label, p, "40960"}
	}
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v\n%s", err, out)
	}
	return p
}

func TestFind(t *testing.T) {
	fat16 := fatImage(t, "PEERBOOT", false)
	fat32 := fatImage(t, "peerboot", true)
	esp := fatImage(t, "ESP", true)
	dir := t.TempDir()
	zero, mbrImg := filepath.Join(dir, "zero.img"), filepath.Join(dir, "mbr.img")
	os.WriteFile(zero, make([]byte, 4096), 0o644)
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xAA // a protective MBR also ends in 55 AA
	os.WriteFile(mbrImg, mbr, 0o644)

	for _, tt := range []struct {
		name    string
		devices []string
		want    string
	}{
		{"fat16", []string{zero, esp, fat16}, fat16},
		{"fat32, label in another case", []string{mbrImg, "/nonexistent", fat32}, fat32},
		{"none", []string{zero, mbrImg, esp}, ""},
	} {
		got, err := Find(tt.devices, "PEERBOOT")
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("%s: Find = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if l, err := Label(esp); err != nil || l != "ESP" {
		t.Errorf("Label(esp) = %q, %v", l, err)
	}
	if _, err := Label(mbrImg); err == nil {
		t.Error("Label(an MBR) = no error")
	}
}

func TestBlockDevices(t *testing.T) {
	proc := t.TempDir()
	os.WriteFile(filepath.Join(proc, "partitions"), []byte(`major minor  #blocks  name

 254        0     524288 vda
 254        1     262144 vda1
 254        2      65536 vda2
   1        0       4096 ram0
   7        0       1024 loop0
`), 0o644)
	got, err := BlockDevices(proc, "/dev")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "/dev/vda /dev/vda1 /dev/vda2" {
		t.Errorf("BlockDevices = %v", got)
	}
}

func TestWait(t *testing.T) {
	img := fatImage(t, "PEERBOOT", false)
	calls := 0
	list := func() ([]string, error) {
		calls++
		if calls < 3 { // the disk appears on the third look, as a slow USB stick would
			return nil, os.ErrNotExist
		}
		return []string{img}, nil
	}
	got, err := Wait(list, "PEERBOOT", time.Minute, func(time.Duration) {})
	if err != nil || got != img || calls != 3 {
		t.Errorf("got %q, %v after %d calls", got, err, calls)
	}
	_, err = Wait(func() ([]string, error) { return nil, nil }, "PEERBOOT", 0, func(time.Duration) {})
	if err == nil {
		t.Error("no devices: want an error")
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r := selftest.New()
	r.StartedAt = "2025-06-01T12:00:00Z"
	p1, err := Write(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Write(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p1) != "report-20250601T120000Z.json" || filepath.Base(p2) != "report-20250601T120000Z-1.json" {
		t.Errorf("names %s %s", p1, p2)
	}
	b, _ := os.ReadFile(p1)
	if _, err := selftest.Decode(b); err != nil {
		t.Error(err)
	}
	if FileName("") != "report-unknown.json" {
		t.Errorf("FileName(\"\") = %s", FileName(""))
	}
}
