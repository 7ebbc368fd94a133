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
	"math/big"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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

func module(n int, seed int64) []byte {
	b := make([]byte, n)
	mrand.New(mrand.NewSource(seed)).Read(b)
	copy(b, "\x7fELF")
	return b
}

func TestSignVerify(t *testing.T) {
	k := twoKeys(t)
	m := module(100_000, 1)
	s, err := Sign(m, k[0].key, k[0].cert)
	if err != nil {
		t.Fatal(err)
	}
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
	other, err := Sign(s, k[1].key, k[1].cert)
	if err != nil {
		t.Fatal(err)
	}
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
		t.Skip("openssl not installed")
	}
	k := twoKeys(t)
	dir := t.TempDir()
	_, certPath := writePEM(t, dir, k[0])
	m := module(50_000, 3)
	s, err := Sign(m, k[0].key, k[0].cert)
	if err != nil {
		t.Fatal(err)
	}
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

// The kernel's own scripts/sign-file, from a kernel stage output in the store,
// writes the same bytes for the same key: RSA PKCS#1 v1.5 is deterministic.
func TestSameBytesAsKernelSignFile(t *testing.T) {
	signFile := kernelSignFile()
	if signFile == "" {
		t.Skip("no kernel stage output with scripts/sign-file in the store (build the kernel stage first)")
	}
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
		got, err := Sign(m, k[0].key, k[0].cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%d-byte module: our signed module (%d bytes) differs from sign-file's (%d bytes)", size, len(got), len(want))
		}
		if _, err := Verify(want, []*x509.Certificate{k[0].cert}); err != nil {
			t.Errorf("sign-file's module does not verify: %v", err)
		}
	}
}

func kernelSignFile() string {
	cache := os.Getenv("PEERBOOT_CACHE")
	if cache == "" {
		d, _ := os.UserCacheDir()
		cache = filepath.Join(d, "peerboot")
	}
	found, _ := filepath.Glob(filepath.Join(cache, "out", "kernel-*", "build", "scripts", "sign-file"))
	for _, f := range found {
		if info, err := os.Stat(f); err == nil && info.Mode()&0o111 != 0 {
			return f
		}
	}
	return ""
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
