package build

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
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
