package flash

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/image/fat"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/internal/stickimage"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/reportdisk"
	"github.com/peerboot/peerboot/selftest"
)

// These need no root: they work on image files.

func TestGrowReportsFile(t *testing.T) {
	img := testImage(t)
	// A second report, in reports/, and one that does not decode.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := image.ReadGPT(f)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := g.Find(bootproto.ReportsLabel)
	f.Close()
	addFiles(t, img, p, map[string][]byte{
		"reports/report-20250602T080000Z.json": stickimage.Report(t, "2025-06-02T08:00:00Z"),
		"report-broken.json":                   []byte("{not json"),
	})

	// The "stick" is 300 MiB; the image was written at its start.
	if err := os.Truncate(img, 300<<20); err != nil {
		t.Fatal(err)
	}
	res, err := GrowReports(img, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Type != fat.FAT32 || res.NewSize != (300-1-41)<<20 || res.Kept != 3 {
		t.Errorf("grow: %+v", res)
	}
	if _, err := exec.LookPath("sgdisk"); err == nil {
		out, _ := exec.Command("sgdisk", "-v", img).CombinedOutput()
		if !strings.Contains(string(out), "No problems found") {
			t.Errorf("sgdisk -v after growing:\n%s", out)
		}
	}
	if _, err := exec.LookPath("fsck.vfat"); err == nil {
		f, _ := os.Open(img)
		g, err := image.ReadGPT(f)
		if err != nil {
			t.Fatal(err)
		}
		grown, _ := g.Find(bootproto.ReportsLabel)
		part := filepath.Join(t.TempDir(), "part")
		b := make([]byte, grown.Size())
		f.ReadAt(b, grown.Offset())
		f.Close()
		os.WriteFile(part, b, 0o644)
		if out, err := exec.Command("fsck.vfat", "-n", part).CombinedOutput(); err != nil {
			t.Errorf("fsck.vfat -n on the grown partition: %v\n%s", err, out)
		}
	}
	found, err := reportdisk.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fd := range found {
		names = append(names, fd.Path)
		if (fd.Err != nil) != (fd.Path == "report-broken.json") {
			t.Errorf("%s: err %v", fd.Path, fd.Err)
		}
		if fd.Report != nil && fd.Report.Verdict != selftest.Pass {
			t.Errorf("%s: verdict %s", fd.Path, fd.Report.Verdict)
		}
	}
	if strings.Join(names, " ") != "report-20250601T120000Z.json reports/report-20250602T080000Z.json report-broken.json" {
		t.Errorf("reports after growing, in order: %v", names)
	}
}

// addFiles re-creates the partition's filesystem with extra files (the test's
// stand-in for a booted stick's kernel writing reports).
func addFiles(t *testing.T, img string, p image.GPTPartition, extra map[string][]byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old, err := fatread.Open(sectionOf(f, p), p.Size())
	if err != nil {
		t.Fatal(err)
	}
	files, err := old.Files()
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range extra {
		files[k] = v
	}
	delete(files, "reports/")
	if _, err := fat.Write(offsetWriter(f, p), fat.Params{Size: p.Size(), Label: bootproto.ReportsLabel, VolumeID: old.VolumeID(), Epoch: 1700000000, Files: files}); err != nil {
		t.Fatal(err)
	}
}

func sectionOf(f *os.File, p image.GPTPartition) *io.SectionReader {
	return io.NewSectionReader(f, p.Offset(), p.Size())
}

func offsetWriter(f *os.File, p image.GPTPartition) *io.OffsetWriter {
	return io.NewOffsetWriter(f, p.Offset())
}

// A disk past 2 TiB (a USB SSD) cannot hold one FAT32 of its whole size (a
// FAT counts sectors in 32 bits): the grow stops at the largest FAT32
// rather than rewriting the table for a filesystem it then cannot write,
// which left the stick's partition table grown, the command failed and the
// reports said to be lost.
func TestGrowReportsPast2TiB(t *testing.T) {
	testguard.Short(t, "writes a 512 MiB FAT into a sparse 3 TiB file")
	img := testImage(t)
	if err := os.Truncate(img, 3<<40); err != nil {
		testguard.Skipf(t, "no sparse 3 TiB file here: %v", err)
	}
	res, err := GrowReports(img, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Type != fat.FAT32 || res.NewSize > 0xFFFFFFFF*512 || res.NewSize < 2<<40-2<<30 || res.Kept != 1 {
		t.Errorf("grow: %+v", res)
	}
	if _, err := exec.LookPath("sgdisk"); err == nil {
		out, _ := exec.Command("sgdisk", "-v", img).CombinedOutput()
		if !strings.Contains(string(out), "No problems found") {
			t.Errorf("sgdisk -v after growing:\n%s", out)
		}
	}
	found, err := reportdisk.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Err != nil {
		t.Errorf("reports after growing: %+v", found)
	}
}
