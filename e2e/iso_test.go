package e2e

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// The default image's ISO, as an operator would mount it through a BMC:
// xorriso lists its one UEFI El Torito entry and dates it at the build's
// epoch, its ESP boots exactly peerboot.efi, the image stage rebuilt from
// empty (another TZ, seconds later) gives the same bytes, and OVMF boots it
// as a CD-ROM, with no disk attached, to a pass verdict read from the serial
// console.
func TestISOBootsFromCDROM(t *testing.T) {
	testguard.Short(t, "builds the default image (a store hit after TestBuildAndBootDefault) and boots it in QEMU")
	if _, err := exec.LookPath("xorriso"); err != nil {
		testguard.Skipf(t, "xorriso not installed (make deps installs it)")
	}
	outRoot := t.TempDir()
	fetchBuildDefault(t, outRoot)
	dir := filepath.Join(outRoot, "default")
	isoPath := filepath.Join(dir, "peerboot.iso")
	info, err := os.Stat(isoPath)
	if err != nil {
		t.Fatalf("the default recipe's output lacks peerboot.iso: %v", err)
	}
	var m struct {
		Epoch int64 `json:"source_date_epoch"`
	}
	mj, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(mj, &m); err != nil || m.Epoch == 0 {
		t.Fatalf("manifest.json: source_date_epoch %d (%v)", m.Epoch, err)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if !strings.Contains(string(sums), "  peerboot.iso\n") {
		t.Errorf("SHA256SUMS does not list peerboot.iso:\n%s", sums)
	}

	cmd := exec.Command("xorriso", "-indev", isoPath, "-report_el_torito", "plain", "-pvd_info")
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	xo, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, xo)
	}
	t.Logf("xorriso -report_el_torito plain -pvd_info:\n%s", xo)
	date := time.Unix(m.Epoch, 0).UTC().Format("20060102150405") + "00"
	for _, re := range []string{
		`El Torito boot img :\s+1\s+UEFI\s+y\s+none\s+0x0000\s+0x00\s+1\s+23\n`,
		`El Torito img path :\s+1\s+/EFIBOOT.IMG\n`,
		`Volume Id\s+: PEERBOOT\n`,
		`Creation Time: ` + date + `\n`,
		`Modif. Time  : ` + date + `\n`,
	} {
		if !regexp.MustCompile(re).Match(xo) {
			t.Errorf("xorriso's report lacks %q", re)
		}
	}
	f, err := os.Open(isoPath)
	if err != nil {
		t.Fatal(err)
	}
	inISO, err := image.ISOUKI(f, info.Size())
	f.Close()
	uki, _ := os.ReadFile(filepath.Join(dir, "peerboot.efi"))
	if err != nil || len(uki) == 0 || !bytes.Equal(inISO, uki) {
		t.Errorf("the ISO's ESP does not hold peerboot.efi (%v)", err)
	}

	// go-diskfs, independently of our readers, finds the same UKI in the
	// published disk's ESP and in the ISO's.
	for _, img := range []struct{ path, esp string }{{filepath.Join(dir, "disk.img"), ""}, {isoPath, image.ISOImageName}} {
		if got := diskfsUKI(t, img.path, img.esp); !bytes.Equal(got, uki) {
			t.Errorf("go-diskfs reads a %d-byte %s from %s, not peerboot.efi", len(got), image.UKIPath, filepath.Base(img.path))
		}
	}

	// A second build of the image stage, from empty, in another time zone and
	// at a later second, must give the same ISO bytes as the store holds.
	t.Setenv("TZ", "Asia/Shanghai")
	out, code := peerboot(t, "build", "--out", filepath.Join(t.TempDir(), "again"), "--check", "image")
	if code != 0 {
		t.Fatalf("build --check image: exit %d (the image stage built again differs):\n%s", code, out)
	}

	report := filepath.Join(t.TempDir(), "report.json")
	out, code = peerboot(t, "run", "--iso", "--report", report, dir)
	t.Logf("run --iso:\n%s", out)
	if code != 0 {
		t.Fatalf("run --iso: exit %d", code)
	}
	console, _ := os.ReadFile(filepath.Join(dir, "console-iso.log"))
	if !regexp.MustCompile(`BdsDxe: loading Boot[0-9A-F]{4} "UEFI QEMU DVD-ROM`).Match(console) {
		t.Errorf("the console does not show OVMF booting the DVD-ROM:\n%s", tailLines(string(console), 40))
	}
	r := readReport(t, report)
	if r.Verdict != selftest.Pass {
		t.Errorf("verdict %s, findings %+v", r.Verdict, r.Findings)
	}
}

func tailLines(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// diskfsUKI reads the UKI with go-diskfs: from the GPT disk's first
// partition, or (espFile set) from that file of the ISO, opened as FAT.
func diskfsUKI(t *testing.T, path, espFile string) []byte {
	t.Helper()
	opts := []diskfs.OpenOpt{diskfs.WithOpenMode(diskfs.ReadOnly)}
	if espFile != "" {
		opts = append(opts, diskfs.WithSectorSize(2048))
	}
	d, err := diskfs.Open(path, opts...)
	if err != nil {
		t.Fatalf("go-diskfs: %s: %v", path, err)
	}
	defer d.Close()
	part := 1
	if espFile != "" {
		part = 0
	}
	fsys, err := d.GetFilesystem(part)
	if err != nil {
		t.Fatalf("go-diskfs: %s: %v", path, err)
	}
	if espFile != "" {
		esp, err := fs.ReadFile(fsys, espFile)
		if err != nil {
			t.Fatalf("go-diskfs: %s: %v", espFile, err)
		}
		p := filepath.Join(t.TempDir(), "esp.img")
		if err := os.WriteFile(p, esp, 0o644); err != nil {
			t.Fatal(err)
		}
		return diskfsUKIFromFAT(t, p)
	}
	b, err := fs.ReadFile(fsys, image.UKIPath)
	if err != nil {
		t.Fatalf("go-diskfs: %s: %v", image.UKIPath, err)
	}
	return b
}

func diskfsUKIFromFAT(t *testing.T, path string) []byte {
	t.Helper()
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatalf("go-diskfs: %v", err)
	}
	defer d.Close()
	fsys, err := d.GetFilesystem(0)
	if err != nil {
		t.Fatalf("go-diskfs: the ISO's ESP: %v", err)
	}
	b, err := fs.ReadFile(fsys, image.UKIPath)
	if err != nil {
		t.Fatalf("go-diskfs: the ISO's ESP: %v", err)
	}
	return b
}
