package image

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/peerboot/peerboot/bootproto"
)

// go-diskfs, an independent implementation, reads back every image the
// image stage writes: the GPT disk (StandardDisk: its table, the FAT32 ESP
// and the FAT16 report partition) and the ISO (StandardISO: ISO 9660 and the
// FAT ESP inside it). Each file tree must be exactly the tree asked for.

// tree is the intended content of a filesystem: files by slash path, and
// directories (a trailing "/").
func tree(files map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for p, b := range files {
		out[p] = b
		for d := filepath.Dir(strings.TrimSuffix(p, "/")); d != "."; d = filepath.Dir(d) {
			out[d+"/"] = nil
		}
	}
	return out
}

// readTree walks a go-diskfs filesystem into the same shape.
func readTree(t *testing.T, fsys filesystem.FileSystem) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			out[p+"/"] = nil
			return nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if b == nil {
			b = []byte{}
		}
		out[p] = b
		return nil
	})
	if err != nil {
		t.Fatalf("go-diskfs: walking the filesystem: %v", err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%s: go-diskfs finds no %s", what, p)
		case !bytes.Equal(g, w):
			t.Errorf("%s: %s reads back as %d bytes, want %d (or the bytes differ)", what, p, len(g), len(w))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: go-diskfs finds %s, which was not asked for", what, p)
		}
	}
}

func openDiskfs(t *testing.T, path string) *disk.Disk {
	t.Helper()
	d, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatalf("go-diskfs cannot open %s: %v", filepath.Base(path), err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDiskfsReadsTheDisk(t *testing.T) {
	uki := pattern(3<<20+17, 4)
	d, err := StandardDisk(testSeed, MinDiskSize(int64(len(uki))), 1700000000, uki)
	if err != nil {
		t.Fatal(err)
	}
	// The report partition as a booted node leaves it: a report in reports/.
	d.Reports.Files = map[string][]byte{bootproto.ReportsDir + "/": nil, bootproto.ReportsDir + "/2023-11-14T22-13-20Z-node1.json": []byte(`{"verdict":"pass"}`)}
	path := filepath.Join(t.TempDir(), "disk.img")
	writeDisk(t, path, d)

	dd := openDiskfs(t, path)
	pt, err := dd.GetPartitionTable()
	if err != nil {
		t.Fatalf("go-diskfs: partition table: %v", err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok {
		t.Fatalf("go-diskfs reads a %T, want a GPT", pt)
	}
	if !table.ProtectiveMBR || table.RecoveredFromBackup || !strings.EqualFold(table.GUID, GUIDString(d.DiskGUID)) {
		t.Errorf("GPT: protective MBR %v, from backup %v, disk GUID %s (want %s)", table.ProtectiveMBR, table.RecoveredFromBackup, table.GUID, GUIDString(d.DiskGUID))
	}
	var used []*gpt.Partition
	for _, p := range table.Partitions {
		if p.Type != gpt.Unused {
			used = append(used, p)
		}
	}
	if len(used) != 2 {
		t.Fatalf("go-diskfs finds %d partitions, want 2", len(used))
	}
	for i, want := range []struct {
		part  Partition
		typ   gpt.Type
		start int64
	}{
		{d.ESP, gpt.EFISystemPartition, partAlign},
		{d.Reports, gpt.MicrosoftBasicData, partAlign + d.ESP.Size},
	} {
		p := used[i]
		if p.Name != want.part.Label || p.Type != want.typ || !strings.EqualFold(p.GUID, GUIDString(want.part.GUID)) ||
			p.GetStart() != want.start || p.GetSize() != want.part.Size {
			t.Errorf("partition %d: go-diskfs reads %q %s %s at %d, %d bytes; want %q %s %s at %d, %d bytes", i+1,
				p.Name, p.Type, p.GUID, p.GetStart(), p.GetSize(), want.part.Label, want.typ, GUIDString(want.part.GUID), want.start, want.part.Size)
		}
		fsys, err := dd.GetFilesystem(i + 1)
		if err != nil {
			t.Fatalf("go-diskfs: partition %d (%s): %v", i+1, want.part.Label, err)
		}
		wantType := filesystem.TypeFat32
		if want.part.Label == bootproto.ReportsLabel {
			wantType = filesystem.TypeFat16 // 32 MiB is too small for FAT32's 65525 clusters
		}
		if fsys.Type() != wantType || strings.TrimSpace(fsys.Label()) != want.part.Label {
			t.Errorf("partition %d: go-diskfs reads filesystem type %d labelled %q, want %d %q", i+1, fsys.Type(), fsys.Label(), wantType, want.part.Label)
		}
		sameTree(t, want.part.Label, readTree(t, fsys), tree(want.part.Files))
	}
}

func TestDiskfsReadsTheISO(t *testing.T) {
	uki := pattern(3<<20+17, 5)
	iso := StandardISO(testSeed, 1700000000, uki)
	path := filepath.Join(t.TempDir(), "peerboot.iso")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteISO(f, iso); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// The whole file as ISO 9660 (partition 0: no table).
	dd, err := diskfs.Open(path, diskfs.WithOpenMode(diskfs.ReadOnly), diskfs.WithSectorSize(2048))
	if err != nil {
		t.Fatalf("go-diskfs cannot open the ISO: %v", err)
	}
	defer dd.Close()
	fsys, err := dd.GetFilesystem(0)
	if err != nil {
		t.Fatalf("go-diskfs: the ISO's filesystem: %v", err)
	}
	if fsys.Type() != filesystem.TypeISO9660 || strings.TrimSpace(fsys.Label()) != ISOVolumeID {
		t.Errorf("go-diskfs reads filesystem type %d labelled %q, want ISO 9660 %q", fsys.Type(), fsys.Label(), ISOVolumeID)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.ToUpper(e.Name()))
	}
	if !slices.Equal(names, []string{"BOOT.CAT", ISOImageName}) {
		t.Errorf("go-diskfs lists the ISO's root as %q", names)
	}
	esp, err := fs.ReadFile(fsys, ISOImageName)
	if err != nil {
		t.Fatalf("go-diskfs: reading %s: %v", ISOImageName, err)
	}
	if int64(len(esp)) != iso.ESP.Size {
		t.Fatalf("%s is %d bytes, want %d", ISOImageName, len(esp), iso.ESP.Size)
	}
	// The ESP image, extracted, as a FAT filesystem of its own.
	espPath := filepath.Join(t.TempDir(), "esp.img")
	if err := os.WriteFile(espPath, esp, 0o644); err != nil {
		t.Fatal(err)
	}
	ed := openDiskfs(t, espPath)
	efs, err := ed.GetFilesystem(0)
	if err != nil {
		t.Fatalf("go-diskfs: the ISO's ESP: %v", err)
	}
	if efs.Type() != filesystem.TypeFat32 || strings.TrimSpace(efs.Label()) != ESPLabel {
		t.Errorf("the ISO's ESP: go-diskfs reads type %d labelled %q", efs.Type(), efs.Label())
	}
	sameTree(t, "the ISO's ESP", readTree(t, efs), tree(iso.ESP.Files))
}

// TestDiskfsGPTMatchesOurs writes the standard disk's table with go-diskfs's
// GPT writer, on the same layout and GUIDs, and compares it with ours: the
// headers and entry arrays are byte for byte the same, and the protective
// MBRs differ only in the CHS fields go-diskfs leaves zero (ours says
// "LBA 1" and "too large", as sgdisk and fdisk write them). That is why the
// image stage keeps its own ~100 lines of GPT writing: ReadGPT, SetLastLBA
// and Write, which `flash --grow-reports` and `reports` need, are ours
// anyway, and the writer shares its header encoder with them.
func TestDiskfsGPTMatchesOurs(t *testing.T) {
	uki := pattern(1<<20, 6)
	d, err := StandardDisk(testSeed, MinDiskSize(int64(len(uki))), 1700000000, uki)
	if err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(t.TempDir(), "ours.img")
	writeDisk(t, ours, d)

	theirs := filepath.Join(t.TempDir(), "theirs.img")
	f, err := os.Create(theirs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(d.Size); err != nil {
		t.Fatal(err)
	}
	espStart := uint64(partAlign / lbaSize)
	repStart := espStart + uint64(d.ESP.Size/lbaSize)
	table := &gpt.Table{LogicalSectorSize: lbaSize, PhysicalSectorSize: lbaSize, ProtectiveMBR: true, GUID: GUIDString(d.DiskGUID),
		Partitions: []*gpt.Partition{
			{Index: 1, Start: espStart, End: repStart - 1, Type: gpt.EFISystemPartition, Name: d.ESP.Label, GUID: GUIDString(d.ESP.GUID)},
			{Index: 2, Start: repStart, End: repStart + uint64(d.Reports.Size/lbaSize) - 1, Type: gpt.MicrosoftBasicData, Name: d.Reports.Label, GUID: GUIDString(d.Reports.GUID)},
		}}
	if err := table.Write(f, d.Size); err != nil {
		t.Fatalf("go-diskfs: writing the GPT: %v", err)
	}
	a, _ := os.ReadFile(ours)
	b, _ := os.ReadFile(theirs)
	last := d.Size - (gptEntryLBAs+1)*lbaSize
	for _, r := range []struct {
		what     string
		from, to int64
	}{
		{"primary GPT header and entries", lbaSize, (2 + gptEntryLBAs) * lbaSize},
		{"backup GPT entries and header", last, d.Size},
	} {
		if !bytes.Equal(a[r.from:r.to], b[r.from:r.to]) {
			t.Errorf("%s differ between ours and go-diskfs's", r.what)
		}
	}
	var differ []int
	for i := 0; i < lbaSize; i++ {
		if a[i] != b[i] {
			differ = append(differ, i)
		}
	}
	// CHS of the first (447-449) and last (451-453) sector of the 0xEE entry.
	if want := []int{448, 451, 452, 453}; !slices.Equal(differ, want) {
		t.Errorf("protective MBR bytes differing from go-diskfs's: %v, want %v (the CHS fields)", differ, want)
	}
}
