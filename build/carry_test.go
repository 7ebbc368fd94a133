package build

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/clonewrite"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// The disk and the ISO carry the UKI's unchanged bytes from the previous build's disk
// (uki-placement.json says where it held them) and writes only the bytes in
// which the UKI changed; whatever the record says, each is byte for byte
// the one a fresh write makes.
func TestDiskCarriesTheUKI(t *testing.T) {
	mnt := xfstest.Mount(t, 1<<30)
	rng := rand.New(rand.NewSource(1))
	uki := make([]byte, 3<<20+12288) // whole sectors, as a UKI is: it ends where its FAT volume ends
	rng.Read(uki)
	size := image.MinDiskSize(int64(len(uki)))
	// build writes the UKI and the disk into dir from base (""), as the image
	// stage does, and returns the disk's bytes written.
	var log bytes.Buffer
	build := func(dir, base string, uki []byte) int64 {
		t.Helper()
		os.MkdirAll(dir, 0o755)
		ow := &outWriter{base: base, log: &log}
		if err := ow.write(filepath.Join(dir, ukiFile), ukiFile, func(f *clonewrite.File) error { _, err := f.Write(uki); return err }); err != nil {
			t.Fatal(err)
		}
		mapped, unmap, err := mapFile(filepath.Join(dir, ukiFile))
		if err != nil {
			t.Fatal(err)
		}
		defer unmap()
		d, err := image.StandardDisk("sha256:seed", size, 1700000000, mapped)
		if err != nil {
			t.Fatal(err)
		}
		var written int64
		if err := ow.write(filepath.Join(dir, diskFile), diskFile, func(f *clonewrite.File) error {
			err := image.WriteDisk(ow.carry(f, diskFile, mapped), d)
			written = f.Written()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		iso := image.StandardISO("sha256:seed", 1700000000, mapped)
		if err := ow.write(filepath.Join(dir, isoFile), isoFile, func(f *clonewrite.File) error {
			return image.WriteISO(ow.carry(f, isoFile, mapped), iso)
		}); err != nil {
			t.Fatal(err)
		}
		if err := ow.writePlacement(filepath.Join(dir, placementFile), len(mapped)); err != nil {
			t.Fatal(err)
		}
		return written
	}
	fresh := func(uki []byte, name string) []byte {
		t.Helper()
		dir := t.TempDir()
		build(dir, "", uki)
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return b
	}
	first := filepath.Join(mnt, "first")
	build(first, "", uki)
	rec, _ := os.ReadFile(filepath.Join(first, placementFile))
	if p := readPlacement(first); p == nil || p.UKISize != int64(len(uki)) || p.Placed[diskFile] <= 0 {
		t.Fatalf("placement record %s", rec)
	}
	edited := bytes.Clone(uki)
	copy(edited[2<<20:], "an overlay edit")
	grown := append(bytes.Clone(edited), make([]byte, 64<<10)...) // placed elsewhere: FAT files from the top
	for _, c := range []struct {
		name   string
		record func(string) // changes the base's record before the rebuild
		carry  bool         // whether the UKI's bytes are carried, unread
		uki    []byte       // the rebuild's UKI (nil: edited)
	}{
		{"record as written", func(string) {}, true, nil},
		{"record with another offset", func(p string) {
			os.WriteFile(p, fmt.Appendf(nil, `{"uki_size":%d,"placed":{"disk.img":4096}}`, len(uki)), 0o644)
		}, false, nil},
		{"record for another UKI size", func(p string) {
			os.WriteFile(p, bytes.Replace(rec, fmt.Append(nil, len(uki)), fmt.Append(nil, len(uki)+1), 1), 0o644)
		}, false, nil},
		{"no record", func(p string) { os.Remove(p) }, false, nil},
		{"record for the new size at the old offset", func(p string) {
			os.WriteFile(p, bytes.Replace(rec, fmt.Append(nil, len(uki)), fmt.Append(nil, len(grown)), 1), 0o644)
		}, false, grown},
		{"garbage record", func(p string) { os.WriteFile(p, []byte("{"), 0o644) }, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := filepath.Join(mnt, "base-"+c.name)
			if err := os.CopyFS(base, os.DirFS(first)); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Join(base, placementFile), 0o644)
			c.record(filepath.Join(base, placementFile))
			nextDir := filepath.Join(mnt, "next-"+c.name)
			log.Reset()
			next := c.uki
			if next == nil {
				next = edited
			}
			written := build(nextDir, base, next)
			for _, name := range []string{diskFile, isoFile} {
				got, _ := os.ReadFile(filepath.Join(nextDir, name))
				if !bytes.Equal(got, fresh(next, name)) {
					t.Fatalf("the rebuilt %s differs from a fresh write", name)
				}
			}
			// Carried, the disk gets the 15 changed bytes; compared, the same
			// bytes are found by reading the whole UKI's range. Either way the
			// FAT's last byte, which is the UKI's, is written twice: the FAT
			// writer sizes the volume with a zero there first.
			if written != int64(len("an overlay edit"))+2 && c.uki == nil {
				t.Errorf("%d bytes written, want the 15 that changed and the last byte twice", written)
			}
			// The ISO's FAT ends with the UKI, and its writer sized the volume
			// by writing the last byte first: that byte is the UKI's to write.
			for _, line := range []string{"disk.img cloned from the previous build, 17 B of 98.0 MiB written (the UKI's other 3.0 MiB carried unread)",
				"peerboot.iso cloned from the previous build, 17 B of 64.0 MiB written (the UKI's other 3.0 MiB carried unread)"} {
				if carried := bytes.Contains(log.Bytes(), []byte(line)); carried != c.carry {
					t.Errorf("carried %v, want %v: %q in\n%s", carried, c.carry, line, log.String())
				}
			}
		})
	}
}
