package measure

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
)

// A signed PCR policy, as `systemd-measure sign` (src/boot/measure.c,
// verb_sign, systemd 252) writes it and systemd-cryptsetup/-creds accept it
// from /.extra/tpm2-pcr-signature.json, where the stub puts .pcrsig:
//
//	{"sha256":[{"pcrs":[11],"pkfp":HEX,"pol":HEX,"sig":BASE64}, …one per phase]}
//
//   - pol is the TPM2 policy digest a trial session reaches after one
//     TPM2_PolicyPCR over PCR 11 of the sha256 bank with pcrDigest =
//     SHA-256(the predicted PCR 11 value) (TPM 2.0 Part 3, 23.7: policyDigest =
//     H(0^32 || TPM_CC_PolicyPCR || pcrs || pcrDigest));
//   - sig is EVP_DigestSign with the bank's hash over pol: for an RSA key,
//     RSASSA-PKCS1-v1_5 over SHA-256(pol), deterministic;
//   - pkfp is SHA-256 of the public key as i2d_PublicKey writes it (PKCS#1
//     RSAPublicKey DER), checked against `systemd-measure sign` in the tests;
//   - the output is the JSON short form plus a newline, keys in that order.
//
// systemd 252 accepts RSA keys only (tpm2-util.c: "Provided public key is not
// an RSA key.").

const (
	tpmCCPolicyPCR = 0x0000017F
	tpmAlgSHA256   = 0x000B
)

// PolicyPCR11 is the TPM2 policy digest of PolicyPCR over PCR 11 (sha256
// bank) holding pcr11, starting from an empty policy.
func PolicyPCR11(pcr11 [32]byte) [32]byte {
	pcrDigest := sha256.Sum256(pcr11[:])
	var b bytes.Buffer
	b.Write(make([]byte, 32)) // the trial session's initial policyDigest
	binary.Write(&b, binary.BigEndian, uint32(tpmCCPolicyPCR))
	// TPML_PCR_SELECTION: count, then TPMS_PCR_SELECTION{hash, sizeofSelect, pcrSelect}.
	binary.Write(&b, binary.BigEndian, uint32(1))
	binary.Write(&b, binary.BigEndian, uint16(tpmAlgSHA256))
	sel := []byte{0, 0, 0}
	sel[PCR/8] |= 1 << (PCR % 8)
	b.WriteByte(byte(len(sel)))
	b.Write(sel)
	b.Write(pcrDigest[:])
	return sha256.Sum256(b.Bytes())
}

// KeyFingerprint is systemd's pkfp: SHA-256 of the PKCS#1 DER public key.
func KeyFingerprint(pub *rsa.PublicKey) [32]byte {
	return sha256.Sum256(x509.MarshalPKCS1PublicKey(pub))
}

// PublicKeyPEM is the .pcrpkey section: the key as a PEM "PUBLIC KEY"
// (SubjectPublicKeyInfo), the form systemd reads with PEM_read_PUBKEY and
// openssl's `rsa -pubout` writes.
func PublicKeyPEM(pub *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePublicKeyPEM reads a .pcrpkey section: one PEM PUBLIC KEY, RSA.
func ParsePublicKeyPEM(b []byte) (*rsa.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("not a PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key is %T; systemd 252 checks PCR signatures with RSA keys only", k)
	}
	return rk, nil
}

// SigEntry is one signed policy in .pcrsig.
type SigEntry struct {
	PCRs []int  `json:"pcrs"`
	PKFP string `json:"pkfp"`
	Pol  string `json:"pol"`
	Sig  string `json:"sig"`
}

// PCRSig is the .pcrsig document; only the sha256 bank is written or checked.
type PCRSig struct {
	SHA256 []SigEntry `json:"sha256"`
}

// SignerKey checks that key is an RSA signer systemd can use and returns its public key.
func SignerKey(key crypto.Signer) (*rsa.PublicKey, error) {
	pub, ok := key.Public().(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("PCR signing key is %T; systemd 252 accepts RSA keys only", key.Public())
	}
	if pub.N.BitLen() < 2048 {
		return nil, fmt.Errorf("PCR signing key is RSA %d; want at least 2048 bits", pub.N.BitLen())
	}
	return pub, nil
}

// Sign writes .pcrsig for p: one signed PolicyPCR per phase of
// DefaultPhases, in that order, as `systemd-measure sign --bank=sha256
// --json=short` prints it. RSA PKCS#1 v1.5 is deterministic, so the same
// prediction and key give the same bytes.
func Sign(p Prediction, key crypto.Signer) ([]byte, error) {
	pub, err := SignerKey(key)
	if err != nil {
		return nil, err
	}
	fp := KeyFingerprint(pub)
	var doc PCRSig
	for _, ph := range DefaultPhases {
		v, ok := p.Value(ph)
		if !ok {
			return nil, fmt.Errorf("prediction has no phase %q", ph)
		}
		pol := PolicyPCR11(v)
		h := sha256.Sum256(pol[:])
		sig, err := key.Sign(rand.Reader, h[:], crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("signing the PCR policy for phase %s: %w", ph, err)
		}
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig); err != nil {
			return nil, fmt.Errorf("PCR signing key did not make an RSA PKCS#1 v1.5 signature: %w", err)
		}
		doc.SHA256 = append(doc.SHA256, SigEntry{
			PCRs: []int{PCR},
			PKFP: hex.EncodeToString(fp[:]),
			Pol:  hex.EncodeToString(pol[:]),
			Sig:  base64.StdEncoding.EncodeToString(sig),
		})
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// ParsePCRSig decodes a .pcrsig section (trailing NULs of section padding
// are ignored). Unknown banks are kept out; an entry that is not well formed
// is an error.
func ParsePCRSig(b []byte) (PCRSig, error) {
	b = bytes.TrimRight(b, "\x00")
	var doc PCRSig
	if err := json.Unmarshal(b, &doc); err != nil {
		return PCRSig{}, fmt.Errorf("not JSON in systemd-measure's format: %w", err)
	}
	for i, e := range doc.SHA256 {
		if _, err := hex.DecodeString(e.PKFP); err != nil || len(e.PKFP) != 64 {
			return PCRSig{}, fmt.Errorf("sha256[%d].pkfp: want 64 hex digits, got %q", i, e.PKFP)
		}
		if _, err := hex.DecodeString(e.Pol); err != nil || len(e.Pol) != 64 {
			return PCRSig{}, fmt.Errorf("sha256[%d].pol: want 64 hex digits, got %q", i, e.Pol)
		}
		if _, err := base64.StdEncoding.DecodeString(e.Sig); err != nil {
			return PCRSig{}, fmt.Errorf("sha256[%d].sig: not base64: %v", i, err)
		}
	}
	return doc, nil
}

// CheckResult is what Check found in a signed UKI.
type CheckResult struct {
	Signed      bool       // the UKI has a .pcrsig
	Fingerprint string     // pkfp of .pcrpkey, hex
	Phases      []string   // the phases whose signed policy matched the sections
	Prediction  Prediction // from the UKI's sections
}

// Check verifies a UKI's .pcrsig: every sha256 entry must be for PCR 11, be
// signed by the key in .pcrpkey (its fingerprint and its signature), and
// carry the policy of one of the phases predicted from the UKI's own
// sections; each of DefaultPhases must be signed. A UKI without .pcrsig gives
// Signed false and no error. The error lists every problem found.
func Check(uki []byte) (CheckResult, error) {
	return CheckKnown(uki, nil)
}

// CheckKnown is Check predicting with known digests (PredictKnown).
func CheckKnown(uki []byte, known Known) (CheckResult, error) {
	img, err := ParsePE(uki)
	if err != nil {
		return CheckResult{}, err
	}
	sigSec, ok := img.Lookup(".pcrsig")
	if !ok || sigSec.VirtualSize == 0 {
		return CheckResult{}, nil
	}
	res := CheckResult{Signed: true}
	sigData, err := LoadedData(uki, sigSec)
	if err != nil {
		return res, err
	}
	doc, err := ParsePCRSig(sigData)
	if err != nil {
		return res, fmt.Errorf(".pcrsig: %w", err)
	}
	keySec, ok := img.Lookup(".pcrpkey")
	if !ok || keySec.VirtualSize == 0 {
		return res, errors.New(".pcrsig present but no .pcrpkey: nothing to check the signatures against")
	}
	keyData, err := LoadedData(uki, keySec)
	if err != nil {
		return res, err
	}
	pub, err := ParsePublicKeyPEM(bytes.TrimRight(keyData, "\x00"))
	if err != nil {
		return res, fmt.Errorf(".pcrpkey: %w", err)
	}
	fp := KeyFingerprint(pub)
	res.Fingerprint = hex.EncodeToString(fp[:])
	if res.Prediction, err = PredictKnown(uki, known); err != nil {
		return res, err
	}
	want := map[string]string{} // policy hex -> phase
	for _, ph := range res.Prediction.Phases {
		pol := PolicyPCR11(ph.PCR11)
		want[hex.EncodeToString(pol[:])] = ph.Name
	}
	var problems []error
	if len(doc.SHA256) == 0 {
		problems = append(problems, errors.New(".pcrsig has no sha256 signatures"))
	}
	for i, e := range doc.SHA256 {
		at := fmt.Sprintf(".pcrsig sha256[%d]", i)
		if !slices.Equal(e.PCRs, []int{PCR}) {
			problems = append(problems, fmt.Errorf("%s: signs PCRs %v, want [%d]", at, e.PCRs, PCR))
			continue
		}
		if e.PKFP != res.Fingerprint {
			problems = append(problems, fmt.Errorf("%s: signed by key %s, but .pcrpkey is %s", at, e.PKFP, res.Fingerprint))
			continue
		}
		pol, _ := hex.DecodeString(e.Pol)
		sig, _ := base64.StdEncoding.DecodeString(e.Sig)
		h := sha256.Sum256(pol)
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, h[:], sig); err != nil {
			problems = append(problems, fmt.Errorf("%s: signature does not verify against .pcrpkey", at))
			continue
		}
		phase, ok := want[e.Pol]
		if !ok {
			problems = append(problems, fmt.Errorf("%s: signed policy %s matches no PCR 11 value predicted from the UKI's sections (%v): a section changed after signing", at, e.Pol, res.Prediction.Sections))
			continue
		}
		if !slices.Contains(res.Phases, phase) {
			res.Phases = append(res.Phases, phase)
		}
	}
	for _, ph := range DefaultPhases {
		if !slices.Contains(res.Phases, ph) && len(problems) == 0 {
			problems = append(problems, fmt.Errorf(".pcrsig: no valid signature for phase %s", ph))
		}
	}
	return res, errors.Join(problems...)
}
