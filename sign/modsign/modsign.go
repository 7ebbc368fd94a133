// Package modsign signs Linux kernel modules the way the kernel's own
// scripts/sign-file does, in Go: a detached PKCS#7 (CMS) SignedData over the
// module's bytes — SHA-256, RSA PKCS#1 v1.5, the signer named by its
// certificate's issuer and serial number, no signed attributes, no
// certificates — followed by the kernel's trailer (struct module_signature and
// the "~Module signature appended~\n" magic). RSA PKCS#1 v1.5 is deterministic,
// so the same module signed with the same key gives the same bytes, and those
// bytes are the ones sign-file writes.
//
// Verify checks such a signature against trusted certificates, as the kernel
// does when module.sig_enforce is on.
package modsign

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"

	"github.com/peerboot/peerboot/sign/keyref"
)

// Magic ends every signed module (include/linux/module_signature.h).
const Magic = "~Module signature appended~\n"

// trailerLen is sizeof(struct module_signature): algo, hash, id_type,
// signer_len, key_id_len, 3 bytes of padding, then sig_len (big-endian u32).
const trailerLen = 12

// pkeyIDPKCS7 is the id_type of a PKCS#7 signature (PKEY_ID_PKCS7); algo, hash,
// signer_len and key_id_len are zero for it: the PKCS#7 message says them.
const pkeyIDPKCS7 = 2

var (
	oidData       = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidSHA256     = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidRSA        = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidSHA256RSA  = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}
)

// Errors Verify wraps, for callers that sort failures.
var (
	ErrUnsigned   = errors.New("no module signature appended")
	ErrUnknownKey = errors.New("signed by a key none of the trusted certificates holds")
	ErrBadSig     = errors.New("signature does not match the module")
)

// Sign returns module with a signature by key appended. cert must be key's
// certificate (it names the signer). A signature the module already carries is
// replaced, so signing is idempotent.
func Sign(module []byte, key crypto.Signer, cert *x509.Certificate) ([]byte, error) {
	if err := CheckPair(key, cert); err != nil {
		return nil, err
	}
	body, _, err := Split(module)
	if err != nil && !errors.Is(err, ErrUnsigned) {
		return nil, err
	}
	digest := sha256.Sum256(body)
	sig, err := key.Sign(nil, digest[:], crypto.SHA256) // PKCS#1 v1.5 for an RSA key: deterministic
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	p7, err := pkcs7(cert, sig)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(body)+len(p7)+trailerLen+len(Magic))
	out = append(out, body...)
	out = append(out, p7...)
	var t [trailerLen]byte
	t[2] = pkeyIDPKCS7
	binary.BigEndian.PutUint32(t[8:], uint32(len(p7)))
	out = append(out, t[:]...)
	return append(out, Magic...), nil
}

// CheckPair checks that key can sign module signatures the kernel verifies
// (RSA: the kernel config has no ECDSA) and that cert holds its public key.
func CheckPair(key crypto.Signer, cert *x509.Certificate) error {
	pub, ok := key.Public().(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("module signing key is %s; want an RSA key (the kernel verifies RSA module signatures)", keyref.Kind(key.Public()))
	}
	if cp, ok := cert.PublicKey.(*rsa.PublicKey); !ok || !cp.Equal(pub) {
		return fmt.Errorf("the module certificate (%s) does not hold the module signing key's public key", cert.Subject)
	}
	return nil
}

// Signed reports whether module ends with the signature magic.
func Signed(module []byte) bool { return bytes.HasSuffix(module, []byte(Magic)) }

// Split separates a signed module into the signed bytes and the PKCS#7
// message. An unsigned module gives (module, nil, ErrUnsigned).
func Split(module []byte) (body, p7 []byte, err error) {
	if !Signed(module) {
		return module, nil, ErrUnsigned
	}
	end := len(module) - len(Magic)
	if end < trailerLen {
		return nil, nil, errors.New("module signature: file too short for its trailer")
	}
	t := module[end-trailerLen : end]
	if t[2] != pkeyIDPKCS7 {
		return nil, nil, fmt.Errorf("module signature: id_type %d, want PKCS#7 (%d)", t[2], pkeyIDPKCS7)
	}
	if t[0] != 0 || t[1] != 0 || t[3] != 0 || t[4] != 0 || t[5] != 0 || t[6] != 0 || t[7] != 0 {
		return nil, nil, errors.New("module signature: a PKCS#7 trailer must have zero algo, hash, signer and key id lengths")
	}
	n := int64(binary.BigEndian.Uint32(t[8:]))
	sigEnd := int64(end - trailerLen)
	if n == 0 || n > sigEnd {
		return nil, nil, fmt.Errorf("module signature: length %d does not fit the %d-byte file", n, len(module))
	}
	return module[:sigEnd-n], module[sigEnd-n : sigEnd], nil
}

// Verify checks module's appended signature against the trusted certificates
// and returns the one that verified it.
func Verify(module []byte, trusted []*x509.Certificate) (*x509.Certificate, error) {
	body, p7, err := Split(module)
	if err != nil {
		return nil, err
	}
	si, err := parse(p7)
	if err != nil {
		return nil, err
	}
	var cert *x509.Certificate
	for _, c := range trusted {
		if bytes.Equal(c.RawIssuer, si.Signer.Issuer.FullBytes) && c.SerialNumber.Cmp(si.Signer.Serial) == 0 {
			cert = c
			break
		}
	}
	if cert == nil {
		var issuer pkix.RDNSequence
		asn1.Unmarshal(si.Signer.Issuer.FullBytes, &issuer)
		return nil, fmt.Errorf("%w (signer: issuer %q, serial %x)", ErrUnknownKey, issuer.String(), si.Signer.Serial)
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("certificate %s: %s is not an RSA key", cert.Subject, keyref.Kind(cert.PublicKey))
	}
	digest := sha256.Sum256(body)
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], si.Signature); err != nil {
		return nil, fmt.Errorf("%w (checked with %s)", ErrBadSig, cert.Subject)
	}
	return cert, nil
}

// The PKCS#7 message, written by hand so every byte is known (DER, definite
// lengths, in the order sign-file's OpenSSL CMS code writes them):
//
//	ContentInfo ::= SEQUENCE { contentType signedData, [0] EXPLICIT SignedData }
//	SignedData  ::= SEQUENCE { version 1, digestAlgorithms SET { sha256 },
//	                           encapContentInfo SEQUENCE { data } -- detached
//	                           signerInfos SET { SignerInfo } }
//	SignerInfo  ::= SEQUENCE { version 1, SEQUENCE { issuer, serialNumber },
//	                           digestAlgorithm sha256,
//	                           signatureAlgorithm rsaEncryption (NULL parameters),
//	                           signature OCTET STRING }
func pkcs7(cert *x509.Certificate, sig []byte) ([]byte, error) {
	serial, err := asn1.Marshal(cert.SerialNumber)
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	sha := seq(oid(oidSHA256))
	signer := seq(
		integer1,
		seq(cert.RawIssuer, serial),
		sha,
		seq(oid(oidRSA), asn1NULL),
		tlv(0x04, sig),
	)
	signed := seq(
		integer1,
		tlv(0x31, sha), // SET OF DigestAlgorithmIdentifier
		seq(oid(oidData)),
		tlv(0x31, signer), // SET OF SignerInfo
	)
	return seq(oid(oidSignedData), tlv(0xa0, signed)), nil
}

var (
	integer1 = []byte{0x02, 0x01, 0x01}
	asn1NULL = []byte{0x05, 0x00}
)

func oid(o asn1.ObjectIdentifier) []byte {
	b, err := asn1.Marshal(o)
	if err != nil {
		panic(err) // only the constant OIDs above reach here
	}
	return b
}

func seq(parts ...[]byte) []byte { return tlv(0x30, parts...) }

// tlv writes one DER element: tag, definite length, contents.
func tlv(tag byte, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := []byte{tag}
	switch {
	case n < 0x80:
		out = append(out, byte(n))
	default:
		var l []byte
		for v := n; v > 0; v >>= 8 {
			l = append([]byte{byte(v)}, l...)
		}
		out = append(out, 0x80|byte(len(l)))
		out = append(out, l...)
	}
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Parsing, for Verify: what the kernel's pkcs7 parser accepts for a module,
// restricted to what Sign writes (one signer, SHA-256, RSA, no attributes).
type contentInfo struct {
	Type    asn1.ObjectIdentifier
	Content asn1.RawValue `asn1:"explicit,tag:0"`
}

type signedData struct {
	Version          int
	DigestAlgorithms []pkix.AlgorithmIdentifier `asn1:"set"`
	Encap            struct {
		Type    asn1.ObjectIdentifier
		Content asn1.RawValue `asn1:"optional,explicit,tag:0"`
	}
	Certificates asn1.RawValue `asn1:"optional,tag:0"`
	CRLs         asn1.RawValue `asn1:"optional,tag:1"`
	SignerInfos  []signerInfo  `asn1:"set"`
}

type signerInfo struct {
	Version int
	Signer  struct {
		Issuer asn1.RawValue
		Serial *big.Int
	}
	DigestAlgorithm    pkix.AlgorithmIdentifier
	SignedAttrs        asn1.RawValue `asn1:"optional,tag:0"`
	SignatureAlgorithm pkix.AlgorithmIdentifier
	Signature          []byte
	UnsignedAttrs      asn1.RawValue `asn1:"optional,tag:1"`
}

func parse(p7 []byte) (*signerInfo, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("module signature: PKCS#7: "+format, a...)
	}
	var ci contentInfo
	if rest, err := asn1.Unmarshal(p7, &ci); err != nil {
		return nil, bad("%w", err)
	} else if len(rest) > 0 {
		return nil, bad("%d trailing bytes", len(rest))
	}
	if !ci.Type.Equal(oidSignedData) {
		return nil, bad("content type %s, want signedData", ci.Type)
	}
	var sd signedData
	if rest, err := asn1.Unmarshal(ci.Content.Bytes, &sd); err != nil {
		return nil, bad("SignedData: %w", err)
	} else if len(rest) > 0 {
		return nil, bad("SignedData: %d trailing bytes", len(rest))
	}
	if sd.Version != 1 {
		return nil, bad("SignedData version %d, want 1", sd.Version)
	}
	if len(sd.DigestAlgorithms) != 1 || !sd.DigestAlgorithms[0].Algorithm.Equal(oidSHA256) {
		return nil, bad("digest algorithms %v, want sha256 only", sd.DigestAlgorithms)
	}
	if !sd.Encap.Type.Equal(oidData) || len(sd.Encap.Content.Bytes) > 0 {
		return nil, bad("want detached data content")
	}
	if len(sd.SignerInfos) != 1 {
		return nil, bad("%d signers, want 1", len(sd.SignerInfos))
	}
	si := &sd.SignerInfos[0]
	if si.Version != 1 {
		return nil, bad("SignerInfo version %d, want 1 (signer named by issuer and serial number)", si.Version)
	}
	if !si.DigestAlgorithm.Algorithm.Equal(oidSHA256) {
		return nil, bad("digest algorithm %s, want sha256", si.DigestAlgorithm.Algorithm)
	}
	if a := si.SignatureAlgorithm.Algorithm; !a.Equal(oidRSA) && !a.Equal(oidSHA256RSA) {
		return nil, bad("signature algorithm %s, want RSA", a)
	}
	if len(si.SignedAttrs.FullBytes) > 0 {
		return nil, bad("signed attributes are not supported")
	}
	if si.Signer.Serial == nil {
		return nil, bad("signer is not named by issuer and serial number")
	}
	return si, nil
}
