package modsign

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testbin"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/store"
)

type testKey struct {
	key  *rsa.PrivateKey
	cert *x509.Certificate
}

var (
	keysOnce sync.Once
	keys     [2]testKey
)

// twoKeys makes two RSA 2048 keys with self-signed certificates shaped like
// `peerboot keys init`'s module certificate (same subject for both, so only the
// serial tells them apart, as with two key sets from one tool).
func twoKeys(t *testing.T) [2]testKey {
	t.Helper()
	keysOnce.Do(func() {
		for i := range keys {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			tmpl := &x509.Certificate{
				SerialNumber: big.NewInt(int64(0x1234567 + i)),
				Subject:      pkix.Name{CommonName: "modsign test key", Organization: []string{"peerboot test keys"}},
				NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
				KeyUsage:    x509.KeyUsageDigitalSignature,
				ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
			if err != nil {
				panic(err)
			}
			c, err := x509.ParseCertificate(der)
			if err != nil {
				panic(err)
			}
			keys[i] = testKey{k, c}
		}
	})
	return keys
}

// mustSign signs m with k, failing the test if it cannot.
func mustSign(t *testing.T, m []byte, k testKey) []byte {
	t.Helper()
	s, err := Sign(m, k.key, k.cert)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func module(n int, seed int64) []byte {
	b := make([]byte, n)
	mrand.New(mrand.NewSource(seed)).Read(b)
	copy(b, "\x7fELF")
	return b
}

func TestSignVerify(t *testing.T) {
	k := twoKeys(t)
	m := module(100_000, 1)
	s := mustSign(t, m, k[0])
	if !Signed(s) || !bytes.HasPrefix(s, m) {
		t.Fatal("signed module does not start with the module and end with the magic")
	}
	if c, err := Verify(s, []*x509.Certificate{k[1].cert, k[0].cert}); err != nil || c != k[0].cert {
		t.Fatalf("Verify: %v (cert %v)", err, c)
	}
	// Deterministic, and signing a signed module replaces its signature.
	again, _ := Sign(m, k[0].key, k[0].cert)
	resigned, _ := Sign(s, k[0].key, k[0].cert)
	if !bytes.Equal(s, again) || !bytes.Equal(s, resigned) {
		t.Error("signing the same module with the same key twice gave different bytes")
	}
	other := mustSign(t, s, k[1])
	if _, err := Verify(other, []*x509.Certificate{k[0].cert}); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("module signed by another key: %v, want ErrUnknownKey", err)
	}
	if _, err := Verify(m, []*x509.Certificate{k[0].cert}); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned module: %v, want ErrUnsigned", err)
	}
	for _, pos := range []int{0, 4096, len(m) - 1} {
		f := bytes.Clone(s)
		f[pos] ^= 0x40
		if _, err := Verify(f, []*x509.Certificate{k[0].cert}); !errors.Is(err, ErrBadSig) {
			t.Errorf("byte %d flipped: %v, want ErrBadSig", pos, err)
		}
	}
	// Every byte of the signature and trailer matters too.
	for pos := len(m); pos < len(s); pos += 7 {
		f := bytes.Clone(s)
		f[pos] ^= 0x01
		if _, err := Verify(f, []*x509.Certificate{k[0].cert}); err == nil {
			t.Errorf("byte %d of the signature flipped, and the module still verifies", pos)
		}
	}
}

func TestSignRefusesMismatchedPair(t *testing.T) {
	k := twoKeys(t)
	if _, err := Sign(module(100, 2), k[0].key, k[1].cert); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Errorf("key with another key's certificate: %v", err)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := Sign(module(100, 2), ec, k[0].cert); err == nil || !strings.Contains(err.Error(), "RSA") {
		t.Errorf("ECDSA key: %v, want an RSA-only error", err)
	}
}

func writePEM(t *testing.T, dir string, k testKey) (keyPath, certPath string) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k.key)
	if err != nil {
		t.Fatal(err)
	}
	keyPath, certPath = filepath.Join(dir, "key.pem"), filepath.Join(dir, "cert.pem")
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.cert.Raw}), 0o644)
	return keyPath, certPath
}

// An independent implementation checks our PKCS#7: OpenSSL's CMS code.
func TestOpenSSLVerifies(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		testguard.Skip(t, "openssl not installed (make deps installs it)")
	}
	k := twoKeys(t)
	dir := t.TempDir()
	_, certPath := writePEM(t, dir, k[0])
	m := module(50_000, 3)
	s := mustSign(t, m, k[0])
	_, p7, err := Split(s)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "body"), m, 0o644)
	os.WriteFile(filepath.Join(dir, "sig.der"), p7, 0o644)
	verify := func(content string) ([]byte, error) {
		return exec.Command("openssl", "cms", "-verify", "-binary", "-inform", "DER", "-in", filepath.Join(dir, "sig.der"),
			"-content", content, "-CAfile", certPath, "-certfile", certPath, "-purpose", "any", "-out", os.DevNull).CombinedOutput()
	}
	if out, err := verify(filepath.Join(dir, "body")); err != nil {
		t.Fatalf("openssl cms -verify: %v\n%s", err, out)
	}
	m[100] ^= 1
	os.WriteFile(filepath.Join(dir, "changed"), m, 0o644)
	if out, err := verify(filepath.Join(dir, "changed")); err == nil {
		t.Fatalf("openssl accepted the signature over a changed module:\n%s", out)
	}
}

// The kernel's own scripts/sign-file, from the default recipe's kernel stage
// output in the store (`make test` builds the default image first), writes the
// same bytes for the same key: RSA PKCS#1 v1.5 is deterministic.
func TestSameBytesAsKernelSignFile(t *testing.T) {
	signFile := kernelSignFile(t)
	k := twoKeys(t)
	dir := t.TempDir()
	keyPath, certPath := writePEM(t, dir, k[0])
	for i, size := range []int{1, 4096, 300_001} {
		m := module(size, int64(10+i))
		ko := filepath.Join(dir, "m.ko")
		os.WriteFile(ko, m, 0o644)
		if out, err := exec.Command(signFile, "sha256", keyPath, certPath, ko).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", signFile, err, out)
		}
		want, _ := os.ReadFile(ko)
		got := mustSign(t, m, k[0])
		if !bytes.Equal(got, want) {
			t.Fatalf("%d-byte module: our signed module (%d bytes) differs from sign-file's (%d bytes)", size, len(got), len(want))
		}
		if _, err := Verify(want, []*x509.Certificate{k[0].cert}); err != nil {
			t.Errorf("sign-file's module does not verify: %v", err)
		}
	}
}

// kernelSignFile finds scripts/sign-file in the output of the default recipe's
// kernel stage: `peerboot plan` names the stage's key, the store keeps its
// output under that key. No output is a guard CI would skip (make test builds it).
func kernelSignFile(t *testing.T) string {
	t.Helper()
	// Only peerboot: the kernel key does not depend on the image binaries.
	bins, err := testbin.Build(t.TempDir(), map[string]string{"peerboot": "../../cmd/peerboot"})
	if err != nil {
		t.Fatal(err)
	}
	const recipe = "recipes/default.toml"
	out, errs, code, err := testbin.Run(filepath.Join(bins, "peerboot"), "../..", "plan", recipe)
	if err != nil || code != 0 {
		t.Fatalf("peerboot plan %s: exit %d, %v\n%s", recipe, code, err, errs)
	}
	key, err := planStageKey(out, "kernel")
	if err != nil {
		t.Fatalf("peerboot plan %s: %v\n%s", recipe, err, out)
	}
	st, err := store.Open(store.DefaultRoot())
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(st.OutputDir(key), "build", "scripts", "sign-file")
	if !st.HasOutput(key) {
		testguard.Skipf(t, "the store %s has no output of %s's kernel stage %s: build it first (`peerboot build %s`; make test does)", st.Root, recipe, key, recipe)
	}
	if info, err := os.Stat(f); err != nil || info.Mode()&0o111 == 0 {
		t.Fatalf("the kernel stage output has no executable scripts/sign-file (%v)", err)
	}
	return f
}

// planStageKey reads a stage's action key from `peerboot plan` output
// ("N. NAME  STATUS  KEY").
func planStageKey(plan, stage string) (string, error) {
	for _, l := range strings.Split(plan, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasSuffix(f[0], ".") || f[1] != stage {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(f[0], ".")); err != nil {
			continue
		}
		key := f[len(f)-1]
		if !strings.HasPrefix(key, stage+"-") {
			return "", fmt.Errorf("stage %s has no key (%q)", stage, l)
		}
		return key, nil
	}
	return "", fmt.Errorf("no stage %s in the plan", stage)
}

func TestPlanStageKey(t *testing.T) {
	const plan = `recipe default  sha256:0081
  files: (defaults) <- recipes/default.toml

1. kernel    cached                     kernel-a3a5
     input kernel-source linux-source-6.1_6.1.192-3         sha256:5259
2. driver    run: not in store          driver-39ae
     stage kernel                                           kernel-a3a5
3. rootfs    blocked: unresolved inputs (unknown)
`
	for _, tc := range []struct {
		stage, key, err string
	}{
		{stage: "kernel", key: "kernel-a3a5"},
		{stage: "driver", key: "driver-39ae"},
		{stage: "rootfs", err: "has no key"},
		{stage: "image", err: "no stage image"},
	} {
		key, err := planStageKey(plan, tc.stage)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.stage, err, tc.err)
			}
			continue
		}
		if err != nil || key != tc.key {
			t.Errorf("%s: %q %v, want %q", tc.stage, key, err, tc.key)
		}
	}
}

func FuzzVerify(f *testing.F) {
	k := twoKeys(&testing.T{})
	s, _ := Sign(module(200, 4), k[0].key, k[0].cert)
	f.Add(s)
	f.Add([]byte(Magic))
	f.Add(append(make([]byte, 20), Magic...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := Verify(b, []*x509.Certificate{k[0].cert}); err == nil && c == nil {
			t.Fatal("verified without a certificate")
		}
	})
}

var _ crypto.Signer = (*rsa.PrivateKey)(nil)
