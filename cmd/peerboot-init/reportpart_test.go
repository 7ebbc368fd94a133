package main

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

// fatImage makes a FAT file system image with mkfs.vfat, as the image stage's report
// partition would be.
func fatImage(t *testing.T, label string, fat32 bool) string {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.vfat")
	if err != nil {
		testguard.Skip(t, "mkfs.vfat not installed (make deps installs dosfstools)")
	}
	p := filepath.Join(t.TempDir(), "part.img")
	args := []string{"-C", "-n", label, p, "2048"}
	if fat32 {
		args = []string{"-C", "-F", "32", "-n", label, p, "40960"}
	}
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v\n%s", err, out)
	}
	return p
}

func TestFindLabeled(t *testing.T) {
	fat16 := fatImage(t, "PEERBOOT", false)
	fat32 := fatImage(t, "PEERBOOT", true)
	esp := fatImage(t, "ESP", true)
	notFAT := filepath.Join(t.TempDir(), "zero.img")
	writeFile(t, notFAT, strings.Repeat("\x00", 4096))
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xAA // a protective MBR also ends in 55 AA
	writeFile(t, filepath.Join(filepath.Dir(notFAT), "mbr.img"), string(mbr))

	for _, tt := range []struct {
		name    string
		devices []string
		want    string
	}{
		{"fat12/16", []string{notFAT, esp, fat16}, fat16},
		{"fat32", []string{filepath.Join(filepath.Dir(notFAT), "mbr.img"), "/nonexistent", fat32}, fat32},
		{"none", []string{notFAT, esp}, ""},
	} {
		got, err := findLabeled(tt.devices, "PEERBOOT")
		if got != tt.want || (tt.want == "") != (err != nil) {
			t.Errorf("%s: findLabeled = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	b, _ := os.ReadFile(esp)
	if l, ok := fatLabel(b[:512]); !ok || l != "ESP" {
		t.Errorf("fatLabel(esp) = %q, %v", l, ok)
	}
}

func TestBlockDevices(t *testing.T) {
	proc := t.TempDir()
	writeFile(t, filepath.Join(proc, "partitions"), `major minor  #blocks  name

 254        0     524288 vda
 254        1     262144 vda1
 254        2      65536 vda2
   1        0       4096 ram0
   7        0       1024 loop0
`)
	got, err := blockDevices(proc, "/dev")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "/dev/vda /dev/vda1 /dev/vda2" {
		t.Errorf("blockDevices = %v", got)
	}
}

func TestWaitForLabeled(t *testing.T) {
	img := fatImage(t, "PEERBOOT", false)
	calls := 0
	list := func() ([]string, error) {
		calls++
		if calls < 3 { // the disk appears on the third look, as a slow USB stick would
			return nil, os.ErrNotExist
		}
		return []string{img}, nil
	}
	got, err := waitForLabeled(list, "PEERBOOT", time.Minute, func(time.Duration) {})
	if err != nil || got != img || calls != 3 {
		t.Errorf("got %q, %v after %d calls", got, err, calls)
	}
	_, err = waitForLabeled(func() ([]string, error) { return nil, nil }, "PEERBOOT", 0, func(time.Duration) {})
	if err == nil {
		t.Error("no devices: want an error")
	}
}

func FuzzFatLabel(f *testing.F) {
	sector := make([]byte, 512)
	copy(sector[11:], []byte{0, 2, 4})
	sector[0x26] = 0x29
	copy(sector[0x2B:], "PEERBOOT   ")
	sector[510], sector[511] = 0x55, 0xAA
	f.Add(sector)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, ok := fatLabel(b)
		if len(l) > 11 || (!ok && l != "") {
			t.Fatalf("fatLabel = %q, %v", l, ok)
		}
	})
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	r := selftest.New()
	r.StartedAt = "2025-06-01T12:00:00Z"
	p1, err := writeReport(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := writeReport(dir, r)
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
}
