package reportdisk

import (
	"encoding/binary"
	"github.com/peerboot/peerboot/internal/stickimage"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf16"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image/fat"
)

// testImage is a small stick with one report on it (internal/stickimage).
func testImage(t *testing.T) string { return stickimage.Write(t, "sha256:reportdisk-test") }

func TestRead(t *testing.T) {
	img := testImage(t)
	found, err := Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Err != nil || found[0].Report.StartedAt != "2025-06-01T12:00:00Z" {
		t.Fatalf("found %+v", found)
	}
	// A disk without a PEERBOOT partition, and a file that is no disk at all.
	junk := filepath.Join(t.TempDir(), "junk")
	os.WriteFile(junk, make([]byte, 1<<20), 0o644)
	if _, err := Read(junk); err == nil {
		t.Error("a zero-filled file was read as a disk")
	}
	// A file shorter than a GPT header is said to be no disk, not "EOF".
	short := filepath.Join(t.TempDir(), "short.txt")
	os.WriteFile(short, []byte("hello\n"), 0o644)
	if _, err := Read(short); err == nil || err.Error() != short+": not a disk image: 6 bytes, too small for a partition table or a FAT volume" {
		t.Errorf("a 6-byte file: %v", err)
	}
}

// FuzzRead feeds `peerboot reports` the start of a hostile stick (a
// stick goes to nodes nobody here controls): a GPT naming a PEERBOOT
// partition, or a bare FAT volume, then zeros to 80 MiB. Errors are fine;
// panics, hangs and a report said to decode that is not there are not.
func FuzzRead(f *testing.F) {
	const stick = 80 << 20
	w := &memDisk{}
	if _, err := fat.Write(w, fat.Params{Size: 16 << 20, Label: bootproto.ReportsLabel, HiddenSectors: 34, Files: map[string][]byte{
		"reports/": nil, "reports/report-20250601T120000Z.json": stickimage.Report(f, "2025-06-01T12:00:00Z"), "x.json": []byte("{}")}}); err != nil {
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
		found, err := Read(p)
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
