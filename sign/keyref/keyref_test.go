package keyref

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"hash"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	ecOnce sync.Once
	ecKey  *ecdsa.PrivateKey
)

// testKey is one P-256 key for the whole package (fast to make).
func testKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	ecOnce.Do(func() {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		ecKey = k
	})
	return ecKey
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func pkcs8(t *testing.T, k any) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "k.pem")
	if err := os.WriteFile(file, []byte("key bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PB_KEYREF_SET", "env bytes")
	t.Setenv("PB_KEYREF_EMPTY", "")
	for _, c := range []struct {
		ref, body, name, err string
	}{
		{ref: "file:" + file, body: "key bytes", name: file},
		{ref: "env:PB_KEYREF_SET", body: "env bytes", name: "$PB_KEYREF_SET"},
		{ref: "file:" + filepath.Join(dir, "none"), err: "no such file"},
		// Set but empty is as good as unset: no key.
		{ref: "env:PB_KEYREF_EMPTY", err: "PB_KEYREF_EMPTY is not set"},
		{ref: "env:PB_KEYREF_UNSET", err: "PB_KEYREF_UNSET is not set"},
		{ref: "file:", err: `key reference "file:": want file:PATH or env:VAR`},
		{ref: "env:", err: `key reference "env:": want file:PATH or env:VAR`},
		{ref: file, err: "want file:PATH or env:VAR"},
		{ref: "kms:key", err: `unknown kind "kms"`},
	} {
		b, name, err := Read(c.ref)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Read(%q): %v, want an error containing %q", c.ref, err, c.err)
			}
			if b != nil {
				t.Errorf("Read(%q) failed but returned %q", c.ref, b)
			}
			continue
		}
		if err != nil || string(b) != c.body || name != c.name {
			t.Errorf("Read(%q) = %q, %q, %v; want %q, %q", c.ref, b, name, err, c.body, c.name)
		}
	}
}

func TestParsePrivateKeyPEM(t *testing.T) {
	ec := testKey(t)
	ecDER, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	x, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cert := pemOf("CERTIFICATE", []byte("not parsed: skipped"))
	legacy := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"}, Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})
	for _, c := range []struct {
		name string
		pem  []byte
		want crypto.PublicKey
		err  string
	}{
		{name: "PKCS#8 EC", pem: pemOf("PRIVATE KEY", pkcs8(t, ec)), want: ec.Public()},
		{name: "PKCS#8 RSA", pem: pemOf("PRIVATE KEY", pkcs8(t, rsaKey)), want: rsaKey.Public()},
		{name: "SEC 1 EC", pem: pemOf("EC PRIVATE KEY", ecDER), want: ec.Public()},
		{name: "PKCS#1 RSA", pem: pemOf("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), want: rsaKey.Public()},
		// Other blocks before the key (a certificate in the same file) are passed over.
		{name: "after a certificate", pem: append(append([]byte{}, cert...), pemOf("EC PRIVATE KEY", ecDER)...), want: ec.Public()},
		{name: "only a certificate", pem: cert, err: "no PEM private key block found"},
		{name: "no PEM", pem: []byte("not PEM"), err: "no PEM private key block found"},
		{name: "legacy encryption", pem: legacy, err: "legacy OpenSSL-encrypted PEM"},
		{name: "X25519", pem: pemOf("PRIVATE KEY", pkcs8(t, x)), err: "is not a signing key"},
		{name: "bad DER", pem: pemOf("EC PRIVATE KEY", []byte{1, 2, 3}), err: "EC PRIVATE KEY block: "},
	} {
		k, err := ParsePrivateKeyPEM(c.pem)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !k.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(c.want) {
			t.Errorf("%s: a different key", c.name)
		}
	}
}

func TestLoadSignerAndCert(t *testing.T) {
	k := testKey(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "keyref test"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<31, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "file:" + p
	}
	keyRef := write("k.pem", pemOf("PRIVATE KEY", pkcs8(t, k)))
	s, err := LoadSigner(keyRef)
	if err != nil || !k.PublicKey.Equal(s.Public()) {
		t.Fatalf("LoadSigner: %v", err)
	}
	if _, err := LoadSigner(write("bad.pem", []byte("x"))); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "bad.pem")+": no PEM") {
		t.Errorf("LoadSigner of a file with no key: %v (want the file named)", err)
	}
	if _, err := LoadSigner("env:PB_KEYREF_UNSET"); err == nil {
		t.Error("LoadSigner of an unset variable: no error")
	}
	for _, ref := range []string{write("c.pem", pemOf("CERTIFICATE", der)), write("c.der", der)} {
		c, err := LoadCert(ref)
		if err != nil || !bytes.Equal(c.Raw, der) {
			t.Errorf("LoadCert(%s): %v", ref, err)
		}
	}
	for ref, want := range map[string]string{
		write("k2.pem", pemOf("PRIVATE KEY", pkcs8(t, k))): `want a CERTIFICATE PEM block, got "PRIVATE KEY"`,
		write("junk.der", []byte{0x30, 1, 2}):              "junk.der: certificate: ",
		"env:PB_KEYREF_UNSET":                              "PB_KEYREF_UNSET is not set",
	} {
		if c, err := LoadCert(ref); err == nil || c != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadCert(%s): %v, want an error containing %q", ref, err, want)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, c := range []struct{ ref, want string }{
		{"file:keys/db.key", "file:/recipes/keys/db.key"},
		{"file:/abs/db.key", "file:/abs/db.key"},
		{"env:DB_KEY", "env:DB_KEY"},
		{"file:", "file:"},
		{"keys/db.key", "keys/db.key"},
	} {
		if got := Resolve(c.ref, "/recipes"); got != c.want {
			t.Errorf("Resolve(%q) = %q, want %q", c.ref, got, c.want)
		}
	}
}

// pbes2 describes one way to encrypt a PKCS#8 key, as OpenSSL can.
type pbes2 struct {
	name     string
	prf      asn1.ObjectIdentifier // nil: left out (HMAC-SHA1, the default)
	hash     func() hash.Hash
	cipher   asn1.ObjectIdentifier
	keyLen   int
	newBlock func([]byte) (cipher.Block, error)
	kdf      asn1.ObjectIdentifier // nil: PBKDF2
	scheme   asn1.ObjectIdentifier // nil: PBES2
	ivLen    int                   // 0: the block size
	bs       int                   // the cipher's block size
}

// encrypt is an EncryptedPrivateKeyInfo of plain, padded as given (the
// caller pads, so tests can break the padding).
func (p pbes2) encrypt(t *testing.T, padded []byte, pass string) []byte {
	t.Helper()
	salt := []byte("saltsalt")
	key, err := pbkdf2.Key(p.hash, pass, salt, 2048, p.keyLen)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := p.newBlock(key)
	if err != nil {
		t.Fatal(err)
	}
	iv := bytes.Repeat([]byte{0x5a}, blk.BlockSize())
	data := make([]byte, len(padded))
	cipher.NewCBCEncrypter(blk, iv).CryptBlocks(data, padded)
	if p.ivLen != 0 {
		iv = iv[:p.ivLen]
	}
	kp := pbkdf2Params{Salt: salt, Iter: 2048}
	if p.prf != nil {
		kp.PRF = algID{Algorithm: p.prf, Parameters: asn1.NullRawValue}
	}
	kdf := algID{Algorithm: oidPBKDF2, Parameters: rawOf(t, kp)}
	if p.kdf != nil {
		kdf.Algorithm = p.kdf
	}
	params := pbes2Params{KDF: kdf, Scheme: algID{Algorithm: p.cipher, Parameters: rawOf(t, iv)}}
	scheme := oidPBES2
	if p.scheme != nil {
		scheme = p.scheme
	}
	return mustMarshal(t, encryptedPKInfo{Algo: algID{Algorithm: scheme, Parameters: rawOf(t, params)}, Data: data})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rawOf(t *testing.T, v any) asn1.RawValue {
	t.Helper()
	var r asn1.RawValue
	if _, err := asn1.Unmarshal(mustMarshal(t, v), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func pad(b []byte, bs int) []byte {
	n := bs - len(b)%bs
	return append(append([]byte{}, b...), bytes.Repeat([]byte{byte(n)}, n)...)
}

var (
	aes256  = pbes2{name: "AES-256, HMAC-SHA256", prf: oidHMACSHA256, hash: sha256.New, cipher: oidAES256CBC, keyLen: 32, newBlock: aes.NewCipher, bs: 16}
	schemes = []pbes2{aes256,
		{name: "AES-128, HMAC-SHA1 by default", hash: sha1.New, cipher: oidAES128CBC, keyLen: 16, newBlock: aes.NewCipher, bs: 16},
		{name: "AES-192, HMAC-SHA1", prf: oidHMACSHA1, hash: sha1.New, cipher: oidAES192CBC, keyLen: 24, newBlock: aes.NewCipher, bs: 16},
		{name: "DES-EDE3, HMAC-SHA512", prf: oidHMACSHA512, hash: sha512.New, cipher: oidDESEDE3CBC, keyLen: 24, newBlock: des.NewTripleDESCipher, bs: 8},
	}
)

// Each PBKDF2 PRF and cipher OpenSSL writes decrypts to the key, with a
// wrong passphrase or a missing one refused.
func TestEncryptedKey(t *testing.T) {
	k := testKey(t)
	der := pkcs8(t, k)
	for _, p := range schemes {
		enc := pemOf("ENCRYPTED PRIVATE KEY", p.encrypt(t, pad(der, p.bs), "pw"))
		t.Setenv(PassphraseEnv, "pw")
		s, err := ParsePrivateKeyPEM(enc)
		if err != nil || !k.PublicKey.Equal(s.Public()) {
			t.Errorf("%s: %v", p.name, err)
		}
		t.Setenv(PassphraseEnv, "wrong")
		if _, err := ParsePrivateKeyPEM(enc); err == nil || !strings.Contains(err.Error(), "wrong passphrase") {
			t.Errorf("%s with a wrong passphrase: %v", p.name, err)
		}
	}
	enc := pemOf("ENCRYPTED PRIVATE KEY", aes256.encrypt(t, pad(der, 16), "pw"))
	os.Unsetenv(PassphraseEnv)
	if _, err := ParsePrivateKeyPEM(enc); err == nil || !strings.Contains(err.Error(), PassphraseEnv+" is not set") {
		t.Errorf("no passphrase: %v", err)
	}
}

// A wrong passphrase that happens to decrypt to good padding (about one
// in 256) is still named as the wrong passphrase, not as broken ASN.1: CI
// met it once with a random key.
func TestWrongPassphraseWithGoodPadding(t *testing.T) {
	der := pkcs8(t, testKey(t))
	enc := aes256.encrypt(t, pad(der, aes256.bs), "pw")
	for i := 0; i < 4096; i++ {
		pass := fmt.Sprintf("wrong%d", i)
		if _, err := decryptPKCS8(enc, []byte(pass)); err != nil {
			continue
		}
		t.Setenv(PassphraseEnv, pass)
		_, err := ParsePrivateKeyPEM(pemOf("ENCRYPTED PRIVATE KEY", enc))
		if err == nil || !strings.Contains(err.Error(), "wrong passphrase in "+PassphraseEnv) {
			t.Fatalf("%q decrypts to good padding: %v", pass, err)
		}
		return
	}
	t.Fatal("no passphrase of 4096 decrypted to good padding")
}

// decryptPKCS8 refuses what it cannot decrypt, each for its reason, and
// checks the whole PKCS#7 padding (what tells a wrong passphrase).
func TestDecryptRefuses(t *testing.T) {
	key := bytes.Repeat([]byte{0xaa}, 32) // stands in for a key's DER
	other := aes256
	other.prf = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 10} // HMAC-SHA384
	unknown := aes256
	unknown.cipher = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 46} // AES-256-GCM
	pbes1 := aes256
	pbes1.scheme = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 3}
	scrypt := aes256
	scrypt.kdf = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 11591, 4, 11}
	shortIV := aes256
	shortIV.ivLen = 8
	for _, c := range []struct {
		name   string
		p      pbes2
		padded []byte
		err    string
	}{
		{"PBES1", pbes1, pad(key, 16), "is not PBES2"},
		{"scrypt", scrypt, pad(key, 16), "is not PBKDF2"},
		{"HMAC-SHA384", other, pad(key, 16), "unsupported PRF"},
		{"AES-GCM", unknown, pad(key, 16), "unsupported cipher"},
		{"short IV", shortIV, pad(key, 16), "bad IV or data length"},
		{"padding byte 0", aes256, append(bytes.Repeat([]byte{1}, 31), 0), "wrong passphrase"},
		{"padding longer than a block", aes256, bytes.Repeat([]byte{17}, 32), "wrong passphrase"},
		{"padding bytes differ", aes256, append(bytes.Repeat([]byte{9}, 30), 2, 3), "wrong passphrase"},
	} {
		der := c.p.encrypt(t, c.padded, "pw")
		if _, err := decryptPKCS8(der, []byte("pw")); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.err)
		}
	}
	// A whole block of padding (16 x 16) is padding, not an error.
	got, err := decryptPKCS8(aes256.encrypt(t, pad(key, 16), "pw"), []byte("pw"))
	if err != nil || !bytes.Equal(got, key) {
		t.Errorf("a full block of padding: %x, %v", got, err)
	}
	// One byte of padding.
	got, err = decryptPKCS8(aes256.encrypt(t, append(key[:31:31], 1), "pw"), []byte("pw"))
	if err != nil || !bytes.Equal(got, key[:31]) {
		t.Errorf("one byte of padding: %x, %v", got, err)
	}
	// Data not a whole number of blocks, and no data at all.
	for name, data := range map[string][]byte{"partial block": make([]byte, 20), "empty": {}} {
		info := encryptedPKInfo{}
		if _, err := asn1.Unmarshal(aes256.encrypt(t, pad(key, 16), "pw"), &info); err != nil {
			t.Fatal(err)
		}
		info.Data = data
		if _, err := decryptPKCS8(mustMarshal(t, info), []byte("pw")); err == nil || !strings.Contains(err.Error(), "bad IV or data length") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := decryptPKCS8([]byte{0x30, 0x03, 1}, []byte("pw")); err == nil || !strings.Contains(err.Error(), "encrypted PKCS#8") {
		t.Errorf("bad DER: %v", err)
	}
}

// Kind names keys the way messages and logs do, and an unknown type by its Go type.
func TestKind(t *testing.T) {
	_, ed, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	rk, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pub  crypto.PublicKey
		want string
	}{
		{testKey(t).Public(), "ECDSA P-256"},
		{ed.Public(), "Ed25519"},
		{rk.Public(), "RSA 1024"},
		{&ecdh.PublicKey{}, "*ecdh.PublicKey"},
	} {
		if got := Kind(c.pub); got != c.want {
			t.Errorf("Kind = %q, want %q", got, c.want)
		}
	}
}
