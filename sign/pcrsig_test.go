package sign

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// What verifyPCRSigs says of each .efi of an output, with and without a PCR
// public key: a file that is not PE at all is a problem only when a key says
// a signed UKI was expected; an unsigned PE is logged without a key and a
// problem with one; files that are not .efi are not its business.
func TestVerifyPCRSigsFiles(t *testing.T) {
	dir := t.TempDir()
	for name, b := range map[string][]byte{
		"notpe.efi":  []byte("not a PE file"),
		"plain.efi":  minimalPE(7),
		"readme.txt": []byte("not PE either"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums := []output.Sum{{Path: "notpe.efi"}, {Path: "plain.efi"}, {Path: "readme.txt"}, {Path: "gone.efi"}}
	for _, c := range []struct {
		pcrPub string
		fails  []string // "path: message" substrings, in order
		log    string
	}{
		{"", nil, "verify: plain.efi: no .pcrsig: PCR 11 predictions not signed"},
		{filepath.Join(testKeys, PCRPubFile), []string{"notpe.efi: PCR 11 signature: ", "plain.efi: has no .pcrsig, but a PCR public key"}, ""},
	} {
		var fails []string
		var log bytes.Buffer
		err := verifyPCRSigs(dir, sums, c.pcrPub, &log, func(path, format string, args ...any) {
			fails = append(fails, path+": "+fmt.Sprintf(format, args...))
		})
		if err != nil {
			t.Fatalf("key %q: %v", c.pcrPub, err)
		}
		if len(fails) != len(c.fails) {
			t.Errorf("key %q: problems %q, want %q", c.pcrPub, fails, c.fails)
			continue
		}
		for i := range fails {
			if !strings.HasPrefix(fails[i], c.fails[i]) {
				t.Errorf("key %q: problem %q, want %q...", c.pcrPub, fails[i], c.fails[i])
			}
		}
		if !strings.Contains(log.String(), c.log) {
			t.Errorf("key %q: log %q lacks %q", c.pcrPub, log.String(), c.log)
		}
	}
	if err := verifyPCRSigs(dir, sums, filepath.Join(dir, "readme.txt"), &bytes.Buffer{}, func(string, string, ...any) {}); err == nil {
		t.Error("a PCR public key file that is no key was taken")
	}
}
