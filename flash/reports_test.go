package flash

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/image/fat"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/selftest"
)

// These need no root: they work on image files.

func TestReadReportsImage(t *testing.T) {
	img := testImage(t)
	found, err := ReadReports(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Err != nil || found[0].Report.StartedAt != "2025-06-01T12:00:00Z" {
		t.Fatalf("found %+v", found)
	}
	// A disk without a PEERBOOT partition, and a file that is no disk at all.
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, make([]byte, 1<<20), 0o644)
	if _, err := ReadReports(junk); err == nil {
		t.Error("a zero-filled file was read as a disk")
	}
}

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
		"reports/report-20250602T080000Z.json": testReport("2025-06-02T08:00:00Z"),
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
	found, err := ReadReports(img)
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

// FuzzReadReports feeds `peerboot reports` the start of a hostile stick (a
// stick goes to nodes nobody here controls): a GPT naming a PEERBOOT
// partition, or a bare FAT volume, then zeros to 80 MiB. Errors are fine;
// panics, hangs and a report said to decode that is not there are not.
func FuzzReadReports(f *testing.F) {
	const stick = 80 << 20
	w := &memDisk{}
	if _, err := fat.Write(w, fat.Params{Size: 16 << 20, Label: bootproto.ReportsLabel, HiddenSectors: 34, Files: map[string][]byte{
		"reports/": nil, "reports/report-20250601T120000Z.json": testReport("2025-06-01T12:00:00Z"), "x.json": []byte("{}")}}); err != nil {
		f.Fatal(err)
	}
	vol := w.b[:min(len(w.b), 300<<10)] // the system area and the first clusters
	f.Add(append(gptSeed(34, 34+16<<20/512-1, stick/512), vol...))
	f.Add(vol) // a stick formatted FAT without a partition table
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "stick")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, max(int64(len(b)), stick)); err != nil {
			t.Fatal(err)
		}
		found, err := ReadReports(p)
		if err != nil {
			return
		}
		for _, r := range found {
			if (r.Err == nil) != (r.Report != nil) {
				t.Fatalf("%s: report %v, error %v", r.Path, r.Report, r.Err)
			}
		}
	})
}

// gptSeed is LBA 0-33 of a disk of sizeLBA sectors whose one partition,
// PEERBOOT, spans first-last: what the fuzzer starts from (the image stage's
// own layout puts the partition 40 MiB in, too far for a small corpus).
func gptSeed(first, last, sizeLBA uint64) []byte {
	b := make([]byte, 34*512)
	e := b[2*512:]
	copy(e[0:16], "peerboot-reports") // any non-zero type
	copy(e[16:32], "fuzz-partition-1")
	binary.LittleEndian.PutUint64(e[32:], first)
	binary.LittleEndian.PutUint64(e[40:], last)
	for i, c := range utf16.Encode([]rune(bootproto.ReportsLabel)) {
		binary.LittleEndian.PutUint16(e[56+2*i:], c)
	}
	h := b[512:]
	copy(h, "EFI PART")
	binary.LittleEndian.PutUint32(h[8:], 0x00010000)
	binary.LittleEndian.PutUint32(h[12:], 92)
	binary.LittleEndian.PutUint64(h[24:], 1)
	binary.LittleEndian.PutUint64(h[32:], sizeLBA-1)
	binary.LittleEndian.PutUint64(h[40:], 34)
	binary.LittleEndian.PutUint64(h[48:], sizeLBA-34)
	copy(h[56:72], "fuzz-disk-guid-1")
	binary.LittleEndian.PutUint64(h[72:], 2)
	binary.LittleEndian.PutUint32(h[80:], 128)
	binary.LittleEndian.PutUint32(h[84:], 128)
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(e[:128*128]))
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return b
}

// memDisk is an io.WriterAt in memory.
type memDisk struct{ b []byte }

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}
