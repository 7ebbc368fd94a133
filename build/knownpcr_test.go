package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/stubtest"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

// knownInitrd gives the .initrd's digest only for the very bytes it was made
// from: a digest that is used shows as a prediction unlike Predict's when it
// is wrong, so each case gives a bogus sum where "used" must show.
func TestKnownInitrd(t *testing.T) {
	initrd := bytes.Repeat([]byte("initrd\x01"), 3000)
	uki, err := measuredUKI(t, image.UKI{Stub: tinyStub(t), Kernel: bytes.Repeat([]byte("kernel"), 900), Initrd: initrd, Cmdline: "c"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := measure.Predict(uki)
	if err != nil {
		t.Fatal(err)
	}
	bogus := sha256.Sum256([]byte("bogus"))
	other := bytes.Clone(initrd)
	other[len(other)-1] ^= 1
	for _, tc := range []struct {
		name   string
		initrd []byte
		sum    [32]byte
		used   bool
	}{
		{"same bytes, right sum", initrd, sha256.Sum256(initrd), false}, // used, but equal: shown by the bogus case
		{"same bytes, bogus sum", initrd, bogus, true},
		{"last byte differs", other, bogus, false},
		{"a prefix", initrd[:len(initrd)-1], bogus, false},
		{"longer", append(bytes.Clone(initrd), 0), bogus, false},
		{"empty", nil, bogus, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := measure.PredictKnown(uki, knownInitrd(tc.initrd, tc.sum))
			if err != nil {
				t.Fatal(err)
			}
			if differs := got.Phases[0].PCR11 != want.Phases[0].PCR11; differs != tc.used {
				t.Errorf("prediction differs from Predict's: %v, want %v", differs, tc.used)
			}
		})
	}
}

// publishedDefault is the default recipe's published output directory
// (out/default at the top of the tree, or $PEERBOOT_TEST_IMAGE) with its
// UKI, the initrd the image stage put in it (pxe/initrd.img, the store's
// initramfs file) and that file's sha256 as the store recorded it.
func publishedDefault(t *testing.T) (uki, kernel, initrd []byte, sum [32]byte) {
	t.Helper()
	dir := os.Getenv("PEERBOOT_TEST_IMAGE")
	if dir == "" {
		dir = "out/default"
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			testguard.Skipf(t, "the default image is not published (make image, or set PEERBOOT_TEST_IMAGE): %v", err)
		}
		return b
	}
	uki, kernel, initrd = read(output.UKIFile), read("pxe/vmlinuz"), read("pxe/initrd.img")
	sums, err := output.ParseSums(read(output.SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.Path == "pxe/initrd.img" {
			b, err := hex.DecodeString(s.SHA256)
			if err != nil || len(b) != 32 {
				t.Fatalf("SHA256SUMS: pxe/initrd.img %q", s.SHA256)
			}
			return uki, kernel, initrd, [32]byte(b)
		}
	}
	t.Fatal("SHA256SUMS lists no pxe/initrd.img")
	return
}

// The published default UKI and a signed UKI made of its real kernel and
// initrd and the real stub: the prediction from the initrd's recorded
// digest equals the whole-UKI hash's, and the digest is really used (a bogus
// one changes the prediction); the signed UKI, written with the recorded
// digest, passes measure.Check, which hashes every section.
func TestKnownInitrdRealUKI(t *testing.T) {
	testguard.Short(t, "hashes the 80 MiB default UKI several times")
	uki, kernel, initrd, sum := publishedDefault(t)
	signed := filepath.Join(t.TempDir(), "signed.efi")
	key, err := pcrSigner([]byte(testRSAKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	u := image.UKI{Stub: stubtest.Real(t, "../recipes/default.lock"), Kernel: kernel, Initrd: initrd, Cmdline: "console=ttyS0", OSRelease: "ID=peerboot\n"}
	if err := writeMeasuredUKI(signed, u, key, knownInitrd(initrd, sum), nil); err != nil {
		t.Fatal(err)
	}
	signedUKI, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := measure.Check(signedUKI); err != nil || !res.Signed || len(res.Phases) != len(measure.DefaultPhases) {
		t.Fatalf("signed UKI: Check %+v, %v", res, err)
	}
	for name, b := range map[string][]byte{"published": uki, "signed": signedUKI} {
		t.Run(name, func(t *testing.T) {
			whole, err := measure.Predict(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := measure.PredictKnown(b, knownInitrd(initrd, sum))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Phases) != len(whole.Phases) || strings.Join(got.Sections, " ") != strings.Join(whole.Sections, " ") {
				t.Fatalf("prediction %+v, whole hash %+v", got, whole)
			}
			for i := range got.Phases {
				if got.Phases[i] != whole.Phases[i] {
					t.Errorf("phase %q: from the recorded digest %x, whole hash %x", whole.Phases[i].Name, got.Phases[i].PCR11, whole.Phases[i].PCR11)
				}
			}
			bogus, _ := measure.PredictKnown(b, knownInitrd(initrd, [32]byte{1}))
			if bogus.Phases[0].PCR11 == whole.Phases[0].PCR11 {
				t.Error("the recorded digest was not used: .initrd is not the published initrd.img byte for byte")
			}
			t.Logf("%s UKI: sections %v, PCR 11 at enter-initrd %x", name, got.Sections, got.Phases[1].PCR11)
		})
	}
}

// Publish takes the .initrd's digest from the initramfs output in the store
// and writes the same PCR 11 as a whole hash of the UKI.
func TestPublishPCR11KnownInitrd(t *testing.T) {
	st, _ := store.Open(t.TempDir())
	initrd := bytes.Repeat([]byte("an initrd\n"), 5000)
	ini := "initramfs-" + strings.Repeat("4", 64)
	dir, _ := st.NewScratch("initramfs")
	if err := os.WriteFile(filepath.Join(dir, initrdFile), initrd, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitOutput(ini, dir); err != nil {
		t.Fatal(err)
	}
	uki, err := measuredUKI(t, image.UKI{Stub: tinyStub(t), Kernel: bytes.Repeat([]byte("kernel"), 900), Initrd: initrd, Cmdline: "console=ttyS0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	img := "image-" + strings.Repeat("5", 64)
	imageOutput(t, st, img, string(uki))
	known, release := initrdKnown(st, &Stage{Name: StageInitramfs, Key: ini})
	if known == nil {
		t.Fatal("initrdKnown: no digest from the initramfs output in the store")
	}
	release()
	r := &recipe.Resolved{Recipe: recipe.Recipe{Name: "t"}, Digest: "sha256:" + strings.Repeat("d", 64)}
	plan := &Plan{Recipe: r, Stages: []*Stage{{Name: StageInitramfs, Key: ini}, {Name: StageImage, Key: img}}}
	out, err := Publish(context.Background(), plan, st, nil, 1700000000, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var m output.Manifest
	b, _ := os.ReadFile(filepath.Join(out, output.ManifestFile))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	p, _ := measure.Predict(uki)
	if m.PCR11 == nil || strings.Join(m.PCR11.Sections, " ") != ".linux .cmdline .initrd" || len(m.PCR11.Phases) != len(p.Phases) {
		t.Fatalf("manifest pcr11: %+v", m.PCR11)
	}
	for i, ph := range m.PCR11.Phases {
		if ph.Value != hex.EncodeToString(p.Phases[i].PCR11[:]) {
			t.Errorf("phase %q: manifest %s, whole hash %x", ph.Phase, ph.Value, p.Phases[i].PCR11)
		}
	}
}
