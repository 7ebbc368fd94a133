package image

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

func needTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			testguard.Skipf(t, "%s not installed (make deps installs gdisk fdisk dosfstools mtools); skipping the cross-check", n)
		}
	}
}

func tool(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

const testSeed = "sha256:0123456789abcdef"

func testDisk() Disk {
	return Disk{
		DiskGUID: DeriveGUID(testSeed, "disk"),
		ESP: Partition{
			Size: 64 << 20, GUID: DeriveGUID(testSeed, "esp"), Label: "ESP",
			VolumeID: DeriveVolumeID(testSeed, "esp"),
			Files:    map[string][]byte{"EFI/BOOT/BOOTX64.EFI": pattern(1500001, 9)},
		},
		Reports: Partition{
			Size: 32 << 20, GUID: DeriveGUID(testSeed, "reports"), Label: "PEERBOOT",
			VolumeID: DeriveVolumeID(testSeed, "reports"),
		},
		Epoch: 1700000000,
	}
}

func writeDisk(t *testing.T, path string, d Disk) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := WriteDisk(f, d); err != nil {
		t.Fatalf("WriteDisk: %v", err)
	}
}

func extract(t *testing.T, disk string, off, size int64) string {
	t.Helper()
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "part.img")
	if err := os.WriteFile(p, b[off:off+size], 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteDiskTools(t *testing.T) {
	needTools(t, "sgdisk", "fdisk", "fsck.vfat", "mdir", "mtype", "minfo")
	d := testDisk()
	disk := filepath.Join(t.TempDir(), "disk.raw")
	writeDisk(t, disk, d)
	st, _ := os.Stat(disk)
	if want := int64(98 << 20); st.Size() != want { // 1 + 64 + 32 + 1 MiB
		t.Errorf("auto size %d, want %d", st.Size(), want)
	}

	if out := tool(t, "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v:\n%s", out)
	}
	out := tool(t, "sgdisk", "-p", disk)
	if !strings.Contains(out, "Disk identifier (GUID): "+GUIDString(d.DiskGUID)) {
		t.Errorf("sgdisk -p does not show disk GUID %s:\n%s", GUIDString(d.DiskGUID), out)
	}
	for _, want := range []string{"2048", "EF00  ESP", "0700  PEERBOOT", "Partitions will be aligned on 2048-sector boundaries"} {
		if !strings.Contains(out, want) {
			t.Errorf("sgdisk -p lacks %q:\n%s", want, out)
		}
	}
	for i, p := range []Partition{d.ESP, d.Reports} {
		info := tool(t, "sgdisk", "-i", string(rune('1'+i)), disk)
		if !strings.Contains(info, "Partition unique GUID: "+GUIDString(p.GUID)) {
			t.Errorf("partition %d GUID mismatch:\n%s", i+1, info)
		}
	}
	out = tool(t, "fdisk", "-l", disk)
	for _, want := range []string{"Disklabel type: gpt", "EFI System", "Microsoft basic data"} {
		if !strings.Contains(out, want) {
			t.Errorf("fdisk -l lacks %q:\n%s", want, out)
		}
	}

	esp := extract(t, disk, 1<<20, d.ESP.Size)
	rep := extract(t, disk, 65<<20, d.Reports.Size)
	for _, p := range []string{esp, rep} {
		tool(t, "fsck.vfat", "-n", p) // non-zero exit on any inconsistency
	}
	if out := tool(t, "fsck.vfat", "-n", "-v", esp); !strings.Contains(out, "32 bit entries") {
		t.Errorf("ESP is not FAT32:\n%s", out)
	}
	if out := tool(t, "fsck.vfat", "-n", "-v", rep); !strings.Contains(out, "16 bit entries") {
		t.Errorf("reports partition is not FAT16:\n%s", out)
	}
	if out := tool(t, "mdir", "-i", esp, "::/EFI/BOOT"); !strings.Contains(out, "BOOTX64  EFI   1500001") {
		t.Errorf("mdir ::/EFI/BOOT:\n%s", out)
	}
	if got := tool(t, "mtype", "-i", esp, "::/EFI/BOOT/BOOTX64.EFI"); got != string(d.ESP.Files["EFI/BOOT/BOOTX64.EFI"]) {
		t.Errorf("mtype read back %d bytes that differ from the input", len(got))
	}
	if out := tool(t, "minfo", "-i", rep, "::"); !strings.Contains(out, `disk label="PEERBOOT   "`) {
		t.Errorf("reports label:\n%s", out)
	}
	if _, err := exec.LookPath("blkid"); err == nil {
		out := tool(t, "blkid", "-p", rep)
		if !strings.Contains(out, `LABEL="PEERBOOT"`) || !strings.Contains(out, `TYPE="vfat"`) {
			t.Errorf("blkid -p:\n%s", out)
		}
	}
}

func TestWriteDiskReproducible(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.raw"), filepath.Join(dir, "b.raw")
	writeDisk(t, a, testDisk())
	// b starts as junk: WriteDisk must not let old bytes through.
	if err := os.WriteFile(b, bytes.Repeat([]byte{0xA5}, 100<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	writeDisk(t, b, testDisk())
	ha, hb := fileHash(t, a), fileHash(t, b)
	if ha != hb {
		t.Fatalf("two writes differ: %x vs %x", ha, hb)
	}
	d := testDisk()
	d.Epoch++
	writeDisk(t, b, d)
	if fileHash(t, b) == ha {
		t.Error("Epoch does not reach the image")
	}
}

func fileHash(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestWriteDiskRejects(t *testing.T) {
	cases := map[string]func(d *Disk){
		"zero disk GUID": func(d *Disk) { d.DiskGUID = [16]byte{} },
		"zero part GUID": func(d *Disk) { d.ESP.GUID = [16]byte{} },
		"same GUIDs":     func(d *Disk) { d.Reports.GUID = d.ESP.GUID },
		"too small":      func(d *Disk) { d.Size = 96 << 20 },
		"odd size":       func(d *Disk) { d.Size = 200<<20 + 1 },
		"ESP too small":  func(d *Disk) { d.ESP.Size = 16 << 20 },
		"unaligned part": func(d *Disk) { d.Reports.Size = 1000 },
		"file too big":   func(d *Disk) { d.ESP.Files = map[string][]byte{"big": make([]byte, 70<<20)} },
		"long GPT name":  func(d *Disk) { d.Reports.Label = strings.Repeat("x", 37) },
	}
	for name, mutate := range cases {
		d := testDisk()
		mutate(&d)
		f, err := os.Create(filepath.Join(t.TempDir(), "d.raw"))
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteDisk(f, d); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
		f.Close()
	}
}

// TestWriteDiskGolden pins the bytes of testDisk: a refactor of the GPT, FAT or
// disk writers that changes one byte fails here (run with -update after a
// deliberate layout change, and say why in the commit).
func TestWriteDiskGolden(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d.raw")
	writeDisk(t, p, testDisk())
	got := fmt.Sprintf("%x\n", fileHash(t, p))
	golden := filepath.Join("testdata", "disk.sha256.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./image -run TestWriteDiskGolden -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("disk sha256 %s, golden %s", strings.TrimSpace(got), strings.TrimSpace(string(want)))
	}
}
