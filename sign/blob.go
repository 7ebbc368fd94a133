package sign

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/peerboot/peerboot/sign/keyref"
)

// Artifact signatures are cosign's "blob" form: an ECDSA P-256 signature (ASN.1
// DER) over the SHA-256 of the data, or a pure Ed25519 signature over the data,
// stored base64-encoded. `cosign verify-blob --key cosign.pub --signature
// SHA256SUMS.sig SHA256SUMS` accepts it.

var b64 = base64.StdEncoding.Strict()

// checkArtifactKey accepts the two key types cosign's --key verifiers handle
// the way we sign: ECDSA P-256 (SHA-256) and Ed25519.
func checkArtifactKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("artifact key is %s; want ECDSA P-256 or Ed25519", keyref.Kind(pub))
		}
		return nil
	case ed25519.PublicKey:
		return nil
	}
	return fmt.Errorf("artifact key is %s; want ECDSA P-256 or Ed25519", keyref.Kind(pub))
}

// SignBlob signs data with an artifact key and returns the raw signature.
// Ed25519 signatures are deterministic; ECDSA ones are not.
func SignBlob(s crypto.Signer, data []byte) ([]byte, error) {
	if err := checkArtifactKey(s.Public()); err != nil {
		return nil, err
	}
	if _, ok := s.Public().(ed25519.PublicKey); ok {
		return s.Sign(rand.Reader, data, crypto.Hash(0))
	}
	d := sha256.Sum256(data)
	return s.Sign(rand.Reader, d[:], crypto.SHA256)
}

// VerifyBlob checks a raw signature made by SignBlob.
func VerifyBlob(pub crypto.PublicKey, data, sig []byte) error {
	if err := checkArtifactKey(pub); err != nil {
		return err
	}
	switch k := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(k, data, sig) {
			return errors.New("Ed25519 signature does not verify with the given key")
		}
	case *ecdsa.PublicKey:
		d := sha256.Sum256(data)
		if !ecdsa.VerifyASN1(k, d[:], sig) {
			return errors.New("ECDSA P-256 signature does not verify with the given key")
		}
	}
	return nil
}

// EncodeSig is the signature file's content: base64, no newline (as cosign
// sign-blob --output-signature writes it).
func EncodeSig(sig []byte) []byte { return []byte(b64.EncodeToString(sig)) }

// DecodeSig reverses EncodeSig, strictly: only the exact encoding is accepted.
func DecodeSig(b []byte) ([]byte, error) {
	sig, err := b64.DecodeString(string(b))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if !bytes.Equal(EncodeSig(sig), b) {
		return nil, errors.New("not in canonical base64 form")
	}
	return sig, nil
}

// KeyID is the sha256 of the key's PKIX DER encoding, hex.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:]), nil
}

// DSSE (https://github.com/secure-systems-lab/dsse): the signature covers
// PAE(payloadType, payload), never the JSON around it.

// InTotoPayloadType is the DSSE payload type of an in-toto statement.
const InTotoPayloadType = "application/vnd.in-toto+json"

// Envelope is a DSSE envelope.
type Envelope struct {
	PayloadType string        `json:"payloadType"`
	Payload     string        `json:"payload"` // base64 (standard, padded)
	Signatures  []EnvelopeSig `json:"signatures"`
}

// EnvelopeSig is one signature of an envelope.
type EnvelopeSig struct {
	KeyID string `json:"keyid"`
	Sig   string `json:"sig"` // base64 (standard, padded)
}

// PAE is DSSE's pre-authentication encoding:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in ASCII decimal.
func PAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString("DSSEv1 ")
	b.WriteString(strconv.Itoa(len(payloadType)))
	b.WriteByte(' ')
	b.WriteString(payloadType)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(len(payload)))
	b.WriteByte(' ')
	b.Write(payload)
	return b.Bytes()
}

// SignEnvelope wraps payload in a DSSE envelope signed with s.
func SignEnvelope(s crypto.Signer, payloadType string, payload []byte) (*Envelope, error) {
	sig, err := SignBlob(s, PAE(payloadType, payload))
	if err != nil {
		return nil, err
	}
	id, err := KeyID(s.Public())
	if err != nil {
		return nil, err
	}
	return &Envelope{PayloadType: payloadType, Payload: b64.EncodeToString(payload),
		Signatures: []EnvelopeSig{{KeyID: id, Sig: b64.EncodeToString(sig)}}}, nil
}

// MarshalEnvelope is the envelope's file form: one line of compact JSON (a
// .jsonl file with one envelope).
func MarshalEnvelope(e *Envelope) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// OpenEnvelope parses an envelope file strictly (it must be exactly what
// MarshalEnvelope writes), checks its type and that a signature by pub covers
// it, and returns the payload.
func OpenEnvelope(b []byte, pub crypto.PublicKey, payloadType string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Envelope
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("not a DSSE envelope: %w", err)
	}
	if canon, err := MarshalEnvelope(&e); err != nil || !bytes.Equal(canon, b) {
		return nil, errors.New("DSSE envelope is not in canonical form (extra bytes or altered JSON)")
	}
	if e.PayloadType != payloadType {
		return nil, fmt.Errorf("DSSE payloadType %q, want %q", e.PayloadType, payloadType)
	}
	payload, err := b64.DecodeString(e.Payload)
	if err != nil {
		return nil, fmt.Errorf("DSSE payload is not base64: %w", err)
	}
	id, err := KeyID(pub)
	if err != nil {
		return nil, err
	}
	if len(e.Signatures) == 0 {
		return nil, errors.New("DSSE envelope has no signatures")
	}
	var why []string
	for i, s := range e.Signatures {
		if s.KeyID != id {
			why = append(why, fmt.Sprintf("signature %d: keyid %q is not the given key's %s", i, s.KeyID, id))
			continue
		}
		sig, err := b64.DecodeString(s.Sig)
		if err != nil {
			why = append(why, fmt.Sprintf("signature %d: not base64: %v", i, err))
			continue
		}
		if err := VerifyBlob(pub, PAE(e.PayloadType, payload), sig); err != nil {
			why = append(why, fmt.Sprintf("signature %d: %v", i, err))
			continue
		}
		return payload, nil
	}
	return nil, fmt.Errorf("no valid DSSE signature by the given key (%s)", joinSemi(why))
}

func joinSemi(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(x)
	}
	return b.String()
}
