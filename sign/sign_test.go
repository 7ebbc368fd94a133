package sign

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/sign/keyref"
)

const (
	snakeoilKey  = "/usr/share/ovmf/PkKek-1-snakeoil.key"
	snakeoilCert = "/usr/share/ovmf/PkKek-1-snakeoil.pem"
)

var testKeys string // a key set from InitTestKeys, shared by the tests

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "peerboot-sign-test")
	if err != nil {
		panic(err)
	}
	testKeys = filepath.Join(d, "keys")
	if _, err := InitTestKeys(testKeys); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

func key(name string) string { return "file:" + filepath.Join(testKeys, name) }

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is needed (peerboot doctor --packages): %v", name, err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestInitTestKeys(t *testing.T) {
	for _, n := range []string{DBKeyFile, ModuleKeyFile, ArtifactKeyFile, Ed25519KeyFile} {
		s, err := LoadSigner(key(n))
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(filepath.Join(testKeys, n)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", n, fi.Mode().Perm())
		}
		_ = s
	}
	db, _ := LoadSigner(key(DBKeyFile))
	if k := keyref.Kind(db.Public()); k != "RSA 2048" {
		t.Errorf("db key is %s, want RSA 2048", k)
	}
	cert, err := LoadCert(key(DBCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := certMatchesKey(cert, db); err != nil {
		t.Error(err)
	}
	if !strings.Contains(cert.Subject.CommonName, "TEST") {
		t.Errorf("db certificate subject %q does not say TEST", cert.Subject.CommonName)
	}
	if _, ok := mustSigner(t, key(ArtifactKeyFile)).Public().(*ecdsa.PublicKey); !ok {
		t.Error("artifact.key is not ECDSA")
	}
	if _, err := InitTestKeys(testKeys); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second init over the same dir: %v, want a refusal", err)
	}
	file := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := InitTestKeys(file); err == nil || err.Error() != file+" is a file: keys init writes its key set into a directory (a new one, or one without keys)" {
		t.Errorf("init over a file: %v, want it named as a file", err)
	}
	// An independent parser accepts what we wrote.
	needTool(t, "openssl")
	run(t, "openssl", "x509", "-in", filepath.Join(testKeys, ModuleCertFile), "-noout", "-text")
	run(t, "openssl", "pkey", "-in", filepath.Join(testKeys, ArtifactKeyFile), "-noout")
}

func mustSigner(t *testing.T, ref string) interface {
	Public() any
} {
	t.Helper()
	s, err := LoadSigner(ref)
	if err != nil {
		t.Fatal(err)
	}
	return publicOnly{s.Public()}
}

type publicOnly struct{ p any }

func (p publicOnly) Public() any { return p.p }

func TestKeyReferences(t *testing.T) {
	pemText, err := os.ReadFile(filepath.Join(testKeys, ArtifactKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PB_TEST_KEY", string(pemText))
	a, err := LoadSigner("env:PB_TEST_KEY")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadSigner(key(ArtifactKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Public().(*ecdsa.PublicKey).Equal(b.Public()) {
		t.Error("env: and file: references give different keys")
	}
	for ref, want := range map[string]string{
		"env:PB_TEST_UNSET":   "PB_TEST_UNSET is not set",
		"file:/nonexistent/k": "no such file",
		"/plain/path":         "want file:PATH or env:VAR",
		"kms:foo":             "unknown kind",
		key(DBCertFile):       "no PEM private key",
	} {
		if _, err := LoadSigner(ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadSigner(%q): %v, want an error containing %q", ref, err, want)
		}
	}
}

func TestEncryptedSnakeoilKey(t *testing.T) {
	if _, err := os.Stat(snakeoilKey); err != nil {
		t.Fatalf("Debian's ovmf package is needed for its snakeoil key: %v", err)
	}
	t.Setenv(PassphraseEnv, "snakeoil")
	k, err := LoadSigner("file:" + snakeoilKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := LoadCert("file:" + snakeoilCert)
	if err != nil {
		t.Fatal(err)
	}
	if err := certMatchesKey(cert, k); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PassphraseEnv, "wrong")
	if _, err := LoadSigner("file:" + snakeoilKey); err == nil || !strings.Contains(err.Error(), "wrong passphrase") || !strings.Contains(err.Error(), snakeoilKey) {
		t.Errorf("wrong passphrase: %v", err)
	}
	os.Unsetenv(PassphraseEnv)
	if _, err := LoadSigner("file:" + snakeoilKey); err == nil || !strings.Contains(err.Error(), PassphraseEnv) {
		t.Errorf("no passphrase: %v", err)
	}
	// Our PBES2 decryption agrees with OpenSSL's, for AES as well.
	needTool(t, "openssl")
	dir := t.TempDir()
	aes := filepath.Join(dir, "aes.key")
	run(t, "openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", filepath.Join(testKeys, DBKeyFile), "-out", aes, "-passout", "pass:pw")
	t.Setenv(PassphraseEnv, "pw")
	ka, err := LoadSigner("file:" + aes)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := LoadSigner(key(DBKeyFile))
	if err := certMatchesKey(mustCert(t, key(DBCertFile)), ka); err != nil || db == nil {
		t.Errorf("AES-encrypted copy of db.key: %v", err)
	}
}

func mustCert(t *testing.T, ref string) *x509.Certificate {
	c, err := LoadCert(ref)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The cosign blob format, checked by an independent implementation: OpenSSL
// verifies our base64-decoded signature over the file with cosign.pub.
func TestBlobSignatureOpenSSL(t *testing.T) {
	needTool(t, "openssl")
	dir := t.TempDir()
	data := []byte("0123  a\nabcd  b\n")
	file := filepath.Join(dir, "SHA256SUMS")
	os.WriteFile(file, data, 0o644)
	for _, c := range []struct{ key, pub string }{{ArtifactKeyFile, ArtifactPubFile}, {Ed25519KeyFile, Ed25519PubFile}} {
		s, err := LoadSigner(key(c.key))
		if err != nil {
			t.Fatal(err)
		}
		sig, err := SignBlob(s, data)
		if err != nil {
			t.Fatal(err)
		}
		enc := EncodeSig(sig)
		raw, err := base64.StdEncoding.DecodeString(string(enc))
		if err != nil {
			t.Fatal(err)
		}
		sigFile := filepath.Join(dir, c.key+".sig.der")
		os.WriteFile(sigFile, raw, 0o644)
		pub := filepath.Join(testKeys, c.pub)
		if c.key == ArtifactKeyFile {
			out := run(t, "openssl", "dgst", "-sha256", "-verify", pub, "-signature", sigFile, file)
			if !strings.Contains(out, "Verified OK") {
				t.Errorf("openssl dgst: %s", out)
			}
			bad := append([]byte(nil), data...)
			bad[0] ^= 1
			os.WriteFile(file+".bad", bad, 0o644)
			if o, err := exec.Command("openssl", "dgst", "-sha256", "-verify", pub, "-signature", sigFile, file+".bad").CombinedOutput(); err == nil {
				t.Errorf("openssl accepted a changed file: %s", o)
			}
		} else {
			out := run(t, "openssl", "pkeyutl", "-verify", "-pubin", "-inkey", pub, "-rawin", "-in", file, "-sigfile", sigFile)
			if !strings.Contains(out, "Signature Verified Successfully") {
				t.Errorf("openssl pkeyutl: %s", out)
			}
		}
		p, err := LoadPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		if err := VerifyBlob(p, data, sig); err != nil {
			t.Error(err)
		}
		if _, err := DecodeSig(append(enc, '\n')); err == nil {
			t.Error("DecodeSig accepted a trailing newline")
		}
	}
}

func TestPAE(t *testing.T) {
	// The example from the DSSE protocol document.
	got := string(PAE("http://example.com/HelloWorld", []byte("hello world")))
	want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"
	if got != want {
		t.Errorf("PAE = %q, want %q", got, want)
	}
}

// writeSynthetic makes a small build output like build.Publish's, without a disk.
func writeSynthetic(t *testing.T, withDisk bool) string {
	return writeSyntheticWith(t, withDisk, nil)
}

// writeSyntheticWith is writeSynthetic with some files replaced.
func writeSyntheticWith(t *testing.T, withDisk bool, replace map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "default")
	files := map[string][]byte{
		output.UKIFile:   minimalPE(7),
		"pxe/boot.ipxe":  []byte("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n"),
		"pxe/vmlinuz":    bytes.Repeat([]byte("kernel"), 700),
		"pxe/initrd.img": bytes.Repeat([]byte{0x1f, 0x8b, 0, 1}, 500),
	}
	maps.Copy(files, replace)
	m := output.Manifest{Recipe: "default", RecipeDigest: "sha256:" + strings.Repeat("ab", 32), SourceDateEpoch: 1700000000,
		Inputs: []output.ManifestInput{{Role: "kernel-source", Name: "linux-source-6.1_6.1.192-3", Digest: "sha256:" + strings.Repeat("01", 32)},
			{Role: "driver-source", Name: "open-gpu-kernel-modules", Digest: "git:" + strings.Repeat("c", 40)}},
		Stages: []output.ManifestStage{{Name: "kernel", Key: "kernel-" + strings.Repeat("1", 64)}, {Name: "image", Key: "image-" + strings.Repeat("2", 64)}}}
	if withDisk {
		p := filepath.Join(t.TempDir(), "disk.img")
		if err := WriteDisk(p, 72<<20, m.RecipeDigest, m.SourceDateEpoch, files[output.UKIFile]); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[output.DiskFile] = b
		p = filepath.Join(t.TempDir(), output.ISOFile)
		if err := WriteISO(p, m.RecipeDigest, m.SourceDateEpoch, files[output.UKIFile]); err != nil {
			t.Fatal(err)
		}
		if files[output.ISOFile], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var sums []output.Sum
	for _, n := range names {
		h := sha256.Sum256(files[n])
		m.Outputs = append(m.Outputs, output.ManifestOutput{Path: n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(h[:])})
		sums = append(sums, output.Sum{Path: n, SHA256: hex.EncodeToString(h[:])})
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	files[output.ManifestFile] = append(mj, '\n')
	h := sha256.Sum256(files[output.ManifestFile])
	sums = append(sums, output.Sum{Path: output.ManifestFile, SHA256: hex.EncodeToString(h[:])})
	files[output.SumsFile] = output.FormatSums(sums)
	for n, b := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func signOpts(artifact string) Options {
	return Options{DBKey: key(DBKeyFile), DBCert: key(DBCertFile), ArtifactKey: key(artifact), Version: "test"}
}

func verifyOpts(pub string) VerifyOptions {
	return VerifyOptions{Key: filepath.Join(testKeys, pub), DBCert: filepath.Join(testKeys, DBCertFile)}
}

func TestSignAndVerify(t *testing.T) {
	needTool(t, "sbsign")
	needTool(t, "sbverify")
	ctx := context.Background()
	dir := writeSynthetic(t, false)
	unsigned, _ := os.ReadFile(filepath.Join(dir, output.UKIFile))
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, dir, verifyOpts(ArtifactPubFile)); err != nil {
		t.Fatal(err)
	}
	signed, _ := os.ReadFile(filepath.Join(dir, output.UKIFile))
	if ok, _ := PESigned(signed); !ok || bytes.Equal(signed, unsigned) {
		t.Fatal("peerboot.efi was not signed")
	}
	// The statement's subjects are SHA256SUMS's files; the unsigned UKI is a byproduct.
	env, _ := os.ReadFile(filepath.Join(dir, output.ProvenanceFile))
	pub, _ := LoadPublicKey(filepath.Join(testKeys, ArtifactPubFile))
	payload, err := OpenEnvelope(env, pub, InTotoPayloadType)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatement(payload)
	if err != nil {
		t.Fatal(err)
	}
	uh := sha256.Sum256(unsigned)
	if bp := st.Predicate.RunDetails.Byproducts; len(bp) != 1 || bp[0].Name != output.UKIFile || bp[0].Digest["sha256"] != hex.EncodeToString(uh[:]) {
		t.Errorf("byproducts %+v, want the unsigned UKI", bp)
	}
	if len(st.Subject) != 5 || len(st.Predicate.BuildDefinition.ResolvedDependencies) != 2 || st.Predicate.BuildDefinition.ResolvedDependencies[1].Digest["gitCommit"] == "" {
		t.Errorf("statement %s", payload)
	}
	// The DSSE signature, checked by OpenSSL over PAE(type, payload).
	var e Envelope
	json.Unmarshal(env, &e)
	td := t.TempDir()
	os.WriteFile(filepath.Join(td, "pae"), PAE(e.PayloadType, payload), 0o644)
	raw, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
	os.WriteFile(filepath.Join(td, "sig"), raw, 0o644)
	run(t, "openssl", "dgst", "-sha256", "-verify", filepath.Join(testKeys, ArtifactPubFile), "-signature", filepath.Join(td, "sig"), filepath.Join(td, "pae"))
	// sbverify, independently, with the db certificate.
	run(t, "sbverify", "--cert", filepath.Join(testKeys, DBCertFile), filepath.Join(dir, output.UKIFile))

	// Signing twice is refused: the UKI already carries a signature.
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err == nil || !strings.Contains(err.Error(), "already carries") {
		t.Errorf("re-signing: %v", err)
	}
	// Another key, another db certificate: failures name the files.
	err = Verify(ctx, dir, VerifyOptions{Key: filepath.Join(testKeys, Ed25519PubFile), DBCert: snakeoilCert})
	for _, want := range []string{"SHA256SUMS: the signature in SHA256SUMS.sig does not verify", "provenance.intoto.jsonl: ", "cosign.pub: is not the key", "peerboot.efi: Authenticode signature does not verify"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("verify with other keys: want %q in\n%v", want, err)
		}
	}
}

// Every single-byte flip in any signed file makes Verify fail, naming the file.
func TestVerifyDetectsFlips(t *testing.T) {
	needTool(t, "sbsign")
	ctx := context.Background()
	dir := writeSynthetic(t, false)
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	vo := verifyOpts(ArtifactPubFile)
	if err := Verify(ctx, dir, vo); err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			r, _ := filepath.Rel(dir, p)
			files = append(files, r)
		}
		return nil
	})
	sort.Strings(files)
	if len(files) != 9 {
		t.Fatalf("signed output holds %v", files)
	}
	const perFile = 12 // 9 files × 12 = 108 flips
	total, missed := 0, 0
	for _, f := range files {
		p := filepath.Join(dir, f)
		orig, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perFile; i++ {
			// Spread over the file: first and last byte, evenly in between.
			pos := i * (len(orig) - 1) / (perFile - 1)
			for _, x := range []byte{0x01} {
				b := append([]byte(nil), orig...)
				b[pos] ^= x
				os.WriteFile(p, b, 0o644)
				err := Verify(ctx, dir, vo)
				total++
				var ve *VerifyError
				if !errors.As(err, &ve) {
					t.Errorf("%s: flip at %d/%d: Verify = %v, want a VerifyError", f, pos, len(orig), err)
					missed++
					continue
				}
				if !names(ve, f) {
					missed++
					t.Errorf("%s: flip at %d/%d: the failure does not name the file:\n%v", f, pos, len(orig), err)
				}
			}
		}
		os.WriteFile(p, orig, 0o644)
	}
	if total < 100 {
		t.Fatalf("only %d flips", total)
	}
	if err := Verify(ctx, dir, vo); err != nil {
		t.Fatalf("after restoring: %v", err)
	}
	if missed > 0 {
		t.Fatalf("%d of %d single-byte flips over %d files were not detected (or not named)", missed, total, len(files))
	}
	t.Logf("%d single-byte flips over %d files, each detected", total, len(files))
}

func names(ve *VerifyError, f string) bool {
	for _, p := range ve.Problems {
		if p.File == f || strings.Contains(p.What, f+" ") {
			return true
		}
	}
	return false
}

// Ed25519 signatures, and so the whole signed output, are deterministic.
func TestEd25519Deterministic(t *testing.T) {
	ctx := context.Background()
	var got [][]byte
	for i := 0; i < 2; i++ {
		dir := writeSynthetic(t, false)
		o := signOpts(Ed25519KeyFile)
		o.DBKey, o.DBCert = "", "" // RSA PKCS#1 v1.5 is deterministic too, but keep to the point
		if err := SignOutput(ctx, dir, o); err != nil {
			t.Fatal(err)
		}
		vo := verifyOpts(Ed25519PubFile)
		vo.DBCert = ""
		if err := Verify(ctx, dir, vo); err != nil {
			t.Fatal(err)
		}
		var all []byte
		for _, f := range []string{output.SumsFile, output.SumsSigFile, output.ProvenanceFile, ArtifactPubFile} {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		got = append(got, all)
	}
	if !bytes.Equal(got[0], got[1]) {
		t.Error("signing the same output twice with Ed25519 gave different bytes")
	}
	s, _ := LoadSigner(key(Ed25519KeyFile))
	a, _ := SignBlob(s, []byte("x"))
	b, _ := SignBlob(s, []byte("x"))
	if !bytes.Equal(a, b) || len(a) != ed25519.SignatureSize {
		t.Error("Ed25519 SignBlob is not deterministic")
	}
}

// The disk and the ISO are rebuilt around the signed UKI with the published layout.
func TestSignRebuildsDisk(t *testing.T) {
	needTool(t, "sbsign")
	ctx := context.Background()
	dir := writeSynthetic(t, true)
	before, _ := fsutil.HashFile(filepath.Join(dir, output.DiskFile))
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, dir, verifyOpts(ArtifactPubFile)); err != nil {
		t.Fatal(err)
	}
	disk, _ := os.ReadFile(filepath.Join(dir, output.DiskFile))
	uki, _ := os.ReadFile(filepath.Join(dir, output.UKIFile))
	if !bytes.Contains(disk, uki) {
		t.Error("disk.img does not hold the signed UKI")
	}
	if h, _ := fsutil.HashFile(filepath.Join(dir, output.DiskFile)); h == before {
		t.Error("disk.img unchanged")
	}
	isoPath := filepath.Join(dir, output.ISOFile)
	isoInfo, _ := os.Stat(isoPath)
	isoFile, _ := os.Open(isoPath)
	defer isoFile.Close()
	if got, err := image.ISOUKI(isoFile, isoInfo.Size()); err != nil || !bytes.Equal(got, uki) {
		t.Errorf("peerboot.iso does not boot the signed UKI (%v)", err)
	}
	wantISO := filepath.Join(t.TempDir(), "i")
	if err := WriteISO(wantISO, "sha256:"+strings.Repeat("ab", 32), 1700000000, uki); err != nil || mustHash(t, wantISO) != mustHash(t, isoPath) {
		t.Errorf("rewritten peerboot.iso differs from a fresh WriteISO (%v)", err)
	}
	// Same bytes as the image stage would write with the signed UKI, from scratch.
	want := filepath.Join(t.TempDir(), "d")
	m, _ := readManifest(dir)
	WriteDisk(want, 72<<20, m.RecipeDigest, m.SourceDateEpoch, uki)
	if a, _ := fsutil.HashFile(want); a != mustHash(t, filepath.Join(dir, output.DiskFile)) {
		t.Error("rewritten disk.img differs from a fresh WriteDisk")
	}
	// A disk whose layout does not match is not replaced.
	dir2 := writeSynthetic(t, true)
	p := filepath.Join(dir2, output.DiskFile)
	b, _ := os.ReadFile(p)
	m2, _ := readManifest(dir2)
	m2.RecipeDigest = "sha256:" + strings.Repeat("cd", 32)
	mj, _ := json.MarshalIndent(m2, "", "  ")
	os.WriteFile(filepath.Join(dir2, output.ManifestFile), append(mj, '\n'), 0o644)
	sums, _ := output.ParseSums(mustRead(t, filepath.Join(dir2, output.SumsFile)))
	for i := range sums {
		sums[i].SHA256 = mustHash(t, filepath.Join(dir2, sums[i].Path))
	}
	os.WriteFile(filepath.Join(dir2, output.SumsFile), output.FormatSums(sums), 0o644)
	err := SignOutput(ctx, dir2, signOpts(ArtifactKeyFile))
	if err == nil || !strings.Contains(err.Error(), "layout changed") {
		t.Errorf("mismatching layout: %v", err)
	}
	if b2, _ := os.ReadFile(p); !bytes.Equal(b, b2) {
		t.Error("disk.img was replaced despite the layout mismatch")
	}
}

func TestSignRefusesChangedOutput(t *testing.T) {
	dir := writeSynthetic(t, false)
	os.WriteFile(filepath.Join(dir, "pxe/vmlinuz"), []byte("changed"), 0o644)
	err := SignOutput(context.Background(), dir, signOpts(ArtifactKeyFile))
	if err == nil || !strings.Contains(err.Error(), "pxe/vmlinuz") {
		t.Errorf("signing a changed output: %v", err)
	}
}

func mustHash(t *testing.T, p string) string {
	h, err := fsutil.HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var _ = fmt.Sprint

// An ISO consistently listed and signed, but booting another UKI than
// peerboot.efi, fails verify: the UKI Authenticode checks is not the one the
// ISO boots.
func TestVerifyISOBootsTheUKI(t *testing.T) {
	needTool(t, "sbsign")
	ctx := context.Background()
	other := filepath.Join(t.TempDir(), output.ISOFile)
	if err := WriteISO(other, "sha256:"+strings.Repeat("ab", 32), 1700000000, minimalPE(8)); err != nil {
		t.Fatal(err)
	}
	dir := writeSyntheticWith(t, true, map[string][]byte{})
	if err := SignOutput(ctx, dir, signOpts(ArtifactKeyFile)); err != nil {
		t.Fatal(err)
	}
	vo := verifyOpts(ArtifactPubFile)
	if err := Verify(ctx, dir, vo); err != nil {
		t.Fatal(err)
	}
	// Swap in the other ISO and re-sign SHA256SUMS and the provenance over it.
	dir2 := writeSyntheticWith(t, true, nil)
	b, _ := os.ReadFile(other)
	os.WriteFile(filepath.Join(dir2, output.ISOFile), b, 0o644)
	sums, _ := output.ParseSums(mustRead(t, filepath.Join(dir2, output.SumsFile)))
	for i := range sums {
		sums[i].SHA256 = mustHash(t, filepath.Join(dir2, sums[i].Path))
	}
	os.WriteFile(filepath.Join(dir2, output.SumsFile), output.FormatSums(sums), 0o644)
	opts := signOpts(ArtifactKeyFile)
	opts.DBKey, opts.DBCert = "", "" // the ISO no longer rebuilds from the UKI
	if err := SignOutput(ctx, dir2, opts); err != nil {
		t.Fatal(err)
	}
	vo.DBCert = ""
	err := Verify(ctx, dir2, vo)
	var ve *VerifyError
	if !errors.As(err, &ve) || !names(ve, output.ISOFile) || !strings.Contains(err.Error(), "holds a UKI with sha256") {
		t.Errorf("Verify = %v, want a problem with %s's UKI", err, output.ISOFile)
	}
}
