package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadGPTAndGrow(t *testing.T) {
	d := testDisk()
	disk := filepath.Join(t.TempDir(), "disk.raw")
	writeDisk(t, disk, d)
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := ReadGPT(f)
	if err != nil {
		t.Fatalf("ReadGPT: %v", err)
	}
	if g.DiskGUID != d.DiskGUID || g.SizeLBA != 98<<11 || len(g.Partitions) != 2 {
		t.Fatalf("got disk %s, %d sectors, %d partitions", GUIDString(g.DiskGUID), g.SizeLBA, len(g.Partitions))
	}
	rep, ok := g.Find("peerboot")
	if !ok || rep.Offset() != 65<<20 || rep.Size() != 32<<20 || rep.GUID != d.Reports.GUID || rep.Type != GUIDTypeBasicData {
		t.Fatalf("PEERBOOT partition: %+v, found %v", rep, ok)
	}

	// Grow the disk to 200 MiB and the last partition to fill it.
	const size = 200 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	last := LastUsableLBA(size / 512)
	if err := g.SetLastLBA(rep.Index, last); err != nil {
		t.Fatal(err)
	}
	if err := g.SetLastLBA(0, last); err == nil {
		t.Error("growing the ESP over the reports partition was allowed")
	}
	if err := g.Write(f, size/512); err != nil {
		t.Fatal(err)
	}
	needTools(t, "sgdisk")
	if out := tool(t, "sgdisk", "-v", disk); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v after growing:\n%s", out)
	}
	g2, err := ReadGPT(f)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := g2.Find("PEERBOOT"); p.LastLBA != last || g2.SizeLBA != size/512 {
		t.Errorf("after growing: %+v, %d sectors", p, g2.SizeLBA)
	}
	if err := g.Write(f, 100); err == nil {
		t.Error("writing the grown table for a smaller disk was allowed")
	}
}

func TestReadGPTRejects(t *testing.T) {
	d := testDisk()
	disk := filepath.Join(t.TempDir(), "disk.raw")
	writeDisk(t, disk, d)
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func([]byte){
		"no signature": func(b []byte) { b[512] = 'X' },
		"header crc":   func(b []byte) { b[512+24]++ },
		"entry crc":    func(b []byte) { b[1024+40]++ },
	} {
		c := append([]byte(nil), b[:1<<20]...)
		mut(c)
		if _, err := ReadGPT(bytesReaderAt(c)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, os.ErrClosed
	}
	return copy(p, b[off:]), nil
}
