package sign

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
)

// pcrSignedUKI is a UKI over minimalPE's code with .pcrpkey and .pcrsig from
// the test key set's PCR key, built as the image stage builds it.
func pcrSignedUKI(t *testing.T, cmdline string) []byte {
	t.Helper()
	stub := ukiStub()
	key, err := LoadSigner(key(PCRKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(testKeys, PCRPubFile))
	if err != nil {
		t.Fatal(err)
	}
	u := image.UKI{Stub: stub, Kernel: bytes.Repeat([]byte("bzImage "), 3000), Initrd: []byte("initrd"), Cmdline: cmdline, OSRelease: "ID=peerboot\n", PCRPKey: pub}
	var b bytes.Buffer
	if err := image.WriteUKI(&b, u); err != nil {
		t.Fatal(err)
	}
	p, err := measure.Predict(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if u.PCRSig, err = measure.Sign(p, key); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := image.WriteUKI(&b, u); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestVerifyPCRSig(t *testing.T) {
	needTool(t, "sbsign")
	needTool(t, "sbverify")
	ctx := context.Background()
	good := pcrSignedUKI(t, "console=ttyS0")

	// Signed for Secure Boot: Authenticode leaves the sections, so .pcrsig still checks.
	dir := writeSyntheticWith(t, false, map[string][]byte{output.UKIFile: good})
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	vo := verifyOpts(ArtifactPubFile)
	vo.PCRPub, vo.Log = filepath.Join(testKeys, PCRPubFile), &log
	if err := Verify(ctx, dir, vo); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "peerboot.efi: .pcrsig OK: 4 phases") {
		t.Errorf("verify log lacks the .pcrsig check:\n%s", log.String())
	}

	// One .cmdline byte changed after signing, the output re-signed around it
	// (SHA256SUMS, provenance): only the PCR check can see it.
	img, _ := measure.ParsePE(good)
	sec, _ := img.Lookup(".cmdline")
	bad := append([]byte(nil), good...)
	bad[sec.PointerToRaw+12] ^= 1 // "console=ttyS0" -> "console=ttyS1"
	opts := signOpts(ArtifactKeyFile)
	opts.DBKey, opts.DBCert = "", ""
	vo.DBCert = ""
	for _, tc := range []struct {
		name, pcrPub string
		uki          []byte
		want         string
	}{
		{"tampered .cmdline", "", bad, "matches no PCR 11 value predicted from the UKI's sections"},
		{"another PCR key", filepath.Join(testKeys, ArtifactPubFile), good, "is not the PCR public key given"},
		{"no .pcrsig", filepath.Join(testKeys, PCRPubFile), minimalPE(7), "has no .pcrsig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeSyntheticWith(t, false, map[string][]byte{output.UKIFile: tc.uki})
			if err := SignOutput(ctx, dir, opts); err != nil {
				t.Fatal(err)
			}
			vo := vo
			vo.PCRPub, vo.Log = tc.pcrPub, nil
			err := Verify(ctx, dir, vo)
			var ve *VerifyError
			if !errors.As(err, &ve) || !names(ve, output.UKIFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify = %v, want a %s problem containing %q", err, output.UKIFile, tc.want)
			}
		})
	}
}
