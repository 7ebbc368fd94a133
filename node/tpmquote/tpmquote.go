// Package tpmquote is the node's side of an attested report: it opens the TPM
// 2.0, extends PCR 11 with the boot phase as systemd-pcrphase would, and makes
// the evidence (attest.Evidence) for one report: a TPM2_Quote over the sha256
// bank's PCRs 4, 7 and 11 by an attestation key, bound to the server's nonce
// and the report's sha256, with the AK's and the EK's public areas and the EK
// certificate when the TPM holds one. Pure Go over go-tpm: no cgo, no tss2.
package tpmquote

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/attest"
)

// PhasePCR is the PCR systemd-stub measures the UKI's sections into and
// systemd-pcrphase extends the boot phase words into.
const PhasePCR = 11

// EK certificate NV indices (TCG EK Credential Profile 2.0, section 2.2.1.4).
const (
	EKCertRSAIndex = 0x01c00002
	EKCertECCIndex = 0x01c0000a
)

// maxEKCert bounds the EK certificate read from NV: real ones are 1-2 KiB.
const maxEKCert = 8 << 10

// nvChunk is what one TPM2_NV_Read asks for: every TPM 2.0 takes 512 bytes
// (TPM_PT_NV_BUFFER_MAX is at least that on PC Client TPMs).
const nvChunk = 512

// AKTemplate is the attestation key: a restricted ECDSA P-256 signing key
// (TPM2_Quote with it signs only structures the TPM made) created as a primary
// under the endorsement hierarchy. A primary is derived from the hierarchy's
// seed and the template, so the same TPM gives the same AK at every boot with
// nothing stored in NV: what the collector's trust on first use needs. The
// template is fixed; changing one bit changes every node's AK.
var AKTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgECC,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true, UserWithAuth: true,
		Restricted: true, SignEncrypt: true, NoDA: true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
		Scheme: tpm2.TPMTECCScheme{Scheme: tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256})},
		CurveID: tpm2.TPMECCNistP256,
	}),
}

// Selection is the sha256 bank's PCRs 4, 7 and 11 (attest.QuotedPCRs).
func Selection() tpm2.TPMLPCRSelection {
	pcrs := make([]uint, len(attest.QuotedPCRs))
	for i, p := range attest.QuotedPCRs {
		pcrs[i] = uint(p)
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{
		Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(pcrs...)}}}
}

// ErrNoTPM says the node has no TPM 2.0 the kernel knows of.
var ErrNoTPM = errors.New("no TPM 2.0 (no /sys/class/tpm/tpm0: no chip, disabled in the firmware, or a TPM 1.2)")

// Device names the TPM device to open: the kernel's resource manager
// (/dev/tpmrm0, which flushes what a crashed client left loaded) when there
// is one, else /dev/tpm0. A node devtmpfs lacks is made from the major:minor
// in sysfs with mknod. sys is /sys, dev is /dev.
func Device(sys, dev string, mknod func(path string, mode uint32, dev int) error) (string, error) {
	if _, err := os.Stat(filepath.Join(sys, "class", "tpm", "tpm0")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", ErrNoTPM
		}
		return "", fmt.Errorf("looking for a TPM: %w", err)
	}
	var errs []error
	for _, c := range []struct{ class, name string }{{"tpmrm", "tpmrm0"}, {"tpm", "tpm0"}} {
		path := filepath.Join(dev, c.name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		b, err := os.ReadFile(filepath.Join(sys, "class", c.class, c.name, "dev"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		major, minor, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		ma, err1 := strconv.ParseUint(major, 10, 32)
		mi, err2 := strconv.ParseUint(minor, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			errs = append(errs, fmt.Errorf("%s/class/%s/%s/dev: want MAJOR:MINOR, got %q", sys, c.class, c.name, b))
			continue
		}
		if err := mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil {
			errs = append(errs, fmt.Errorf("mknod %s: %w", path, err))
			continue
		}
		return path, nil
	}
	return "", fmt.Errorf("the TPM has no usable device node: %w", errors.Join(errs...))
}

// Open opens the TPM device Device names.
func Open(path string) (transport.TPMCloser, error) {
	t, err := linuxtpm.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return t, nil
}

// PhaseDigest is what systemd-pcrphase extends into PCR 11 for a phase word:
// the sha256 of the word's bytes (no terminator).
func PhaseDigest(phase string) [32]byte { return sha256.Sum256([]byte(phase)) }

// ExtendPhase extends PCR 11 of the sha256 bank with PhaseDigest(phase). It
// must happen once per boot: the collector predicts PCR 11 as the stub's
// measurements followed by exactly this one extension.
func ExtendPhase(t transport.TPM, phase string) error {
	d := PhaseDigest(phase)
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(PhasePCR), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: d[:]}}},
	}.Execute(t)
	if err != nil {
		return fmt.Errorf("extending PCR %d with %q: %w", PhasePCR, phase, err)
	}
	return nil
}

// Quote makes the evidence for one report: body is the exact POST body, nonce
// the server's, phase what ExtendPhase extended. The keys are flushed again
// before it returns, so a TPM without a resource manager is left as found.
func Quote(t transport.TPM, nonce string, body []byte, phase string) (*attest.Evidence, error) {
	return QuoteWith(t, AKTemplate, nonce, body, phase)
}

// QuoteWith is Quote by an AK made from akTemplate: the node always uses
// AKTemplate; tests pass another to show the collector refuses such a key.
func QuoteWith(t transport.TPM, akTemplate tpm2.TPMTPublic, nonce string, body []byte, phase string) (*attest.Evidence, error) {
	primary := func(what string, tmpl tpm2.TPMTPublic) (*tpm2.CreatePrimaryResponse, error) {
		rsp, err := tpm2.CreatePrimary{
			PrimaryHandle: tpm2.AuthHandle{Handle: tpm2.TPMRHEndorsement, Auth: tpm2.PasswordAuth(nil)},
			InPublic:      tpm2.New2B(tmpl),
		}.Execute(t)
		if err != nil {
			return nil, fmt.Errorf("creating the %s (a primary under the endorsement hierarchy, empty auth): %w", what, err)
		}
		return rsp, nil
	}
	ek, err := primary("EK", tpm2.RSAEKTemplate)
	if err != nil {
		return nil, err
	}
	defer tpm2.FlushContext{FlushHandle: ek.ObjectHandle}.Execute(t)
	ak, err := primary("AK", akTemplate)
	if err != nil {
		return nil, err
	}
	defer tpm2.FlushContext{FlushHandle: ak.ObjectHandle}.Execute(t)

	pcrs, err := ReadPCRs(t)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	q, err := tpm2.Quote{
		SignHandle:     tpm2.AuthHandle{Handle: ak.ObjectHandle, Name: ak.Name, Auth: tpm2.PasswordAuth(nil)},
		QualifyingData: tpm2.TPM2BData{Buffer: attest.QualifyingData(nonce, sum)},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull}, // the AK's own: ECDSA-SHA256
		PCRSelect:      Selection(),
	}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("TPM2_Quote: %w", err)
	}
	// The PCRs cannot have moved between the read and the quote unless
	// something else extends them meanwhile; the collector checks the quote's
	// pcrDigest against these values, so a race shows there, not silently.
	ev := &attest.Evidence{
		Version: attest.Version, Nonce: nonce, ReportSHA256: hex.EncodeToString(sum[:]), Phase: phase,
		PCRs:  map[string]string{},
		Quote: q.Quoted.Bytes(), Signature: tpm2.Marshal(q.Signature),
		AKPublic: ak.OutPublic.Bytes(), EKPublic: ek.OutPublic.Bytes(),
	}
	for i, v := range pcrs {
		ev.PCRs[strconv.Itoa(i)] = hex.EncodeToString(v[:])
	}
	// The certificate of the RSA EK: the EK this evidence carries.
	if cert, err := ReadNV(t, EKCertRSAIndex, maxEKCert); err == nil {
		ev.EKCert = cert
	}
	return ev, nil
}

// ReadPCRs reads the sha256 bank's PCRs 4, 7 and 11.
func ReadPCRs(t transport.TPM) (map[int][32]byte, error) {
	rd, err := tpm2.PCRRead{PCRSelectionIn: Selection()}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("reading PCRs %v: %w", attest.QuotedPCRs, err)
	}
	if len(rd.PCRValues.Digests) != len(attest.QuotedPCRs) {
		return nil, fmt.Errorf("reading PCRs %v: the TPM returned %d values (no sha256 bank allocated?)", attest.QuotedPCRs, len(rd.PCRValues.Digests))
	}
	out := map[int][32]byte{}
	for i, n := range attest.QuotedPCRs {
		d := rd.PCRValues.Digests[i].Buffer
		if len(d) != 32 {
			return nil, fmt.Errorf("PCR %d: %d bytes, want a sha256 digest", n, len(d))
		}
		out[n] = [32]byte(d)
	}
	return out, nil
}

// ReadNV reads a whole NV index (at most limit bytes) with the owner's
// (empty) authorization, as EK certificates are readable.
func ReadNV(t transport.TPM, index uint32, limit int) ([]byte, error) {
	pub, err := tpm2.NVReadPublic{NVIndex: tpm2.TPMHandle(index)}.Execute(t)
	if err != nil {
		return nil, fmt.Errorf("NV index %#x: %w", index, err)
	}
	nv, err := pub.NVPublic.Contents()
	if err != nil {
		return nil, fmt.Errorf("NV index %#x public area: %w", index, err)
	}
	size := int(nv.DataSize)
	if size > limit {
		return nil, fmt.Errorf("NV index %#x holds %d bytes, more than the %d expected", index, size, limit)
	}
	auth := tpm2.AuthHandle{Handle: tpm2.TPMRHOwner, Auth: tpm2.PasswordAuth(nil)}
	if !nv.Attributes.OwnerRead && nv.Attributes.AuthRead {
		auth = tpm2.AuthHandle{Handle: tpm2.TPMHandle(index), Name: pub.NVName, Auth: tpm2.PasswordAuth(nil)}
	}
	out := make([]byte, 0, size)
	for off := 0; off < size; off += nvChunk {
		n := min(nvChunk, size-off)
		rsp, err := tpm2.NVRead{
			AuthHandle: auth,
			NVIndex:    tpm2.NamedHandle{Handle: tpm2.TPMHandle(index), Name: pub.NVName},
			Size:       uint16(n), Offset: uint16(off),
		}.Execute(t)
		if err != nil {
			return nil, fmt.Errorf("reading NV index %#x at %d: %w", index, off, err)
		}
		out = append(out, rsp.Data.Buffer...)
	}
	return out, nil
}
