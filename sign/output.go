package sign

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/sign/keyref"
)

// ArtifactPubFile (cosign.pub) is written beside the signatures for convenience;
// Verify trusts only the key it is given and checks the copy against it.

// Options say what SignOutput signs with. Key and certificate fields are
// references (file:PATH or env:VAR).
type Options struct {
	DBKey, DBCert string // Secure Boot db key and certificate; both or neither
	ArtifactKey   string // ECDSA P-256 or Ed25519: SHA256SUMS.sig and provenance
	Version       string // the builder version recorded in the provenance
	Log           io.Writer
}

// SignOutput signs a build output directory (as build.Publish writes it) in place:
//
//  1. with a db key: every .efi it lists (peerboot.efi, a UKI in pxe/) is signed
//     with sbsign, and disk.img and peerboot.iso are rewritten around the signed
//     UKI with the same layout, GUIDs and timestamps (checked first: rebuilding
//     from the unsigned UKI must reproduce the published file);
//  2. SHA256SUMS is rewritten with the signed files' hashes and signed
//     (SHA256SUMS.sig, base64; cosign.pub);
//  3. provenance.intoto.jsonl: a DSSE envelope holding an in-toto statement with
//     SLSA provenance, signed with the artifact key.
//
// manifest.json is left as built: its outputs keep the unsigned digests.
func SignOutput(ctx context.Context, dir string, opt Options) error {
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	if opt.ArtifactKey == "" {
		return errors.New("an artifact key is needed (--artifact-key)")
	}
	if (opt.DBKey == "") != (opt.DBCert == "") {
		return errors.New("give both the db key and the db certificate, or neither")
	}
	art, err := LoadSigner(opt.ArtifactKey)
	if err != nil {
		return err
	}
	if err := checkArtifactKey(art.Public()); err != nil {
		return fmt.Errorf("%s: %w", opt.ArtifactKey, err)
	}
	// A directory that is not a build output is the caller's mistake, not a bug.
	for _, name := range []string{output.ManifestFile, output.SumsFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
			return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: not a build output: no %s (peerboot build writes out/RECIPE)", dir, name))
		}
	}
	m, err := readManifest(dir)
	if err != nil {
		return err
	}
	sumsPath := filepath.Join(dir, output.SumsFile)
	sb, err := os.ReadFile(sumsPath)
	if err != nil {
		return err
	}
	sums, err := output.ParseSums(sb)
	if err != nil {
		return fmt.Errorf("%s: %w", sumsPath, err)
	}
	// Sign only what is whole: every listed file must match SHA256SUMS.
	for _, s := range sums {
		h, err := fsutil.HashFile(filepath.Join(dir, s.Path))
		if errors.Is(err, fs.ErrNotExist) {
			return exitcode.Tag(exitcode.Integrity, fmt.Errorf("%s: listed in %s but missing: refusing to sign a changed output", filepath.Join(dir, s.Path), output.SumsFile))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, s.Path), err)
		}
		if h != s.SHA256 {
			return exitcode.Tag(exitcode.Integrity, fmt.Errorf("%s: sha256 %s, but %s lists %s: refusing to sign a changed output", filepath.Join(dir, s.Path), h, output.SumsFile, s.SHA256))
		}
	}
	if opt.DBKey != "" {
		if err := signUKIs(ctx, dir, m, sums, opt); err != nil {
			return err
		}
		for i := range sums {
			if sums[i].SHA256, err = fsutil.HashFile(filepath.Join(dir, sums[i].Path)); err != nil {
				return err
			}
		}
	} else {
		fmt.Fprintln(opt.Log, "sign: no db key given: the UKI stays unsigned for Secure Boot")
	}
	return signArtifacts(dir, m, sums, art, opt)
}

func signUKIs(ctx context.Context, dir string, m *output.Manifest, sums []output.Sum, opt Options) error {
	key, err := LoadSigner(opt.DBKey)
	if err != nil {
		return err
	}
	cert, err := LoadCert(opt.DBCert)
	if err != nil {
		return err
	}
	var uki, unsigned []byte
	var images []*output.Sum // disk.img, peerboot.iso: rebuilt around the signed UKI
	for i, s := range sums {
		p := filepath.Join(dir, s.Path)
		switch {
		case strings.HasSuffix(s.Path, ".efi"):
			if s.Path == output.UKIFile {
				if unsigned, err = os.ReadFile(p); err != nil {
					return err
				}
			}
			if err := SignPE(ctx, key, cert, p, p); err != nil {
				return err
			}
			fmt.Fprintf(opt.Log, "sign: %s: Authenticode-signed (db certificate %s)\n", s.Path, certName(cert))
			if s.Path == output.UKIFile {
				if uki, err = os.ReadFile(p); err != nil {
					return err
				}
			}
		case s.Path == output.DiskFile || s.Path == output.ISOFile:
			images = append(images, &sums[i])
		}
	}
	for _, img := range images {
		if uki == nil {
			return fmt.Errorf("%s: %s is listed but %s is not: cannot rebuild it around a signed UKI", dir, img.Path, output.UKIFile)
		}
		p := filepath.Join(dir, img.Path)
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		write := func(path string, uki []byte) error {
			if img.Path == output.ISOFile {
				return WriteISO(path, m.RecipeDigest, m.SourceDateEpoch, uki)
			}
			return WriteDisk(path, info.Size(), m.RecipeDigest, m.SourceDateEpoch, uki)
		}
		// Prove the layout is the image stage's before replacing the file:
		// the unsigned UKI must give the same bytes.
		check := filepath.Join(dir, "."+img.Path+".check")
		err = write(check, unsigned)
		h := ""
		if err == nil {
			h, err = fsutil.HashFile(check)
		}
		os.Remove(check)
		if err != nil {
			return err
		}
		if h != img.SHA256 {
			return fmt.Errorf("%s: rebuilding it from the unsigned UKI gives sha256 %s, not the published %s: the image stage's layout changed and sign/uki.go must follow it", p, h, img.SHA256)
		}
		if err := write(p, uki); err != nil {
			return err
		}
		fmt.Fprintf(opt.Log, "sign: %s: rewritten around the signed UKI\n", img.Path)
	}
	return nil
}

func signArtifacts(dir string, m *output.Manifest, sums []output.Sum, art crypto.Signer, opt Options) error {
	sumsBytes := output.FormatSums(sums)
	sig, err := SignBlob(art, sumsBytes)
	if err != nil {
		return err
	}
	pub, err := PublicKeyPEM(art.Public())
	if err != nil {
		return err
	}
	st, err := NewStatement(m, sums, opt.Version)
	if err != nil {
		return err
	}
	payload, err := json.Marshal(st)
	if err != nil {
		return err
	}
	env, err := SignEnvelope(art, InTotoPayloadType, payload)
	if err != nil {
		return err
	}
	envBytes, err := MarshalEnvelope(env)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{output.SumsFile, sumsBytes}, {output.SumsSigFile, EncodeSig(sig)}, {ArtifactPubFile, pub}, {output.ProvenanceFile, envBytes}} {
		if err := fsutil.WriteFileAtomic(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(opt.Log, "sign: %s signed (%s, %s), %s written (%d subjects)\n", output.SumsFile, keyref.Kind(art.Public()), output.SumsSigFile, output.ProvenanceFile, len(st.Subject))
	return nil
}

func readManifest(dir string) (*output.Manifest, error) {
	p := filepath.Join(dir, output.ManifestFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m output.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if m.RecipeDigest == "" {
		return nil, fmt.Errorf("%s: no recipe_digest", p)
	}
	return &m, nil
}

// Problem is one verification failure.
type Problem struct {
	File string // relative to the output directory
	What string
}

// VerifyError lists every problem Verify found.
type VerifyError struct {
	Dir      string
	Problems []Problem
}

func (e *VerifyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d verification problem(s):", e.Dir, len(e.Problems))
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %s: %s", p.File, p.What)
	}
	return b.String()
}

// VerifyOptions say what Verify trusts: the artifact public key (a path, or a
// file:/env: reference), and optionally the Secure Boot db certificate.
type VerifyOptions struct {
	Key        string
	DBCert     string
	ModuleCert string // module-signing certificate: every module in the initramfs must verify against it
	PCRPub     string // PCR policy public key (PEM): every UKI's .pcrpkey must be it; "" = whatever .pcrpkey holds
	Log        io.Writer
}

// Verify checks a signed output directory: SHA256SUMS's signature, every listed
// file's hash, the provenance envelope's signature and that its subjects are
// exactly SHA256SUMS's files, cosign.pub (if present) against the key, with
// a db certificate every listed .efi's Authenticode signature, and with a module
// certificate every kernel module's signature inside each listed initramfs
// (pxe/initrd.img and the UKIs' .initrd sections), and every UKI's .pcrsig
// (measure.Check: signed by .pcrpkey, and the PCR 11 its sections give). It returns a
// *VerifyError naming every failing file, or another error when it could not
// run at all (no key).
func Verify(ctx context.Context, dir string, opt VerifyOptions) error {
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	pub, err := LoadPublicKey(opt.Key)
	if err != nil {
		return err
	}
	if err := checkArtifactKey(pub); err != nil {
		return fmt.Errorf("%s: %w", opt.Key, err)
	}
	verr := &VerifyError{Dir: dir}
	fail := func(file, format string, a ...any) {
		verr.Problems = append(verr.Problems, Problem{File: file, What: fmt.Sprintf(format, a...)})
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			fail(name, "cannot be read: %v", err)
			return nil
		}
		return b
	}
	// 1. SHA256SUMS and its signature. An output with neither signature nor
	// provenance was never signed: one problem that says what to run.
	sumsBytes := read(output.SumsFile)
	unsigned := missing(filepath.Join(dir, output.SumsSigFile)) && missing(filepath.Join(dir, output.ProvenanceFile))
	var sigFile []byte
	if unsigned {
		fail(output.SumsSigFile, "not signed: run `peerboot sign %s --artifact-key REF` first", dir)
	} else {
		sigFile = read(output.SumsSigFile)
	}
	var sums []output.Sum
	if sumsBytes != nil {
		if sums, err = output.ParseSums(sumsBytes); err != nil {
			fail(output.SumsFile, "%v", err)
		}
	}
	if sigFile != nil {
		sig, err := DecodeSig(sigFile)
		if err != nil {
			fail(output.SumsSigFile, "%v", err)
		} else if sumsBytes != nil {
			if err := VerifyBlob(pub, sumsBytes, sig); err != nil {
				fail(output.SumsFile, "the signature in %s does not verify (%v): %s or %s was altered, or signed with another key", output.SumsSigFile, err, output.SumsFile, output.SumsSigFile)
			} else {
				fmt.Fprintf(opt.Log, "verify: %s: signature OK (%s)\n", output.SumsFile, keyref.Kind(pub))
			}
		}
	}
	// 2. Every listed file.
	listed := map[string]string{}
	for _, s := range sums {
		listed[s.Path] = s.SHA256
		h, err := fsutil.HashFile(filepath.Join(dir, s.Path))
		if err != nil {
			fail(s.Path, "listed in %s but cannot be read: %v", output.SumsFile, err)
			continue
		}
		if h != s.SHA256 {
			fail(s.Path, "sha256 %s, but %s lists %s", h, output.SumsFile, s.SHA256)
		}
	}
	if sums != nil {
		fmt.Fprintf(opt.Log, "verify: %d files hashed against %s\n", len(sums), output.SumsFile)
	}
	// 2b. The ISO boots the UKI checked below, byte for byte.
	if _, ok := listed[output.ISOFile]; ok {
		if _, ok := listed[output.UKIFile]; !ok {
			fail(output.ISOFile, "listed without %s, so the UKI it boots cannot be checked", output.UKIFile)
		} else if err := isoHoldsUKI(filepath.Join(dir, output.ISOFile), filepath.Join(dir, output.UKIFile)); err != nil {
			fail(output.ISOFile, "%v", err)
		} else {
			fmt.Fprintf(opt.Log, "verify: %s: its UEFI boot image holds %s\n", output.ISOFile, output.UKIFile)
		}
	}
	// 3. The provenance.
	if unsigned {
		// Named above.
	} else if env := read(output.ProvenanceFile); env != nil {
		payload, err := OpenEnvelope(env, pub, InTotoPayloadType)
		if err != nil {
			fail(output.ProvenanceFile, "%v", err)
		} else if st, err := ParseStatement(payload); err != nil {
			fail(output.ProvenanceFile, "%v", err)
		} else {
			checkSubjects(st, listed, sums != nil, fail)
			checkAgainstManifest(dir, st, listed, fail)
			fmt.Fprintf(opt.Log, "verify: %s: DSSE signature OK, %d subjects\n", output.ProvenanceFile, len(st.Subject))
		}
	}
	// 4. The public key copy.
	if b, err := os.ReadFile(filepath.Join(dir, ArtifactPubFile)); err == nil {
		other, err := ParsePublicKeyPEM(b)
		type eq interface{ Equal(crypto.PublicKey) bool }
		if err != nil {
			fail(ArtifactPubFile, "%v", err)
		} else if p, ok := pub.(eq); !ok || !p.Equal(other) {
			fail(ArtifactPubFile, "is not the key given to verify (%s)", opt.Key)
		} else if want, _ := PublicKeyPEM(pub); !bytes.Equal(b, want) {
			fail(ArtifactPubFile, "holds the given key but not in canonical PEM form")
		}
	}
	// 5. Authenticode.
	if opt.DBCert != "" {
		ref := opt.DBCert
		if !strings.HasPrefix(ref, "file:") && !strings.HasPrefix(ref, "env:") {
			ref = "file:" + ref
		}
		cert, err := LoadCert(ref)
		if err != nil {
			return err
		}
		n := 0
		for _, s := range sums {
			if !strings.HasSuffix(s.Path, ".efi") {
				continue
			}
			n++
			if err := VerifyPE(ctx, cert, filepath.Join(dir, s.Path)); err != nil {
				fail(s.Path, "%v", err)
			} else {
				fmt.Fprintf(opt.Log, "verify: %s: Authenticode signature OK (%s)\n", s.Path, certName(cert))
			}
		}
		if n == 0 && sums != nil {
			fail(output.SumsFile, "lists no .efi file to check against the db certificate")
		}
	}
	if opt.DBCert == "" {
		fmt.Fprintln(opt.Log, "verify: no db certificate given: Authenticode signatures not checked")
	}
	// 6. Module signatures, inside each initramfs.
	if opt.ModuleCert != "" {
		ref := opt.ModuleCert
		if !strings.HasPrefix(ref, "file:") && !strings.HasPrefix(ref, "env:") {
			ref = "file:" + ref
		}
		cert, err := LoadCert(ref)
		if err != nil {
			return err
		}
		verifyModules(ctx, dir, sums, cert, opt.Log, fail)
	} else {
		fmt.Fprintln(opt.Log, "verify: no module certificate given: module signatures not checked")
	}
	// 7. Signed PCR 11 predictions (.pcrsig) in each UKI.
	if err := verifyPCRSigs(dir, sums, opt.PCRPub, opt.Log, fail); err != nil {
		return err
	}
	if len(verr.Problems) > 0 {
		return verr
	}
	return nil
}

func missing(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}

func checkSubjects(st *Statement, listed map[string]string, haveSums bool, fail func(string, string, ...any)) {
	seen := map[string]bool{}
	for _, s := range st.Subject {
		if seen[s.Name] {
			fail(output.ProvenanceFile, "subject %s appears twice", s.Name)
		}
		seen[s.Name] = true
		if !haveSums {
			continue
		}
		want, ok := listed[s.Name]
		switch {
		case !ok:
			fail(output.ProvenanceFile, "subject %s is not listed in %s", s.Name, output.SumsFile)
		case len(s.Digest) != 1 || s.Digest["sha256"] != want:
			fail(output.ProvenanceFile, "subject %s has digest %v, but %s lists sha256 %s", s.Name, s.Digest, output.SumsFile, want)
		}
	}
	for name := range listed {
		if !seen[name] {
			fail(output.ProvenanceFile, "lacks subject %s, which %s lists", name, output.SumsFile)
		}
	}
}

// checkAgainstManifest: the provenance must describe the build manifest.json records.
func checkAgainstManifest(dir string, st *Statement, listed map[string]string, fail func(string, string, ...any)) {
	if _, ok := listed[output.ManifestFile]; !ok {
		return
	}
	m, err := readManifest(dir)
	if err != nil {
		fail(output.ManifestFile, "%v", err)
		return
	}
	want, err := NewStatement(m, nil, st.Predicate.RunDetails.Builder.Version["peerboot"])
	if err != nil {
		fail(output.ManifestFile, "%v", err)
		return
	}
	a, _ := json.Marshal(want.Predicate.BuildDefinition)
	b, _ := json.Marshal(st.Predicate.BuildDefinition)
	if !bytes.Equal(a, b) {
		fail(output.ProvenanceFile, "buildDefinition differs from what %s records (recipe, inputs, stages)", output.ManifestFile)
	}
}

// isoHoldsUKI checks that the ISO's El Torito UEFI image boots exactly ukiPath.
func isoHoldsUKI(isoPath, ukiPath string) error {
	f, err := os.Open(isoPath)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	got, err := image.ISOUKI(f, info.Size())
	if err != nil {
		return fmt.Errorf("reading its UKI: %w", err)
	}
	want, err := os.ReadFile(ukiPath)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		gh, wh := sha256.Sum256(got), sha256.Sum256(want)
		return fmt.Errorf("its UEFI boot image holds a UKI with sha256 %x, not %s's %x", gh, output.UKIFile, wh)
	}
	return nil
}
