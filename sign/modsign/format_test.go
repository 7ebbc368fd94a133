package modsign

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
)

// What the kernel reads of a signed module (kernel/module/signing.c,
// include/linux/module_signature.h): the module's bytes, the PKCS#7 message, a
// 12-byte struct module_signature and the magic. These tests spell that layout out
// byte by byte, independently of Sign's code, so that a change to any field is a
// module the kernel refuses to load (or loads unchecked).

// p7signer is one SignerInfo, field by field, as DER pieces.
type p7signer struct {
	version     int
	sid         []byte // IssuerAndSerialNumber
	digestAlg   []byte
	signedAttrs []byte // [0] IMPLICIT, absent when nil
	sigAlg      []byte
	sig         []byte
}

// p7msg is a ContentInfo holding a SignedData, field by field, for crafting the
// messages a broken or foreign signing tool could append.
type p7msg struct {
	ctype      asn1.ObjectIdentifier
	version    int
	digestAlgs [][]byte
	encap      []byte
	signers    []p7signer
	sdTrailing []byte // after SignedData, inside [0]
	ciTrailing []byte // after ContentInfo
}

func derInt(t *testing.T, v any) []byte {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func algID(o asn1.ObjectIdentifier) []byte { return seq(oid(o)) }

func (m p7msg) der(t *testing.T) []byte {
	var signers [][]byte
	for _, s := range m.signers {
		parts := [][]byte{derInt(t, s.version), s.sid, s.digestAlg}
		if s.signedAttrs != nil {
			parts = append(parts, s.signedAttrs)
		}
		parts = append(parts, s.sigAlg, tlv(0x04, s.sig))
		signers = append(signers, seq(parts...))
	}
	sd := seq(derInt(t, m.version), tlv(0x31, m.digestAlgs...), m.encap, tlv(0x31, signers...))
	sd = append(sd, m.sdTrailing...)
	return append(seq(oid(m.ctype), tlv(0xa0, sd)), m.ciTrailing...)
}

// sha256RSA is what sign-file writes for k over body: one signer named by its
// certificate's issuer and serial, sha256, rsaEncryption, no attributes.
func sha256RSA(t *testing.T, k testKey, body []byte) p7msg {
	t.Helper()
	digest := sha256.Sum256(body)
	sig, err := rsa.SignPKCS1v15(nil, k.key, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return p7msg{
		ctype:      asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2},
		version:    1,
		digestAlgs: [][]byte{algID(asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1})},
		encap:      seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1})),
		signers: []p7signer{{
			version:   1,
			sid:       seq(k.cert.RawIssuer, derInt(t, k.cert.SerialNumber)),
			digestAlg: algID(asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}),
			sigAlg:    seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}), []byte{0x05, 0x00}),
			sig:       sig,
		}},
	}
}

// appendSig is a module with p7 appended as the kernel expects it: the PKCS#7
// trailer (id_type 2, everything else zero, sig_len big-endian) and the magic.
func appendSig(body, p7 []byte) []byte {
	out := append(bytes.Clone(body), p7...)
	out = append(out, 0, 0, 2, 0, 0, 0, 0, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(len(p7)))
	return append(out, "~Module signature appended~\n"...)
}

// A signed module is the module, the PKCS#7 message sign-file writes, the
// module_signature trailer and the magic: every byte of it as the kernel reads it.
func TestSignedModuleLayout(t *testing.T) {
	k := twoKeys(t)
	if Magic != "~Module signature appended~\n" {
		t.Fatalf("Magic %q is not the kernel's MODULE_SIG_STRING", Magic)
	}
	// An empty module and a one-byte one too: the signature then starts the file
	// (Split's bound) and the message is longer than the module.
	for _, size := range []int{0, 1, 4097} {
		m := module(size, 20)[:size]
		s, err := Sign(m, k[0].key, k[0].cert)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		want := sha256RSA(t, k[0], m).der(t)
		if !bytes.Equal(s, appendSig(m, want)) {
			t.Errorf("%d-byte module: signed as\n%x\nwant the module, then\n%x\nthen the trailer and magic", size, s[len(m):], want)
		}
		// The trailer on its own, field by field (struct module_signature).
		tr := s[len(s)-len(Magic)-12 : len(s)-len(Magic)]
		if tr[0] != 0 || tr[1] != 0 || tr[2] != 2 || tr[3] != 0 || tr[4] != 0 || !bytes.Equal(tr[5:8], []byte{0, 0, 0}) ||
			binary.BigEndian.Uint32(tr[8:]) != uint32(len(want)) {
			t.Errorf("%d bytes: trailer %x, want algo 0, hash 0, id_type 2 (PKCS#7), signer_len 0, key_id_len 0, padding 0, sig_len %d", size, tr, len(want))
		}
		body, p7, err := Split(s)
		if err != nil || !bytes.Equal(body, m) || !bytes.Equal(p7, want) {
			t.Errorf("%d bytes: Split gave %d body bytes, %d message bytes, %v", size, len(body), len(p7), err)
		}
		if c, err := Verify(s, []*x509.Certificate{k[0].cert}); err != nil || c != k[0].cert {
			t.Errorf("%d bytes: Verify: %v", size, err)
		}
	}
}

// The signature is a SHA-256 digest of the module's bytes signed by the key: a
// hardware token or agent behind crypto.Signer is asked for exactly that, and its
// failure is Sign's error.
type recordingSigner struct {
	*rsa.PrivateKey
	digest []byte
	opts   crypto.SignerOpts
	err    error
}

func (r *recordingSigner) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	r.digest, r.opts = bytes.Clone(digest), opts
	if r.err != nil {
		return nil, r.err
	}
	return r.PrivateKey.Sign(rand, digest, opts)
}

func TestSignAsksTheKeyForSHA256(t *testing.T) {
	k := twoKeys(t)
	m := module(3000, 21)
	r := &recordingSigner{PrivateKey: k[0].key}
	if _, err := Sign(m, r, k[0].cert); err != nil {
		t.Fatal(err)
	}
	if d := sha256.Sum256(m); !bytes.Equal(r.digest, d[:]) || r.opts.HashFunc() != crypto.SHA256 {
		t.Errorf("key asked to sign %x with %v, want the module's sha256 %x", r.digest, r.opts.HashFunc(), d)
	}
	gone := errors.New("token removed")
	r.err = gone
	if s, err := Sign(m, r, k[0].cert); !errors.Is(err, gone) || !strings.HasPrefix(err.Error(), "signing: ") || s != nil {
		t.Errorf("a key that cannot sign: %v (%d bytes), want the key's error", err, len(s))
	}
}

// A signing key the kernel cannot check, a certificate that is not the key's, or one
// whose serial cannot name the signer are refused with what is wrong, before any
// bytes are written.
func TestSignRefusesKeysAndCertificates(t *testing.T) {
	k := twoKeys(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// A certificate for an ECDSA key, issued by the RSA key: RSA key, non-RSA cert.
	ecCert := certFor(t, &ec.PublicKey, k[0], 99)
	noSerial := *k[0].cert
	noSerial.SerialNumber = nil
	for _, tc := range []struct {
		name string
		key  crypto.Signer
		cert *x509.Certificate
		want string
	}{
		{"ECDSA key", ec, k[0].cert, "module signing key is ECDSA P-256; want an RSA key"},
		{"another RSA key's certificate", k[0].key, k[1].cert, "the module certificate (CN=modsign test key,O=peerboot test keys) does not hold the module signing key's public key"},
		{"certificate of an ECDSA key", k[0].key, ecCert, "the module certificate (CN=ecdsa,O=peerboot test keys) does not hold the module signing key's public key"},
		{"certificate without a serial", k[0].key, &noSerial, "certificate serial: "},
	} {
		s, err := Sign(module(100, 22), tc.key, tc.cert)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || s != nil {
			t.Errorf("%s: %v (%d bytes), want %q", tc.name, err, len(s), tc.want)
		}
	}
}

// certFor issues a certificate for pub from issuer, with serial.
func certFor(t *testing.T, pub any, issuer testKey, serial int64) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "ecdsa", Organization: []string{"peerboot test keys"}},
		NotBefore:    issuer.cert.NotBefore, NotAfter: issuer.cert.NotAfter,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer.cert, pub, issuer.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Verify names the signer it does not know (issuer and serial, what a user compares
// with their certificate), the certificate a bad signature was checked with, and a
// trusted certificate of the signer's name whose key the kernel could not use.
func TestVerifyNamesTheSigner(t *testing.T) {
	k := twoKeys(t)
	m := module(2000, 23)
	s := mustSign(t, m, k[1])
	_, err := Verify(s, []*x509.Certificate{k[0].cert})
	if want := `signed by a key none of the trusted certificates holds (signer: issuer "CN=modsign test key,O=peerboot test keys", serial 1234568)`; err == nil || err.Error() != want {
		t.Errorf("unknown signer: %v, want %q", err, want)
	}
	// The same issuer and serial, but an ECDSA key: found, and refused by name.
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	impostor := certFor(t, &ec.PublicKey, k[0], k[1].cert.SerialNumber.Int64())
	if _, err := Verify(s, []*x509.Certificate{impostor}); err == nil || err.Error() != "certificate CN=ecdsa,O=peerboot test keys: ECDSA P-256 is not an RSA key" {
		t.Errorf("signer's certificate holds an ECDSA key: %v", err)
	}
	s[10] ^= 1
	if _, err := Verify(s, []*x509.Certificate{k[1].cert}); !errors.Is(err, ErrBadSig) || !strings.HasSuffix(err.Error(), "(checked with CN=modsign test key,O=peerboot test keys)") {
		t.Errorf("changed module: %v", err)
	}
}

// The trailer is checked before anything is trusted: a foreign id_type, a field a
// PKCS#7 signature leaves zero, a length that is zero or runs off the file, a file
// too short for the trailer. Each is refused by Verify and by Sign (which would
// otherwise sign the broken trailer as part of the module).
func TestTrailerRefused(t *testing.T) {
	k := twoKeys(t)
	m := module(500, 24)
	s := mustSign(t, m, k[0])
	tr := len(s) - len(Magic) - 12 // the trailer's first byte
	set := func(f []byte, i int, v byte) []byte { f = bytes.Clone(f); f[i] = v; return f }
	withLen := func(f []byte, n uint32) []byte {
		f = bytes.Clone(f)
		binary.BigEndian.PutUint32(f[tr+8:], n)
		return f
	}
	const zero = "module signature: a PKCS#7 trailer must have zero algo, hash, signer and key id lengths"
	cases := map[string]struct {
		file []byte
		want string
	}{
		"id_type 1 (PGP)":  {set(s, tr+2, 1), "module signature: id_type 1, want PKCS#7 (2)"},
		"id_type 0":        {set(s, tr+2, 0), "module signature: id_type 0, want PKCS#7 (2)"},
		"sig_len 0":        {withLen(s, 0), fmt.Sprintf("module signature: length 0 does not fit the %d-byte file", len(s))},
		"sig_len too long": {withLen(s, uint32(tr+1)), fmt.Sprintf("module signature: length %d does not fit the %d-byte file", tr+1, len(s))},
		"sig_len 2^32-1":   {withLen(s, 0xffffffff), fmt.Sprintf("module signature: length 4294967295 does not fit the %d-byte file", len(s))},
		"magic alone":      {[]byte(Magic), "module signature: file too short for its trailer"},
		"11 bytes":         {append(make([]byte, 11), Magic...), "module signature: file too short for its trailer"},
		// Room for the trailer and nothing else: its length cannot fit.
		"trailer alone": {append([]byte{0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0}, Magic...), "module signature: length 0 does not fit the 40-byte file"},
	}
	for _, i := range []int{0, 1, 3, 4, 5, 6, 7} {
		cases[fmt.Sprintf("trailer byte %d set", i)] = struct {
			file []byte
			want string
		}{set(s, tr+i, 1), zero}
	}
	for name, tc := range cases {
		if _, err := Verify(tc.file, []*x509.Certificate{k[0].cert}); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Verify: %v, want %q", name, err, tc.want)
		}
		if out, err := Sign(tc.file, k[0].key, k[0].cert); err == nil || err.Error() != tc.want {
			t.Errorf("%s: Sign: %v (%d bytes), want %q", name, err, len(out), tc.want)
		}
	}
	// A length that takes the whole file before the trailer is a signature with
	// an empty module: Split takes it, the message then does not parse.
	whole := withLen(s, uint32(tr))
	body, p7, err := Split(whole)
	if err != nil || len(body) != 0 || len(p7) != tr {
		t.Errorf("sig_len of the whole file: %d body bytes, %d message bytes, %v", len(body), len(p7), err)
	}
}

// The PKCS#7 message is held to what sign-file writes and the kernel accepts for a
// module: one SignedData, version 1, sha256 only, detached, one signer named by
// issuer and serial, an RSA signature, no signed attributes, nothing after it.
func TestVerifyRefusesForeignPKCS7(t *testing.T) {
	k := twoKeys(t)
	m := module(1500, 25)
	sha1 := algID(asn1.ObjectIdentifier{1, 3, 14, 3, 2, 26})
	sha256ID := algID(asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1})
	const pre = "module signature: PKCS#7: "
	for _, tc := range []struct {
		name string
		edit func(*p7msg)
		want string // "" for a message that verifies
	}{
		{"as sign-file writes it", func(*p7msg) {}, ""},
		// The kernel takes sha256WithRSAEncryption as the signature algorithm too.
		{"sha256WithRSAEncryption", func(p *p7msg) {
			p.signers[0].sigAlg = seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}), []byte{0x05, 0x00})
		}, ""},
		{"a byte after the message", func(p *p7msg) { p.ciTrailing = []byte{0} }, pre + "1 trailing bytes"},
		{"a byte after SignedData", func(p *p7msg) { p.sdTrailing = []byte{0} }, pre + "SignedData: 1 trailing bytes"},
		{"content type data", func(p *p7msg) { p.ctype = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1} }, pre + "content type 1.2.840.113549.1.7.1, want signedData"},
		{"SignedData version 3", func(p *p7msg) { p.version = 3 }, pre + "SignedData version 3, want 1"},
		{"sha256 twice", func(p *p7msg) { p.digestAlgs = [][]byte{sha256ID, sha256ID} }, pre + "digest algorithms [{2.16.840.1.101.3.4.2.1 {0 0 false [] []}} {2.16.840.1.101.3.4.2.1 {0 0 false [] []}}], want sha256 only"},
		{"sha1 digest set", func(p *p7msg) { p.digestAlgs = [][]byte{sha1} }, pre + "digest algorithms [{1.3.14.3.2.26 {0 0 false [] []}}], want sha256 only"},
		{"no digest algorithm", func(p *p7msg) { p.digestAlgs = nil }, pre + "digest algorithms [], want sha256 only"},
		{"content of type signedData", func(p *p7msg) {
			p.encap = seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}))
		}, pre + "want detached data content"},
		{"the module attached", func(p *p7msg) {
			p.encap = seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}), tlv(0xa0, tlv(0x04, m)))
		}, pre + "want detached data content"},
		{"two signers", func(p *p7msg) { p.signers = append(p.signers, p.signers[0]) }, pre + "2 signers, want 1"},
		{"no signer", func(p *p7msg) { p.signers = nil }, pre + "0 signers, want 1"},
		{"SignerInfo version 3", func(p *p7msg) { p.signers[0].version = 3 }, pre + "SignerInfo version 3, want 1 (signer named by issuer and serial number)"},
		{"sha1 signer digest", func(p *p7msg) { p.signers[0].digestAlg = sha1 }, pre + "digest algorithm 1.3.14.3.2.26, want sha256"},
		{"ECDSA signature", func(p *p7msg) {
			p.signers[0].sigAlg = algID(asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2})
		}, pre + "signature algorithm 1.2.840.10045.4.3.2, want RSA"},
		{"signed attributes", func(p *p7msg) {
			p.signers[0].signedAttrs = tlv(0xa0, seq(oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 3}), tlv(0x31, oid(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}))))
		}, pre + "signed attributes are not supported"},
	} {
		p := sha256RSA(t, k[0], m)
		tc.edit(&p)
		c, err := Verify(appendSig(m, p.der(t)), []*x509.Certificate{k[0].cert})
		switch {
		case tc.want == "" && (err != nil || c != k[0].cert):
			t.Errorf("%s: %v, want verified by the module key", tc.name, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Bytes that are no DER, or a SignedData that is not a SEQUENCE: the parser's
	// own error, under the same prefix.
	for name, p7 := range map[string][]byte{
		"not DER":             {0xff, 0x00},
		"SignedData an INT":   seq(oid(oidSignedData), tlv(0xa0, []byte{0x02, 0x01, 0x01})),
		"ContentInfo no type": seq(tlv(0xa0, seq())),
	} {
		_, err := Verify(appendSig(m, p7), []*x509.Certificate{k[0].cert})
		if err == nil || !strings.HasPrefix(err.Error(), pre) || !strings.Contains(err.Error(), "asn1: ") {
			t.Errorf("%s: %v, want an asn1 error under %q", name, err, pre)
		}
	}
}

// Every element's length is written in DER's definite form, shortest first: the
// kernel's ASN.1 decoder takes nothing else, and RSA 2048's 256-byte signature
// and the message around it need the long forms.
func TestDERLengths(t *testing.T) {
	for _, tc := range []struct {
		n    int
		head []byte
	}{
		{0, []byte{0x04, 0x00}},
		{1, []byte{0x04, 0x01}},
		{0x7f, []byte{0x04, 0x7f}},
		{0x80, []byte{0x04, 0x81, 0x80}},
		{0xff, []byte{0x04, 0x81, 0xff}},
		{0x100, []byte{0x04, 0x82, 0x01, 0x00}},
		{0xffff, []byte{0x04, 0x82, 0xff, 0xff}},
		{0x10000, []byte{0x04, 0x83, 0x01, 0x00, 0x00}},
	} {
		content := bytes.Repeat([]byte{0xa5}, tc.n)
		// Split across parts: the length counts them all.
		got := tlv(0x04, content[:tc.n/2], content[tc.n/2:])
		if !bytes.Equal(got[:len(tc.head)], tc.head) || !bytes.Equal(got[len(tc.head):], content) {
			t.Errorf("%d bytes: header %x, want %x", tc.n, got[:min(len(got), len(tc.head))], tc.head)
			continue
		}
		var v []byte
		if rest, err := asn1.Unmarshal(got, &v); err != nil || len(rest) != 0 || !bytes.Equal(v, content) {
			t.Errorf("%d bytes: encoding/asn1 reads back %d bytes, %d left, %v", tc.n, len(v), len(rest), err)
		}
	}
}
