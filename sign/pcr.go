package sign

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/measure"
	"github.com/peerboot/peerboot/output"
)

// verifyPCRSigs checks every listed .efi that carries a .pcrsig: each
// signature against the UKI's .pcrpkey (and that key against pcrPub when
// given), and each signed policy against the PCR 11 values predicted from the
// UKI's own sections, so a section changed after signing (one .cmdline byte)
// is a problem. A UKI without .pcrsig is fine unless pcrPub asks for one.
func verifyPCRSigs(dir string, sums []output.Sum, pcrPub string, log io.Writer, fail func(string, string, ...any)) error {
	var want []byte
	if pcrPub != "" {
		k, err := LoadPublicKey(pcrPub)
		if err != nil {
			return err
		}
		if want, err = PublicKeyPEM(k); err != nil {
			return fmt.Errorf("%s: %w", pcrPub, err)
		}
	}
	for _, s := range sums {
		if !strings.HasSuffix(s.Path, ".efi") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, s.Path))
		if err != nil {
			continue // named by the hash check
		}
		if _, err := measure.ParsePE(b); err != nil {
			// Not a UKI at all: the hash and Authenticode checks speak for it.
			if want != nil {
				fail(s.Path, "PCR 11 signature: %v", err)
			}
			continue
		}
		res, err := measure.Check(b)
		switch {
		case err != nil:
			fail(s.Path, "PCR 11 signature: %v", err)
		case !res.Signed && want != nil:
			fail(s.Path, "has no .pcrsig, but a PCR public key (%s) was given", pcrPub)
		case !res.Signed:
			fmt.Fprintf(log, "verify: %s: no .pcrsig: PCR 11 predictions not signed\n", s.Path)
		default:
			if want != nil {
				img, _ := measure.ParsePE(b)
				sec, _ := img.Lookup(".pcrpkey")
				got, _ := measure.LoadedData(b, sec)
				if !bytes.Equal(bytes.TrimRight(got, "\x00"), want) {
					fail(s.Path, ".pcrpkey (fingerprint %s) is not the PCR public key given (%s)", res.Fingerprint, pcrPub)
					continue
				}
			}
			ei, _ := res.Prediction.Value(measure.PhaseEnterInitrd)
			fmt.Fprintf(log, "verify: %s: .pcrsig OK: %d phases signed by .pcrpkey %s, PCR 11 at enter-initrd %x\n", s.Path, len(res.Phases), res.Fingerprint[:16], ei)
		}
	}
	return nil
}
