package measure_test

import (
	"crypto/sha256"
	"testing"

	"github.com/peerboot/peerboot/measure"
)

// PredictKnown takes a section's digest from Known instead of hashing it:
// the right digests give Predict's values, a wrong one is used as given (so
// the caller's digest really replaces the hash), and "not known" hashes.
func TestPredictKnown(t *testing.T) {
	uki := writeUKI(t, testUKI(t, synthStub(t), []byte("-----BEGIN PUBLIC KEY-----\n")))
	want, err := measure.Predict(uki)
	if err != nil {
		t.Fatal(err)
	}
	hand := handSections(t, uki) // each section's loaded bytes, zero-filled by hand
	right := func(name string, _ measure.PESection, _ []byte) ([32]byte, bool) {
		return sha256.Sum256(hand[name]), true
	}
	for _, tc := range []struct {
		name   string
		known  measure.Known
		asked  []string // the sections Known must be asked about, in order
		equals bool     // the prediction equals Predict's
	}{
		{"nil", nil, nil, true},
		{"none known", func(string, measure.PESection, []byte) ([32]byte, bool) { return [32]byte{}, false }, measuredNames, true},
		{"all known", right, measuredNames, true},
		{"initrd known", func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
			if name != ".initrd" || uint32(len(file)) != s.VirtualSize {
				return [32]byte{}, false
			}
			return sha256.Sum256(file), true
		}, measuredNames, true},
		{"linux known, zero fill included", func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
			if name == ".linux" && uint32(len(file)) >= s.VirtualSize {
				t.Errorf(".linux: file data %d bytes, VirtualSize %d: the zero fill is not left to the digest", len(file), s.VirtualSize)
			}
			return sha256.Sum256(hand[name]), name == ".linux"
		}, measuredNames, true},
		{"wrong initrd digest", func(name string, _ measure.PESection, _ []byte) ([32]byte, bool) {
			return sha256.Sum256([]byte("not the initrd")), name == ".initrd"
		}, measuredNames, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			known := tc.known
			if known != nil {
				known = func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
					asked = append(asked, name)
					return tc.known(name, s, file)
				}
			}
			got, err := measure.PredictKnown(uki, known)
			if err != nil {
				t.Fatal(err)
			}
			if (got.Phases[0].PCR11 == want.Phases[0].PCR11) != tc.equals {
				t.Errorf("PCR 11 %x, Predict's %x: equal should be %v", got.Phases[0].PCR11, want.Phases[0].PCR11, tc.equals)
			}
			if len(got.Phases) != len(want.Phases) || len(got.Sections) != len(want.Sections) {
				t.Errorf("prediction %+v, Predict's %+v", got, want)
			}
			if len(asked) != len(tc.asked) {
				t.Fatalf("Known asked about %v, want %v", asked, tc.asked)
			}
			for i := range asked {
				if asked[i] != tc.asked[i] {
					t.Errorf("Known asked about %v, want %v", asked, tc.asked)
				}
			}
		})
	}
}

var measuredNames = []string{".linux", ".osrel", ".cmdline", ".initrd", ".pcrpkey"}

// Predict's cost over a UKI whose .initrd is most of it, against PredictKnown
// given the .initrd's digest after a byte compare (what publish does).
func BenchmarkPredict(b *testing.B) {
	u := testUKI(b, synthStub(b), nil)
	u.Initrd = make([]byte, 64<<20)
	for i := range u.Initrd {
		u.Initrd[i] = byte(i * 31 >> 7)
	}
	uki := writeUKI(b, u)
	sum := sha256.Sum256(u.Initrd)
	b.Run("whole", func(b *testing.B) {
		b.SetBytes(int64(len(uki)))
		for range b.N {
			if _, err := measure.Predict(uki); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("initrd-known", func(b *testing.B) {
		b.SetBytes(int64(len(uki)))
		known := func(name string, s measure.PESection, file []byte) ([32]byte, bool) {
			return sum, name == ".initrd" && string(file) == string(u.Initrd)
		}
		for range b.N {
			if _, err := measure.PredictKnown(uki, known); err != nil {
				b.Fatal(err)
			}
		}
	})
}
