package measure_test

import (
	"bytes"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/measure"
)

// FuzzMeasuredSections feeds the PE section parser arbitrary bytes: it must
// never panic, and what it accepts must be consistent (every measured section
// is as long as its VirtualSize, in the stub's order, .pcrsig never among them).
func FuzzMeasuredSections(f *testing.F) {
	t := &testing.T{}
	small := image.UKI{Stub: synthStub(t), Kernel: fakeKernel(700, 0x2000), Initrd: []byte("initrd"), Cmdline: "quiet", OSRelease: "ID=x\n", PCRSig: []byte(`{"sha256":[]}`)}
	var b bytes.Buffer
	if err := image.WriteUKI(&b, small); err != nil {
		f.Fatal(err)
	}
	uki := b.Bytes()
	f.Add(uki)
	f.Add(uki[:0x400])
	f.Add(synthStub(t))
	f.Add([]byte("MZ"))
	f.Add(append([]byte("MZ"), make([]byte, 100)...))
	f.Fuzz(func(t *testing.T, in []byte) {
		secs, err := measure.MeasuredSections(in)
		if err != nil {
			return
		}
		img, err := measure.ParsePE(in)
		if err != nil {
			t.Fatalf("MeasuredSections accepted what ParsePE refuses: %v", err)
		}
		last := -1
		for _, s := range secs {
			h, ok := img.Lookup(s.Name)
			if !ok || uint32(len(s.Data)) != h.VirtualSize {
				t.Fatalf("section %s: %d bytes, header %+v", s.Name, len(s.Data), h)
			}
			i := indexOf(measure.UnifiedSections, s.Name)
			if i <= last || s.Name == ".pcrsig" {
				t.Fatalf("sections out of the stub's order or .pcrsig measured: %v", names(secs))
			}
			last = i
		}
		p := measure.PredictSections(secs)
		if _, ok := p.Value(measure.PhaseEnterInitrd); !ok {
			t.Fatal("no enter-initrd prediction")
		}
		measure.Check(in) // must not panic
	})
}

// FuzzParsePCRSig: a .pcrsig section is outside bytes too.
func FuzzParsePCRSig(f *testing.F) {
	f.Add([]byte(`{"sha256":[{"pcrs":[11],"pkfp":"42f8abd14d30708737c8fc0caa07896355ac661ff08fa12b6bd7b1d691cb91a0","pol":"812f209bd3dd9cebf4914791de56f1994d2b7f67f379205db1c65637e573d56e","sig":"IQ+6"}]}` + "\n"))
	f.Add([]byte(`{"sha256":[]}`))
	f.Add([]byte(`{"sha1":[{"pcrs":[11]}]}` + "\x00\x00"))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, in []byte) {
		doc, err := measure.ParsePCRSig(in)
		if err != nil {
			return
		}
		for _, e := range doc.SHA256 {
			if len(e.PKFP) != 64 || len(e.Pol) != 64 {
				t.Fatalf("accepted a malformed entry %+v", e)
			}
		}
	})
}

func indexOf(l []string, s string) int {
	for i, v := range l {
		if v == s {
			return i
		}
	}
	return -1
}

func names(secs []measure.Section) []string {
	var n []string
	for _, s := range secs {
		n = append(n, s.Name)
	}
	return n
}
