package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/clonewrite"
	"github.com/peerboot/peerboot/internal/xfstest"
	"github.com/peerboot/peerboot/store"
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
		// A recipe without the uki format writes the UKI to scratch: the
		// previous output has no UKI to clone, so nothing says what changed
		// in it, and the disk and ISO carry none of it.
		{"no UKI in the previous output", func(p string) { os.Remove(filepath.Join(filepath.Dir(p), ukiFile)) }, false, nil},
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

// The UKI carries its .linux (the same kernel) and the part of its .initrd
// made of the segments both initrds share (all but config after an overlay
// edit) from the previous UKI, and writes the rest; it is byte for byte the
// UKI a fresh write makes, and a record of other segments carries less.
func TestUKICarriesItsSections(t *testing.T) {
	mnt := xfstest.Mount(t, 1<<30)
	rng := rand.New(rand.NewSource(2))
	kernel := make([]byte, 1<<20+333)
	rng.Read(kernel)
	seg1, seg2 := make([]byte, 2<<20+77), make([]byte, 100<<10)
	rng.Read(seg1)
	rng.Read(seg2)
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	initrdOf := func(seg2 []byte) ([]byte, []segment) {
		b := append(bytes.Clone(seg1), seg2...)
		return b, []segment{{Layer: "userspace", SHA256: sum(seg1), At: 0, Size: int64(len(seg1))},
			{Layer: "config", SHA256: sum(seg2), At: int64(len(seg1)), Size: int64(len(seg2))}}
	}
	var log bytes.Buffer
	cmdline := "console=ttyS0"
	build := func(dir, base string, initrd []byte, segs []segment) []byte {
		t.Helper()
		os.MkdirAll(dir, 0o755)
		log.Reset()
		ow := &outWriter{base: base, log: &log, kernelSum: sum(kernel), initrdSum: sum(initrd), initrdSegs: segs}
		u := image.UKI{Stub: tinyStub(t), Kernel: kernel, Initrd: initrd, Cmdline: cmdline, OSRelease: "ID=t\n"}
		if err := writeMeasuredUKI(filepath.Join(dir, ukiFile), u, nil, nil, ow); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, ukiFile))
		if err := ow.writePlacement(filepath.Join(dir, placementFile), len(b)); err != nil {
			t.Fatal(err)
		}
		var fresh bytes.Buffer
		if err := image.WriteUKI(&fresh, u); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, fresh.Bytes()) {
			t.Fatal("the UKI differs from a fresh write")
		}
		return b
	}
	first := filepath.Join(mnt, "first")
	initrd, segs := initrdOf(seg2)
	build(first, "", initrd, segs)
	edited := bytes.Clone(seg2)
	copy(edited[50<<10:], "an overlay edit")
	initrd2, segs2 := initrdOf(edited)
	build(filepath.Join(mnt, "second"), first, initrd2, segs2)
	// kernel (1 MiB + 333) and seg1 (2 MiB + 77) carried: 3.0 MiB.
	if want := "peerboot.efi cloned from the previous build, 15 B of 4.0 MiB written (3.0 MiB of the kernel and initrd carried unread)"; !bytes.Contains(log.Bytes(), []byte(want)) {
		t.Errorf("want %q in\n%s", want, log.String())
	}
	// A record whose first segment is another one: only the kernel carried.
	rec, _ := os.ReadFile(filepath.Join(first, placementFile))
	other := filepath.Join(mnt, "other")
	os.CopyFS(other, os.DirFS(first))
	os.Chmod(filepath.Join(other, placementFile), 0o644)
	os.WriteFile(filepath.Join(other, placementFile), bytes.ReplaceAll(rec, []byte(sum(seg1)), []byte(sum([]byte("another")))), 0o644)
	build(filepath.Join(mnt, "third"), other, initrd2, segs2)
	if want := "15 B of 4.0 MiB written (1.0 MiB of the kernel and initrd carried unread)"; !bytes.Contains(log.Bytes(), []byte(want)) {
		t.Errorf("want %q in\n%s", want, log.String())
	}
	// A longer command line moves the sections: nothing is carried, and the
	// UKI is still the fresh one (build checks).
	cmdline += " " + strings.Repeat("x", 600)
	build(filepath.Join(mnt, "fourth"), first, initrd2, segs2)
	if bytes.Contains(log.Bytes(), []byte("carried")) {
		t.Errorf("sections at other offsets carried:\n%s", log.String())
	}
}

// The initramfs stage writes a clone of the previous initrd.img in which the
// layer segments that are the same at the same offset are carried, unread,
// and the others written; the result is the segments end to end, NUL-padded
// to whole MiB, whatever the previous segments.json says.
func TestInitrdCarriesItsSegments(t *testing.T) {
	mnt := xfstest.Mount(t, 1<<30)
	st, err := store.Open(filepath.Join(mnt, "store"))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(3))
	segment := func(n int) []byte { b := make([]byte, n); rng.Read(b); return b }
	layers := map[StageName][]byte{StageUserspace: segment(3<<20 + 5), StageModules: segment(1 << 20), StageTools: segment(700 << 10), StageConfig: segment(3000)}
	commitLayer := func(l StageName, body []byte) string {
		dir, _ := st.NewScratch(string(l))
		os.WriteFile(filepath.Join(dir, layerSegment), body, 0o444)
		key := string(l) + "-" + sha256Hex(append([]byte(l), body...))
		if err := st.CommitOutput(key, dir); err != nil {
			t.Fatal(err)
		}
		return st.OutputDir(key)
	}
	var log bytes.Buffer
	run := func(out, base string) []byte {
		t.Helper()
		log.Reset()
		sr := &stageRun{Name: StageInitramfs, Store: st, Out: out, Base: base, Log: &log, Deps: map[StageName]string{}}
		var want []byte
		for _, l := range initrdLayers {
			sr.Deps[l] = commitLayer(l, layers[l])
			want = append(want, layers[l]...)
		}
		os.MkdirAll(out, 0o755)
		if err := initramfsStage().Run(context.Background(), sr); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(out, initrdFile))
		want = append(want, make([]byte, (len(want)+(1<<20)-1)/(1<<20)*(1<<20)-len(want))...)
		if !bytes.Equal(got, want) {
			t.Fatalf("initrd.img is not the segments end to end, padded (%d bytes, want %d)", len(got), len(want))
		}
		return got
	}
	first := filepath.Join(mnt, "first")
	run(first, "")
	layers[StageConfig] = segment(3000)
	run(filepath.Join(mnt, "second"), first)
	if !bytes.Contains(log.Bytes(), []byte("(3 carried from the previous build)")) {
		t.Errorf("an overlay edit carried other than the three layers before config:\n%s", log.String())
	}
	// A record that lists another tools segment: tools and config written.
	rec, _ := os.ReadFile(filepath.Join(first, segmentsFile))
	other := filepath.Join(mnt, "other")
	os.CopyFS(other, os.DirFS(first))
	os.Chmod(filepath.Join(other, segmentsFile), 0o644)
	os.WriteFile(filepath.Join(other, segmentsFile), bytes.Replace(rec, []byte(sha256Hex(layers[StageTools])), []byte(sha256Hex([]byte("x"))), 1), 0o644)
	run(filepath.Join(mnt, "third"), other)
	if !bytes.Contains(log.Bytes(), []byte("(2 carried from the previous build)")) {
		t.Errorf("want userspace and modules carried:\n%s", log.String())
	}
	// A grown segment moves the ones after it: those are written.
	layers[StageModules] = segment(1<<20 + 10)
	run(filepath.Join(mnt, "fourth"), first)
	if !bytes.Contains(log.Bytes(), []byte("(1 carried from the previous build)")) {
		t.Errorf("want userspace alone carried:\n%s", log.String())
	}
}

func sha256Hex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// The initramfs stage pads initrd.img with NULs to whole MiB and no further:
// segments that end on a MiB boundary are not padded, one byte more is padded
// to the next MiB. A build with no previous initrd says nothing of carrying,
// nor does a rebuild on a store that cannot clone (a temp dir here: the
// segments.json of the previous build says the same segments, but there is
// no clone to carry them in, so they are written), and what it writes is
// read-only (published out/ files are hard links to it).
func TestInitrdPadsToWholeMiB(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		sizes  []int // userspace, modules, tools, config
		padded int
	}{
		{[]int{1 << 20, 512 << 10, 256 << 10, 256 << 10}, 2 << 20},
		{[]int{1 << 20, 512 << 10, 256 << 10, 256<<10 + 1}, 3 << 20},
	} {
		sr := &stageRun{Name: StageInitramfs, Store: st, Log: &bytes.Buffer{}, Deps: map[StageName]string{}}
		var want []byte
		for j, l := range initrdLayers {
			body := bytes.Repeat([]byte{byte(1 + i*4 + j)}, c.sizes[j])
			dir, _ := st.NewScratch(string(l))
			os.WriteFile(filepath.Join(dir, layerSegment), body, 0o444)
			key := string(l) + "-" + sha256Hex(append([]byte(l), body...))
			if err := st.CommitOutput(key, dir); err != nil {
				t.Fatal(err)
			}
			sr.Deps[l] = st.OutputDir(key)
			want = append(want, body...)
		}
		want = append(want, make([]byte, c.padded-len(want))...)
		for _, rebuild := range []bool{false, true} { // a first build, then a rebuild from it
			sr.Base = ""
			if rebuild {
				sr.Base = sr.Out
			}
			sr.Out = filepath.Join(t.TempDir(), "out")
			sr.Log.(*bytes.Buffer).Reset()
			os.MkdirAll(sr.Out, 0o755)
			if err := initramfsStage().Run(context.Background(), sr); err != nil {
				t.Fatal(err)
			}
			checkInitrd(t, sr, c.sizes, c.padded, want)
		}
	}
}

// checkInitrd checks an initramfs output of TestInitrdPadsToWholeMiB: the
// segments padded, a log line that carries nothing, read-only files.
func checkInitrd(t *testing.T, sr *stageRun, sizes []int, padded int, want []byte) {
	t.Helper()
	got, _ := os.ReadFile(filepath.Join(sr.Out, initrdFile))
	if !bytes.Equal(got, want) {
		t.Errorf("segments of %v (base %q): initrd.img of %d bytes, want %d: the segments, NUL-padded to whole MiB", sizes, sr.Base, len(got), len(want))
	}
	log := sr.Log.(*bytes.Buffer).String()
	if wantLog := fmt.Sprintf("initramfs: 4 segments, %.1f MiB, padded to %d MiB\n", float64(len(bytes.TrimRight(want, "\x00")))/(1<<20), padded>>20); log != wantLog {
		t.Errorf("base %q: log %q, want %q (nothing carried)", sr.Base, log, wantLog)
	}
	for _, name := range []string{initrdFile, segmentsFile} {
		if info, err := os.Stat(filepath.Join(sr.Out, name)); err != nil || info.Mode().Perm() != readOnly {
			t.Errorf("%s: %v, %v; want mode %o", name, info.Mode(), err, readOnly)
		}
	}
}

// On a store that cannot clone, the image stage writes whole files and says
// why once, not once per file; a first build (no previous output) has nothing
// to say. The previous output is on tmpfs (/dev/shm), which never clones,
// nor clones onto another file system.
func TestWholeFilesSaidOnce(t *testing.T) {
	base, err := os.MkdirTemp("/dev/shm", "carry-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	out := t.TempDir()
	for _, name := range []string{ukiFile, diskFile} {
		os.WriteFile(filepath.Join(base, name), []byte("previous "+name), 0o644)
	}
	var log bytes.Buffer
	for _, c := range []struct{ base, want string }{
		{"", ""},
		{base, "image: writing whole files: no reflink here"},
	} {
		log.Reset()
		ow := &outWriter{base: c.base, log: &log}
		for _, name := range []string{ukiFile, diskFile} {
			if err := ow.write(filepath.Join(out, name), name, func(f *clonewrite.File) error {
				if f.Cloned() {
					t.Fatal("a clone of a file on tmpfs")
				}
				_, err := f.Write([]byte("new " + name))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(out, name)); string(got) != "new "+name {
				t.Fatalf("%s: %q", name, got)
			}
		}
		if n := strings.Count(log.String(), "image: "); (c.want == "" && n != 0) || (c.want != "" && (n != 1 || !strings.HasPrefix(log.String(), c.want))) {
			t.Errorf("base %q: log %q, want %q once", c.base, log.String(), c.want)
		}
	}
}

// sizeText words the image stage's "written" and "carried" figures: bytes
// below a KiB, KiB below a MiB (an overlay edit rewrites KiBs), else MiB.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 17: "17 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		1<<20 - 1<<10: "1023.0 KiB", 1 << 20: "1.0 MiB", 3<<20 + 1<<19: "3.5 MiB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// A UKI rebuilt from a previous output that has no record (or one that says
// nothing of sections), with a kernel and an initrd of the same length, is
// the fresh UKI: the section writer tells the two apart by the slices, not
// their lengths, and without a record carries nothing.
func TestUKISectionsWithoutRecordOrByLength(t *testing.T) {
	mnt := xfstest.Mount(t, 1<<30)
	rng := rand.New(rand.NewSource(4))
	// Half a MiB each: the .initrd's padding to whole MiB is then a write of
	// the initrd's length too.
	kernel, initrd := make([]byte, 512<<10), make([]byte, 512<<10)
	rng.Read(kernel)
	rng.Read(initrd)
	write := func(dir, base string, initrd []byte) string {
		t.Helper()
		os.MkdirAll(dir, 0o755)
		var log bytes.Buffer
		ow := &outWriter{base: base, log: &log, kernelSum: sha256Hex(kernel), initrdSum: sha256Hex(initrd),
			initrdSegs: []segment{{Layer: "config", SHA256: sha256Hex(initrd), Size: int64(len(initrd))}}}
		u := image.UKI{Stub: tinyStub(t), Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=t\n"}
		if err := writeMeasuredUKI(filepath.Join(dir, ukiFile), u, nil, nil, ow); err != nil {
			t.Fatal(err)
		}
		if err := ow.writePlacement(filepath.Join(dir, placementFile), 1); err != nil {
			t.Fatal(err)
		}
		var fresh bytes.Buffer
		if err := image.WriteUKI(&fresh, u); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, ukiFile)); !bytes.Equal(b, fresh.Bytes()) {
			t.Fatal("the UKI differs from a fresh write")
		}
		p := readPlacement(dir)
		if p == nil || p.Sections[".linux"].SHA256 != sha256Hex(kernel) || p.Sections[".initrd"].SHA256 != sha256Hex(initrd) ||
			p.Sections[".linux"].At == p.Sections[".initrd"].At {
			t.Fatalf("sections recorded %+v", p)
		}
		return log.String()
	}
	first := filepath.Join(mnt, "first")
	write(first, "", initrd)
	edited := bytes.Clone(initrd)
	copy(edited[100:], "an edit")
	if log := write(filepath.Join(mnt, "second"), first, edited); !strings.Contains(log, "carried unread") {
		t.Errorf("the kernel was not carried:\n%s", log)
	}
	noRecord := filepath.Join(mnt, "norecord")
	os.CopyFS(noRecord, os.DirFS(first))
	os.Remove(filepath.Join(noRecord, placementFile))
	if log := write(filepath.Join(mnt, "third"), noRecord, edited); strings.Contains(log, "carried") {
		t.Errorf("carried without a record:\n%s", log)
	}
	for _, rec := range []string{`{"uki_size":0,"placed":{},"sections":{}}`, `{"uki_size":-1}`, `[`} {
		dir := filepath.Join(t.TempDir())
		os.WriteFile(filepath.Join(dir, placementFile), []byte(rec), 0o644)
		if p := readPlacement(dir); p != nil {
			t.Errorf("record %s read as %+v", rec, p)
		}
	}
}
