package attest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/google/go-tpm/tpm2"
)

// Expect is what the collector knows before it reads the evidence: the nonce it
// issued for this node's boot, the PCR 11 predicted for the build it served
// that node, and the AK it recorded for the node.
type Expect struct {
	Nonce string
	// PCR11 is the value systemd-stub leaves in PCR 11 at Phase for the UKI the
	// node was served (measure.Predict).
	PCR11 [32]byte
	Phase string // "": PhaseEnterInitrd
	// AKName is the hex TPM Name of the node's recorded AK; "": none recorded yet
	// (trust on first use: whatever AK passes the other checks is the node's).
	AKName string
	// EKRoots, when set, must verify the evidence's EK certificate, whose key
	// must be the evidence's EK public.
	EKRoots *x509.CertPool
}

// Result is what passing evidence proved.
type Result struct {
	AKName   string // hex TPM Name (nameAlg, then the digest of TPMT_PUBLIC) of the AK
	EKName   string // the same of the EK public the node sent
	FirstUse bool   // no AK was recorded: the caller records AKName
	// EKChecked: EKRoots verified the EK certificate (false: no roots configured).
	EKChecked bool
	PCRs      map[int][32]byte
	// ResetCount and RestartCount are the TPM's, from the quote's clock info.
	ResetCount, RestartCount uint32
}

// Refusal is a check that failed; Reason is worded for the fleet page.
type Refusal struct{ Reason string }

func (r *Refusal) Error() string { return r.Reason }

func refuse(format string, a ...any) error { return &Refusal{Reason: fmt.Sprintf(format, a...)} }

// Verify checks ev against body (the exact POST body) and want. It is pure: the
// caller looks the nonce up and spends it, and records the AK on first use. A
// failure is a *Refusal whose reason names the check.
//
// In order: the report digest; the nonce; the AK (a restricted signing key, the
// one recorded); the quote signature by the AK; TPMS_ATTEST (magic, type quote,
// extraData = QualifyingData); the PCR selection (sha256: 4, 7, 11); the PCR
// digest against the supplied values; the phase and PCR 11 against the
// prediction; the EK certificate chain when roots are given.
func Verify(ev *Evidence, body []byte, want Expect) (*Result, error) {
	if err := ev.check(); err != nil {
		return nil, refuse("malformed evidence: %v", err)
	}
	sum := sha256.Sum256(body)
	if got, _ := hex.DecodeString(ev.ReportSHA256); !bytes.Equal(got, sum[:]) {
		return nil, refuse("report digest mismatch: the evidence is for report sha256 %s, the body is %x", clip(ev.ReportSHA256), sum)
	}
	if subtle.ConstantTimeCompare([]byte(ev.Nonce), []byte(want.Nonce)) != 1 {
		return nil, refuse("nonce mismatch: the evidence carries %q, this boot was issued %q", clip(ev.Nonce), want.Nonce)
	}
	ak, akName, err := parsePublic(ev.AKPublic, "AK")
	if err != nil {
		return nil, err
	}
	a := ak.ObjectAttributes
	if !a.Restricted || !a.SignEncrypt || a.Decrypt || !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin {
		return nil, refuse("AK is not a restricted signing key made in the TPM (restricted=%t sign=%t decrypt=%t fixedTPM=%t fixedParent=%t sensitiveDataOrigin=%t)",
			a.Restricted, a.SignEncrypt, a.Decrypt, a.FixedTPM, a.FixedParent, a.SensitiveDataOrigin)
	}
	if want.AKName != "" && want.AKName != akName {
		return nil, refuse("AK changed: the node's recorded AK is %s, this quote is signed by %s (a new TPM or a cleared one: delete the node's AK record to accept it)", short(want.AKName), short(akName))
	}
	_, ekName, err := parsePublic(ev.EKPublic, "EK")
	if err != nil {
		return nil, err
	}
	if err := checkSignature(ak, ev.Quote, ev.Signature); err != nil {
		return nil, err
	}
	att, err := strictUnmarshal[tpm2.TPMSAttest](ev.Quote)
	if err != nil {
		return nil, refuse("quote: not a TPMS_ATTEST: %v", err)
	}
	if att.Magic != tpm2.TPMGeneratedValue {
		return nil, refuse("quote: magic %#x, want TPM_GENERATED %#x", uint32(att.Magic), uint32(tpm2.TPMGeneratedValue))
	}
	if att.Type != tpm2.TPMSTAttestQuote {
		return nil, refuse("quote: attestation type %#x, want TPM_ST_ATTEST_QUOTE %#x", uint16(att.Type), uint16(tpm2.TPMSTAttestQuote))
	}
	var digest [32]byte
	copy(digest[:], sum[:])
	if qd := QualifyingData(ev.Nonce, digest); !bytes.Equal(att.ExtraData.Buffer, qd) {
		return nil, refuse("quote: extraData %x is not the qualifying data of this nonce and report (%x): the quote was made for another report or nonce", att.ExtraData.Buffer, qd)
	}
	info, err := att.Attested.Quote()
	if err != nil {
		return nil, refuse("quote: %v", err)
	}
	if err := checkSelection(info.PCRSelect); err != nil {
		return nil, err
	}
	pcrs := map[int][32]byte{}
	h := sha256.New()
	for _, i := range QuotedPCRs {
		b, _ := hex.DecodeString(ev.PCRs[strconv.Itoa(i)])
		var v [32]byte
		copy(v[:], b)
		pcrs[i] = v
		h.Write(v[:])
	}
	if got := h.Sum(nil); !bytes.Equal(got, info.PCRDigest.Buffer) {
		return nil, refuse("PCR digest mismatch: the quote's pcrDigest is %x, the PCR values sent hash to %x", info.PCRDigest.Buffer, got)
	}
	phase := want.Phase
	if phase == "" {
		phase = PhaseEnterInitrd
	}
	if ev.Phase != phase {
		return nil, refuse("phase %q, want %q: PCR 11 is predicted for that phase only", clip(ev.Phase), phase)
	}
	if got := pcrs[11]; got != want.PCR11 {
		why := ""
		if got == ([32]byte{}) {
			why = " (PCR 11 is zero: nothing measured the UKI, e.g. a PXE kernel boot without systemd-stub)"
		}
		return nil, refuse("PCR 11 mismatch: the TPM has %x, the UKI served to this node predicts %x at %s%s", got[:], want.PCR11[:], phase, why)
	}
	res := &Result{AKName: akName, EKName: ekName, FirstUse: want.AKName == "", PCRs: pcrs,
		ResetCount: att.ClockInfo.ResetCount, RestartCount: att.ClockInfo.RestartCount}
	if want.EKRoots != nil {
		if err := checkEKCert(ev, want.EKRoots); err != nil {
			return nil, err
		}
		res.EKChecked = true
	}
	return res, nil
}

// short is the first 16 hex digits of a name after its algorithm id.
func short(name string) string {
	if len(name) > 20 {
		return name[4:20] + "…"
	}
	return name
}

// strictUnmarshal parses TPM wire bytes and refuses any that do not marshal
// back to the same bytes (trailing data, a non-canonical form).
func strictUnmarshal[T tpm2.Marshallable, P interface {
	*T
	tpm2.Unmarshallable
}](b []byte) (v *T, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("unparseable: %v", r)
		}
	}()
	v, err = tpm2.Unmarshal[T, P](b)
	if err != nil {
		return nil, err
	}
	if again := tpm2.Marshal(*v); !bytes.Equal(again, b) {
		return nil, fmt.Errorf("%d bytes, of which %d parse: trailing or non-canonical data", len(b), len(again))
	}
	return v, nil
}

// parsePublic reads a TPMT_PUBLIC and its Name.
func parsePublic(b []byte, what string) (*tpm2.TPMTPublic, string, error) {
	pub, err := strictUnmarshal[tpm2.TPMTPublic](b)
	if err != nil {
		return nil, "", refuse("%s public: not a TPMT_PUBLIC: %v", what, err)
	}
	name, err := objectName(pub)
	if err != nil {
		return nil, "", refuse("%s public: %v", what, err)
	}
	return pub, name, nil
}

func objectName(pub *tpm2.TPMTPublic) (name string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("no Name: %v", r)
		}
	}()
	n, err := tpm2.ObjectName(pub)
	if err != nil {
		return "", fmt.Errorf("no Name: %w", err)
	}
	return hex.EncodeToString(n.Buffer), nil
}

// AKName is the hex TPM Name of a TPMT_PUBLIC in wire form, as Result.AKName.
func AKName(akPublic []byte) (string, error) {
	_, name, err := parsePublic(akPublic, "AK")
	return name, err
}

// checkSignature verifies sig (TPMT_SIGNATURE) over quote by the AK: ECDSA or
// RSASSA with SHA-256, the schemes a fixed-template AK signs with.
func checkSignature(ak *tpm2.TPMTPublic, quote, sigBytes []byte) error {
	sig, err := strictUnmarshal[tpm2.TPMTSignature](sigBytes)
	if err != nil {
		return refuse("quote signature: not a TPMT_SIGNATURE: %v", err)
	}
	key, err := tpm2.Pub(*ak)
	if err != nil {
		return refuse("AK public: %v", err)
	}
	digest := sha256.Sum256(quote)
	switch sig.SigAlg {
	case tpm2.TPMAlgECDSA:
		e, err := sig.Signature.ECDSA()
		if err != nil {
			return refuse("quote signature: %v", err)
		}
		pk, ok := key.(*ecdsa.PublicKey)
		if !ok {
			return refuse("quote signature: ECDSA, but the AK is not an ECC key")
		}
		if e.Hash != tpm2.TPMAlgSHA256 {
			return refuse("quote signature: hash %#x, want SHA-256", uint16(e.Hash))
		}
		// Bytes encodes through crypto/internal/fips140/ecdsa, which refuses a point
		// off the curve (or at infinity): the check IsOnCurve did, without its
		// deprecated big.Int API.
		if _, err := pk.Bytes(); err != nil {
			return refuse("AK public: the ECC point is not on the curve")
		}
		r, s := new(big.Int).SetBytes(e.SignatureR.Buffer), new(big.Int).SetBytes(e.SignatureS.Buffer)
		if !ecdsa.Verify(pk, digest[:], r, s) {
			return refuse("quote signature does not verify with the AK")
		}
	case tpm2.TPMAlgRSASSA:
		e, err := sig.Signature.RSASSA()
		if err != nil {
			return refuse("quote signature: %v", err)
		}
		pk, ok := key.(*rsa.PublicKey)
		if !ok {
			return refuse("quote signature: RSASSA, but the AK is not an RSA key")
		}
		if e.Hash != tpm2.TPMAlgSHA256 {
			return refuse("quote signature: hash %#x, want SHA-256", uint16(e.Hash))
		}
		if err := rsa.VerifyPKCS1v15(pk, crypto.SHA256, digest[:], e.Sig.Buffer); err != nil {
			return refuse("quote signature does not verify with the AK")
		}
	default:
		return refuse("quote signature: algorithm %#x, want ECDSA or RSASSA", uint16(sig.SigAlg))
	}
	return nil
}

// wantSelect is the sha256 bank's bitmap of PCRs 4, 7 and 11.
var wantSelect = []byte{1<<4 | 1<<7, 1 << (11 - 8), 0}

func checkSelection(sel tpm2.TPMLPCRSelection) error {
	if len(sel.PCRSelections) != 1 {
		return refuse("PCR selection: %d banks, want sha256 only", len(sel.PCRSelections))
	}
	s := sel.PCRSelections[0]
	if s.Hash != tpm2.TPMAlgSHA256 {
		return refuse("PCR selection: bank %#x, want sha256", uint16(s.Hash))
	}
	got := append([]byte(nil), s.PCRSelect...)
	for len(got) < len(wantSelect) {
		got = append(got, 0)
	}
	for i, b := range got {
		w := byte(0)
		if i < len(wantSelect) {
			w = wantSelect[i]
		}
		if b != w {
			return refuse("PCR selection: bitmap %x, want PCRs 4, 7, 11 (%x)", s.PCRSelect, wantSelect)
		}
	}
	return nil
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// checkEKCert verifies the EK certificate against roots and that it certifies
// the EK public the node sent. EK certificates carry TCG key usages Go does not
// know, hence ExtKeyUsageAny; manufacturers' intermediates belong in the bundle.
func checkEKCert(ev *Evidence, roots *x509.CertPool) error {
	if len(ev.EKCert) == 0 {
		return refuse("no EK certificate, and the server checks EK chains (--ek-ca)")
	}
	cert, err := x509.ParseCertificate(ev.EKCert)
	if err != nil {
		// TPM vendors' certificates are not always strict DER; the error says so.
		return refuse("EK certificate: %v", err)
	}
	// TCG EK Credential Profile 2.0 (3.2.9): an EK certificate's subject is
	// empty and its subjectAltName, a directoryName of TPM manufacturer, model
	// and version, is critical; Go leaves a SAN without DNS/email/IP/URI names
	// "unhandled", which would fail every genuine EK certificate (swtpm's too).
	exts := cert.UnhandledCriticalExtensions[:0]
	for _, oid := range cert.UnhandledCriticalExtensions {
		if !oid.Equal(oidSubjectAltName) {
			exts = append(exts, oid)
		}
	}
	cert.UnhandledCriticalExtensions = exts
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return refuse("EK certificate does not chain to the --ek-ca bundle: %v", err)
	}
	ek, _, err := parsePublic(ev.EKPublic, "EK")
	if err != nil {
		return err
	}
	key, err := tpm2.Pub(*ek)
	if err != nil {
		return refuse("EK public: %v", err)
	}
	eq, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !eq.Equal(key) {
		return refuse("EK certificate is for another key than the EK public sent")
	}
	return nil
}

// IsRefusal reports whether err is a failed check (as opposed to a server fault).
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}
