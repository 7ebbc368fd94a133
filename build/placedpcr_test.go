package build

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/measure"
)

// The image stage records the loaded digests of the UKI's .linux (the kernel
// zero-filled to its VirtualSize) and .initrd (the initrd file's sum), so PCR
// 11 is predicted without reading those sections from the fresh UKI: the
// prediction from the record equals a whole hash of the UKI, uses the record
// for both sections, and a record that places a section elsewhere is not used.
func TestPlacedSectionsPredictPCR11(t *testing.T) {
	kernel := append(tinyStub(t), []byte("kernel code")...) // SizeOfImage 0x2000: zero-filled
	initrd := []byte("an initrd, whole")
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	u := image.UKI{Stub: tinyStub(t), Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=t\n"}
	key, err := pcrSigner([]byte(testRSAKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		key  bool
	}{{"no PCR key", false}, {"PCR key", true}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ow := &outWriter{log: io.Discard, kernelSum: sum(kernel), initrdSum: sum(initrd)}
			var k = key
			if !c.key {
				k = nil
			}
			path := filepath.Join(dir, ukiFile)
			if err := writeMeasuredUKI(path, u, k, nil, ow); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			if err := ow.writePlacement(filepath.Join(dir, placementFile), len(b)); err != nil {
				t.Fatal(err)
			}
			p := readPlacement(dir)
			if p == nil || p.Sections[".linux"].Loaded == "" || p.Sections[".initrd"].Loaded != sum(initrd) {
				t.Fatalf("record %+v", p)
			}
			whole, err := measure.Predict(b)
			if err != nil {
				t.Fatal(err)
			}
			used := map[string]bool{}
			known := placedKnown(p)
			got, err := measure.PredictKnown(b, func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
				sum, ok := known(name, s, file)
				used[name] = used[name] || ok
				return sum, ok
			})
			if err != nil || len(got.Phases) != len(whole.Phases) {
				t.Fatalf("%+v, %v", got, err)
			}
			for i := range got.Phases {
				if got.Phases[i] != whole.Phases[i] {
					t.Errorf("phase %s: from the record %x, whole hash %x", whole.Phases[i].Name, got.Phases[i].PCR11, whole.Phases[i].PCR11)
				}
			}
			if !used[".linux"] || !used[".initrd"] {
				t.Errorf("the record answered for %v, want .linux and .initrd", used)
			}
			if c.key {
				if res, err := measure.Check(b); err != nil || !res.Signed {
					t.Fatalf("the signed UKI does not check: %+v %v", res, err)
				}
			}
			// A record placing .linux elsewhere answers nothing for it.
			moved := *p
			moved.Sections = map[string]sectionPlace{".linux": p.Sections[".linux"]}
			l := moved.Sections[".linux"]
			l.At += 512
			l.Loaded = sum([]byte("not the kernel"))
			moved.Sections[".linux"] = l
			if again, _ := measure.PredictKnown(b, placedKnown(&moved)); again.Phases[0] != whole.Phases[0] {
				t.Error("a record for another offset was used")
			}
		})
	}
}

// The .linux loaded digest (the kernel zero-filled to its VirtualSize) is
// taken from the previous build's record only for the same kernel (sum and
// size) at the same VirtualSize, with a digest to take; a record of any other
// kernel is hashed again, so the predicted PCR 11 is the UKI's own.
func TestLoadedDigestFromTheRecord(t *testing.T) {
	kernel := append(tinyStub(t), []byte("kernel code")...) // SizeOfImage 0x2000: zero-filled
	initrd := []byte("an initrd, whole")
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	u := image.UKI{Stub: tinyStub(t), Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=t\n"}
	build := func(dir, base string) *placement {
		t.Helper()
		os.MkdirAll(dir, 0o755)
		ow := &outWriter{base: base, log: io.Discard, kernelSum: sum(kernel), initrdSum: sum(initrd)}
		if err := writeMeasuredUKI(filepath.Join(dir, ukiFile), u, nil, nil, ow); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, ukiFile))
		if err := ow.writePlacement(filepath.Join(dir, placementFile), len(b)); err != nil {
			t.Fatal(err)
		}
		return readPlacement(dir)
	}
	first := build(filepath.Join(t.TempDir(), "first"), "")
	real := first.Sections[".linux"]
	if real.VirtualSize <= real.Size || real.Loaded == "" {
		t.Fatalf(".linux record %+v: want a zero-filled kernel's loaded digest", real)
	}
	fake := sum([]byte("the record's digest"))
	for _, c := range []struct {
		name  string
		edit  func(*sectionPlace)
		taken bool // the record's (fake) digest is taken
	}{
		{"the same kernel", func(*sectionPlace) {}, true},
		{"another kernel", func(s *sectionPlace) { s.SHA256 = sum([]byte("another")) }, false},
		{"another size", func(s *sectionPlace) { s.Size++ }, false},
		{"another VirtualSize", func(s *sectionPlace) { s.VirtualSize += 4096 }, false},
		{"no digest", func(s *sectionPlace) { s.Loaded = "" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			rec := *first
			rec.Sections = map[string]sectionPlace{}
			for k, v := range first.Sections {
				rec.Sections[k] = v
			}
			l := rec.Sections[".linux"]
			l.Loaded = fake
			c.edit(&l)
			rec.Sections[".linux"] = l
			b, _ := json.Marshal(rec)
			os.WriteFile(filepath.Join(base, placementFile), b, 0o644)
			got := build(filepath.Join(t.TempDir(), "next"), base).Sections[".linux"].Loaded
			want := real.Loaded
			if c.taken {
				want = fake
			}
			if got != want {
				t.Errorf(".linux loaded digest %s, want %s (taken from the record: %v)", got, want, c.taken)
			}
		})
	}
}

// eitherKnown asks its first answer, then its second: the placed sections'
// digests first, then the store's initrd digest; either may be missing.
func TestEitherKnown(t *testing.T) {
	answers := func(name string, sum byte) measure.Known {
		return func(n string, _ measure.PESection, _ []byte) ([32]byte, bool) {
			if n != name {
				return [32]byte{}, false
			}
			return [32]byte{sum}, true
		}
	}
	a, b := answers(".linux", 1), answers(".initrd", 2)
	both := answers(".linux", 3) // b's answer for a name a answers too: not asked
	for _, c := range []struct {
		name string
		k    measure.Known
		asks string
		want byte // 0: no answer
	}{
		{"a then b: a's", eitherKnown(a, b), ".linux", 1},
		{"a then b: b's", eitherKnown(a, b), ".initrd", 2},
		{"a then b: neither", eitherKnown(a, b), ".cmdline", 0},
		{"a first", eitherKnown(a, both), ".linux", 1},
		{"no a", eitherKnown(nil, b), ".initrd", 2},
		{"no b", eitherKnown(a, nil), ".linux", 1},
	} {
		sum, ok := c.k(c.asks, measure.PESection{}, nil)
		if ok != (c.want != 0) || sum[0] != c.want {
			t.Errorf("%s: %s answered %x, %v; want %d", c.name, c.asks, sum[0], ok, c.want)
		}
	}
	if eitherKnown(nil, nil) != nil {
		t.Error("eitherKnown(nil, nil) answers")
	}
}

// placedKnown answers for a section only where the record places it (the
// same offset and VirtualSize in the header measure reads) with a digest
// that is a sha256; any other record answers nothing, and measure hashes.
func TestPlacedKnownAnswersOnlyItsPlace(t *testing.T) {
	digest := sha256.Sum256([]byte("loaded"))
	rec := sectionPlace{At: 4096, Size: 100, VirtualSize: 8192, Loaded: hex.EncodeToString(digest[:])}
	header := measure.PESection{PointerToRaw: 4096, VirtualSize: 8192}
	for _, c := range []struct {
		name   string
		edit   func(*sectionPlace)
		asks   string
		answer bool
	}{
		{"as recorded", func(*sectionPlace) {}, ".linux", true},
		{"another section", func(*sectionPlace) {}, ".initrd", false},
		{"no digest", func(s *sectionPlace) { s.Loaded = "" }, ".linux", false},
		{"at another offset", func(s *sectionPlace) { s.At += 512 }, ".linux", false},
		{"another VirtualSize", func(s *sectionPlace) { s.VirtualSize += 4096 }, ".linux", false},
		{"a digest not hex", func(s *sectionPlace) { s.Loaded = strings.Repeat("z", 64) }, ".linux", false},
		{"a digest too short", func(s *sectionPlace) { s.Loaded = s.Loaded[:62] }, ".linux", false},
	} {
		sp := rec
		c.edit(&sp)
		k := placedKnown(&placement{Sections: map[string]sectionPlace{".linux": sp}})
		sum, ok := k(c.asks, header, nil)
		if ok != c.answer || (ok && sum != digest) {
			t.Errorf("%s: %x, %v; want an answer: %v", c.name, sum, ok, c.answer)
		}
	}
	if placedKnown(nil) != nil || placedKnown(&placement{}) != nil {
		t.Error("a missing record, or one without sections, answers")
	}
}

// measureSections keeps a section's record only where the written UKI's
// header puts that section (its offset, a VirtualSize that holds the bytes)
// and with a store sum to say what they are; any other record is dropped,
// left for measure to hash, never given a loaded digest.
func TestMeasureSectionsDropsWhatTheUKIDoesNotPlace(t *testing.T) {
	kernel := append(tinyStub(t), []byte("kernel code")...)
	initrd := []byte("an initrd, whole")
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	u := image.UKI{Stub: tinyStub(t), Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=t\n"}
	ow := &outWriter{log: io.Discard, kernelSum: sum(kernel), initrdSum: sum(initrd)}
	path := filepath.Join(t.TempDir(), ukiFile)
	if err := writeMeasuredUKI(path, u, nil, nil, ow); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	placed := ow.sections[".initrd"]
	if placed.Loaded != sum(initrd) {
		t.Fatalf(".initrd record %+v", placed)
	}
	for _, c := range []struct {
		name string
		edit func(*sectionPlace)
		kept bool
	}{
		{"as placed", func(*sectionPlace) {}, true},
		{"at another offset", func(s *sectionPlace) { s.At += 512 }, false},
		{"more bytes than the section holds", func(s *sectionPlace) { s.Size = placed.VirtualSize + 1 }, false},
		{"no store sum", func(s *sectionPlace) { s.SHA256 = "" }, false},
	} {
		sp := sectionPlace{At: placed.At, Size: placed.Size, SHA256: placed.SHA256}
		c.edit(&sp)
		o := &outWriter{sections: map[string]sectionPlace{".initrd": sp}}
		if err := o.measureSections(b, u); err != nil {
			t.Fatal(err)
		}
		if got, ok := o.sections[".initrd"]; ok != c.kept || (ok && got.Loaded != sum(initrd)) {
			t.Errorf("%s: record %+v (kept %v), want kept %v with the initrd's sum", c.name, got, ok, c.kept)
		}
	}
}

// readPlacement trusts no record without the UKI's size: a record of size 0
// or less (none the image stage writes) is none.
func TestReadPlacementNeedsTheUKISize(t *testing.T) {
	for rec, want := range map[string]bool{
		`{"uki_size":4096,"placed":{"disk.img":1048576}}`: true,
		`{"uki_size":0,"placed":{"disk.img":1048576}}`:    false,
		`{"uki_size":-1,"placed":{"disk.img":1048576}}`:   false,
		`{"uki_size":4096,`:                               false,
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, placementFile), []byte(rec), 0o644)
		if got := readPlacement(dir) != nil; got != want {
			t.Errorf("%s: trusted %v, want %v", rec, got, want)
		}
	}
}
