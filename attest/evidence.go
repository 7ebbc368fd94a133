// Package attest carries a node's TPM evidence with its boot report and checks
// it on the collector: the evidence (a TPM2 quote over PCRs 4, 7 and 11, bound
// to a server-issued nonce and to the report's sha256) travels base64url in the
// Peerboot-Attestation header of POST /reports.
package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Evidence is what a node sends beside its report. Byte fields are in the TPM's
// wire form, as TPM2_Quote and TPM2_ReadPublic return them, so the collector
// parses exactly what the TPM produced.
type Evidence struct {
	Version      int               `json:"v"`                 // 1
	Nonce        string            `json:"nonce"`             // as the server issued it
	ReportSHA256 string            `json:"report_sha256"`     // hex sha256 of the exact POST body bytes
	Phase        string            `json:"phase"`             // "enter-initrd"
	PCRs         map[string]string `json:"pcrs"`              // "4","7","11" -> hex sha256-bank values
	Quote        []byte            `json:"quote"`             // TPMS_ATTEST as returned by TPM2_Quote
	Signature    []byte            `json:"signature"`         // TPMT_SIGNATURE, TPM wire form
	AKPublic     []byte            `json:"ak_public"`         // TPMT_PUBLIC, TPM wire form
	EKPublic     []byte            `json:"ek_public"`         // TPMT_PUBLIC, TPM wire form
	EKCert       []byte            `json:"ek_cert,omitempty"` // DER
}

// Header is the HTTP header of POST /reports that carries
// base64url(JSON(Evidence)) (unpadded or padded).
const Header = "Peerboot-Attestation"

// Version is the only Evidence.Version this package reads and writes.
const Version = 1

// PhaseEnterInitrd is the systemd-stub phase a node's PCR 11 is in when the
// init quotes it: the stub has measured the UKI's sections and the initrd
// runs, but systemd's later phase words are never extended (peerboot's init is
// not systemd).
const PhaseEnterInitrd = "enter-initrd"

// MaxHeaderBytes bounds the header value before it is decoded: a quote, a
// signature, two public areas and an EK certificate fit in well under 16 KiB.
const MaxHeaderBytes = 16 << 10

// qualifyingPrefix separates this protocol's hashes from any other use of the
// same TPM (domain separation): a quote made for something else cannot pass.
const qualifyingPrefix = "peerboot-attest-v1\x00"

// QualifyingData is the extraData the node passes to TPM2_Quote:
// sha256("peerboot-attest-v1\x00" + nonce + "\x00" + reportSHA256). It binds the
// quote to the nonce the server issued and to the report's bytes.
func QualifyingData(nonce string, reportSHA256 [32]byte) []byte {
	h := sha256.New()
	h.Write([]byte(qualifyingPrefix))
	h.Write([]byte(nonce))
	h.Write([]byte{0})
	h.Write(reportSHA256[:])
	return h.Sum(nil)
}

// Encode returns the header value for ev: base64url (unpadded) of its JSON.
func Encode(ev *Evidence) (string, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("encoding attestation evidence: %w", err)
	}
	s := base64.RawURLEncoding.EncodeToString(b)
	if len(s) > MaxHeaderBytes {
		return "", fmt.Errorf("attestation evidence is %d bytes encoded, the collector takes at most %d", len(s), MaxHeaderBytes)
	}
	return s, nil
}

// Decode parses a header value strictly: at most MaxHeaderBytes, base64url
// (padding optional), one JSON object with no unknown fields and nothing after
// it, version 1, and every required field present and well formed. It checks
// form only; Verify checks what the evidence proves.
func Decode(header string) (*Evidence, error) {
	if len(header) > MaxHeaderBytes {
		return nil, fmt.Errorf("%s header: %d bytes, at most %d", Header, len(header), MaxHeaderBytes)
	}
	header = strings.TrimSpace(header)
	if header == "" {
		return nil, fmt.Errorf("%s header: empty", Header)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(header, "="))
	if err != nil {
		return nil, fmt.Errorf("%s header: not base64url: %w", Header, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var ev Evidence
	if err := dec.Decode(&ev); err != nil {
		return nil, fmt.Errorf("%s header: JSON: %w", Header, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s header: JSON: data after the object", Header)
	}
	if err := ev.check(); err != nil {
		return nil, fmt.Errorf("%s header: %w", Header, err)
	}
	return &ev, nil
}

// QuotedPCRs are the PCRs a node quotes, in selection order: 4 (the boot path:
// the loaders and the UKI as PE images), 7 (Secure Boot state and keys), 11
// (the UKI's sections and phases, as systemd-stub measures them).
var QuotedPCRs = []int{4, 7, 11}

func (ev *Evidence) check() error {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if ev.Version != Version {
		add("v: want %d, got %d", Version, ev.Version)
	}
	if ev.Nonce == "" {
		add("nonce: missing")
	} else if len(ev.Nonce) > 128 || strings.ContainsAny(ev.Nonce, "\x00\r\n ") {
		add("nonce: %d bytes or a control/space character; a server nonce is short and printable", len(ev.Nonce))
	}
	if b, err := hexBytes(ev.ReportSHA256, 32); err != nil || b == nil {
		add("report_sha256: want 64 hex digits, got %q", clip(ev.ReportSHA256))
	}
	if ev.Phase == "" {
		add("phase: missing")
	}
	if len(ev.PCRs) != len(QuotedPCRs) {
		add("pcrs: want exactly %v, got %d entries", QuotedPCRs, len(ev.PCRs))
	}
	for _, i := range QuotedPCRs {
		k := fmt.Sprint(i)
		v, ok := ev.PCRs[k]
		if !ok {
			add("pcrs: %s missing", k)
			continue
		}
		if _, err := hexBytes(v, 32); err != nil {
			add("pcrs[%s]: want 64 hex digits, got %q", k, clip(v))
		}
	}
	for name, b := range map[string][]byte{"quote": ev.Quote, "signature": ev.Signature, "ak_public": ev.AKPublic, "ek_public": ev.EKPublic} {
		if len(b) == 0 {
			add("%s: missing", name)
		}
	}
	if len(problems) > 0 {
		sortStrings(problems)
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}
