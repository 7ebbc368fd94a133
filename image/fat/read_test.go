package fat

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/peerboot/peerboot/image/fatread"
)

func TestReadBack(t *testing.T) {
	for _, tc := range []struct {
		size    int64
		want    Type
		cluster int64 // Microsoft's default table: one sector up to 260 MiB, then 4 KiB
	}{{16 << 20, FAT16, 512}, {40 << 20, FAT32, 512}, {300 << 20, FAT32, 4096}} {
		files := testFiles()
		path, typ := writeImage(t, Params{Size: tc.size, Label: "PEERBOOT", VolumeID: 0xCAFE, Epoch: 1700000000, Files: files})
		if typ != tc.want {
			t.Fatalf("wrote %v, want %v", typ, tc.want)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs, err := fatread.Open(f, tc.size)
		if err != nil {
			t.Fatalf("%v: Open: %v", tc.want, err)
		}
		if fs.Type() != tc.want || fs.Label() != "PEERBOOT" || fs.VolumeID() != 0xCAFE {
			t.Errorf("%v: got type %v label %q id %x", tc.want, fs.Type(), fs.Label(), fs.VolumeID())
		}
		if fs.ClusterSize() != tc.cluster {
			t.Errorf("%v of %d MiB: cluster size %d, want %d", tc.want, tc.size>>20, fs.ClusterSize(), tc.cluster)
		}
		got, err := fs.Files()
		if err != nil {
			t.Fatalf("%v: Files: %v", tc.want, err)
		}
		for p, want := range files {
			g, ok := got[p]
			if !ok {
				t.Errorf("%v: %q missing (have %d entries)", tc.want, p, len(got))
				continue
			}
			if !bytes.Equal(g, want) {
				t.Errorf("%v: %q: %d bytes differ from the %d written", tc.want, p, len(g), len(want))
			}
		}
		if len(got) != len(files) {
			t.Errorf("%v: %d entries, want %d: %v", tc.want, len(got), len(files), keys(got))
		}
		ents, err := fs.ReadDir("/")
		if err != nil {
			t.Fatal(err)
		}
		want := time.Unix(1700000000, 0).UTC()
		for _, e := range ents {
			if !e.Modified.Equal(want) {
				t.Errorf("%s: modified %v, want %v", e.Name, e.Modified, want)
			}
		}
		if _, err := fs.ReadFile("nope.json"); !fatread.IsNotExist(err) {
			t.Errorf("missing file: %v, want a not-exist error", err)
		}
	}
}

// Files written by the Linux tools (mtools' long names, its allocation order)
// read back too: reports on a stick are written by the kernel's vfat driver.
func TestReadMtools(t *testing.T) {
	needTool(t, "mkfs.vfat")
	needTool(t, "mcopy")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	run(t, "mkfs.vfat", "-C", "-F", "16", "-n", "PEERBOOT", img, "20480")
	src := filepath.Join(dir, "report-20250601T120000Z.json")
	body := pattern(70000, 7)
	if err := os.WriteFile(src, body, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "mmd", "-i", img, "::/reports")
	run(t, "mcopy", "-i", img, src, "::/reports/")
	run(t, "mcopy", "-i", img, src, "::/")
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	fs, err := fatread.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	got, err := fs.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"report-20250601T120000Z.json", "reports/report-20250601T120000Z.json"} {
		if !bytes.Equal(got[p], body) {
			t.Errorf("%s: %d bytes, want the %d written (have %v)", p, len(got[p]), len(body), keys(got))
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FuzzOpen feeds corrupted filesystems to the reader: errors are fine, panics
// and hangs are not.
func FuzzOpen(f *testing.F) {
	for _, size := range []int64{16 << 20} {
		var buf memFile
		if _, err := Write(&buf, Params{Size: size, Label: "PEERBOOT", Files: map[string][]byte{"a/b.json": []byte("{}"), "report.json": pattern(3000, 1)}}); err != nil {
			f.Fatal(err)
		}
		// Only the system area and the first clusters: the corpus stays small.
		f.Add(buf.b[:min(len(buf.b), 300<<10)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The tail past the corpus reads as zeros, so the fuzzer works on the
		// system area of a full-size volume.
		fs, err := fatread.Open(zeroTail(b), 16<<20)
		if err != nil {
			return
		}
		fs.Files()
	})
}

type zeroTail []byte

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > 16<<20 {
		return 0, io.EOF
	}
	clear(p)
	if off < int64(len(z)) {
		copy(p, z[off:])
	}
	return len(p), nil
}

type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	copy(m.b[off:], p)
	return len(p), nil
}
