package iso9660

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

const epoch = 1700000000 // 2023-11-14 22:13:20 UTC

// fill is a boot image writer that puts a recognisable pattern at both ends
// of the image, so a misplaced or truncated image shows.
func fill(size int64) func(io.WriterAt) error {
	return func(w io.WriterAt) error {
		if _, err := w.WriteAt([]byte("FIRST"), 0); err != nil {
			return err
		}
		_, err := w.WriteAt([]byte("LAST!"), size-5)
		return err
	}
}

func params(size int64) Params {
	return Params{VolumeID: "PEERBOOT", Epoch: epoch, ImageName: "EFIBOOT.IMG", ImageSize: size, WriteImage: fill(size)}
}

func write(t *testing.T, p Params) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.iso")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(Size(p)); err != nil {
		t.Fatal(err)
	}
	if err := Write(f, p); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != Size(p) {
		t.Fatalf("volume is %d bytes, want %d", st.Size(), Size(p))
	}
	return path
}

func TestReadBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		size      int64
		wantCount uint16
	}{
		{"small image, exact sector count", 1 << 20, 2048},
		{"largest exact count", 0xFFFF * 512 &^ (SectorSize - 1), 0xFFFF &^ 3},
		{"large image, to the end of the volume", 100 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params(tc.size)
			path := write(t, p)
			f, _ := os.Open(path)
			defer f.Close()
			v, err := Open(f, Size(p))
			if err != nil {
				t.Fatal(err)
			}
			if v.VolumeID != "PEERBOOT" || v.Sectors != uint32(Size(p)/SectorSize) || !v.Created.Equal(time.Unix(epoch, 0)) {
				t.Errorf("volume %q, %d sectors, created %s", v.VolumeID, v.Sectors, v.Created)
			}
			if len(v.Boot) != 1 || v.Boot[0] != (BootEntry{Platform: PlatformEFI, Bootable: true, Media: 0, SectorCount: tc.wantCount, LBA: lbaImage}) {
				t.Errorf("boot entries %+v", v.Boot)
			}
			var names []string
			for _, e := range v.Root {
				names = append(names, e.Name)
				if !e.Recorded.Equal(time.Unix(epoch, 0)) {
					t.Errorf("%s recorded %s, want the epoch", e.Name, e.Recorded)
				}
			}
			if strings.Join(names, " ") != "BOOT.CAT EFIBOOT.IMG" || v.Root[1].Size != uint32(tc.size) || v.Root[1].LBA != lbaImage {
				t.Errorf("root %+v", v.Root)
			}
			off, n, err := v.EFIImage()
			if err != nil || off != ImageOffset || n != tc.size {
				t.Fatalf("EFI image at %d, %d bytes (%v), want %d, %d", off, n, err, ImageOffset, tc.size)
			}
			img := make([]byte, n)
			f.ReadAt(img, off)
			if !bytes.HasPrefix(img, []byte("FIRST")) || !bytes.HasSuffix(img, []byte("LAST!")) {
				t.Error("the boot image is not where the catalog says")
			}
		})
	}
}

// TestXorriso has libisofs's reader check the volume: the El Torito report
// must list one UEFI, no-emulation, bootable entry at the image's LBA, and
// the PVD dates must be the epoch.
func TestXorriso(t *testing.T) {
	if _, err := exec.LookPath("xorriso"); err != nil {
		testguard.Skipf(t, "xorriso not installed (make deps installs it); skipping the cross-check")
	}
	p := params(40 << 20)
	path := write(t, p)
	out := xorriso(t, "-indev", path, "-report_el_torito", "plain", "-pvd_info", "-check_media", "--")
	for _, re := range []string{
		`El Torito boot img :\s+1\s+UEFI\s+y\s+none\s+0x0000\s+0x00\s+1\s+23\n`,
		`El Torito img path :\s+1\s+/EFIBOOT.IMG\n`,
		`El Torito cat path : /BOOT.CAT\n`,
		`Volume Id\s+: PEERBOOT\n`,
		`Creation Time: 2023111422132000\n`,
		`Modif. Time  : 2023111422132000\n`,
		`Media region :\s+0 ,\s+20503 , \+ good\n`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("xorriso output lacks %q:\n%s", re, out)
		}
	}
	if strings.Contains(out, "FAILURE") || strings.Contains(out, "SORRY") {
		t.Errorf("xorriso complains:\n%s", out)
	}
	// The image xorriso extracts by its directory record is the one the
	// catalog points at.
	got := filepath.Join(t.TempDir(), "img")
	xorriso(t, "-indev", path, "-osirrox", "on", "-extract", "/EFIBOOT.IMG", got)
	b, err := os.ReadFile(got)
	if err != nil || int64(len(b)) != p.ImageSize || !bytes.HasPrefix(b, []byte("FIRST")) || !bytes.HasSuffix(b, []byte("LAST!")) {
		t.Errorf("extracted image: %d bytes, %v", len(b), err)
	}
}

func xorriso(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("xorriso", args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDeterministic: the bytes depend on Params alone, and the epoch reaches
// them (a writer taking the clock would give the same bytes only by luck).
func TestDeterministic(t *testing.T) {
	sum := func(p Params) [32]byte {
		b, err := os.ReadFile(write(t, p))
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	p := params(4 << 20)
	a, b := sum(p), sum(p)
	if a != b {
		t.Fatal("two writes of the same Params differ")
	}
	p.Epoch++
	if sum(p) == a {
		t.Error("a different epoch gave the same bytes")
	}
}

func TestRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"lower-case volume id", func(p *Params) { p.VolumeID = "peerboot" }, "volume id"},
		{"long volume id", func(p *Params) { p.VolumeID = strings.Repeat("A", 33) }, "volume id"},
		{"long image name", func(p *Params) { p.ImageName = "EFIBOOTIMG.IMG" }, "image name"},
		{"catalog name", func(p *Params) { p.ImageName = "BOOT.CAT" }, "boot catalog"},
		{"odd image size", func(p *Params) { p.ImageSize = 1000 }, "image size"},
		{"no writer", func(p *Params) { p.WriteImage = nil }, "WriteImage"},
		{"epoch before 1970", func(p *Params) { p.Epoch = -1 }, "epoch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := params(1 << 20)
			tc.edit(&p)
			err := Write(discard{}, p)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error about %s", err, tc.want)
			}
		})
	}
}

type discard struct{}

func (discard) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	copy(m.b[off:], p)
	return len(p), nil
}

// FuzzOpen feeds corrupted volumes to the reader: errors are fine, panics
// and hangs are not.
func FuzzOpen(f *testing.F) {
	p := params(64 << 10)
	m := memFile{b: make([]byte, Size(p))}
	if err := Write(&m, p); err != nil {
		f.Fatal(err)
	}
	f.Add(m.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		v.EFIImage()
	})
}
