package sign

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/fsutil"
)

// UEFI Secure Boot signatures are Authenticode (PKCS#7 in the PE certificate
// table), applied with Debian's sbsign and checked with sbverify (sbsigntool).
// sbsign reads its key from a file: the key is written, unencrypted PKCS#8, to a
// private 0700 temporary directory for the call and removed after it.

// PESigned says whether a PE image already carries a certificate table
// (IMAGE_DIRECTORY_ENTRY_SECURITY).
func PESigned(b []byte) (bool, error) {
	if len(b) < 0x40 || b[0] != 'M' || b[1] != 'Z' {
		return false, errors.New("not a PE image (no MZ header)")
	}
	pe := int(binary.LittleEndian.Uint32(b[0x3c:]))
	if pe < 0 || pe+24+2 > len(b) || !bytes.Equal(b[pe:pe+4], []byte("PE\x00\x00")) {
		return false, errors.New("not a PE image (no PE signature)")
	}
	opt := pe + 24
	var dirs int
	switch binary.LittleEndian.Uint16(b[opt:]) {
	case 0x20b: // PE32+
		dirs = opt + 112
	case 0x10b: // PE32
		dirs = opt + 96
	default:
		return false, errors.New("not a PE image (unknown optional header magic)")
	}
	if dirs > len(b) {
		return false, errors.New("PE image truncated in its optional header")
	}
	n := int(binary.LittleEndian.Uint32(b[dirs-4:]))
	if n <= 4 {
		return false, nil
	}
	sec := dirs + 4*8
	if sec+8 > len(b) {
		return false, errors.New("PE image truncated in its data directories")
	}
	return binary.LittleEndian.Uint32(b[sec+4:]) != 0, nil
}

// SignPE signs in (a PE/EFI image) with key and cert using sbsign and writes
// the result to out.
func SignPE(ctx context.Context, key crypto.Signer, cert *x509.Certificate, in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	if signed, err := PESigned(b); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	} else if signed {
		return fmt.Errorf("%s: already carries an Authenticode signature; sign a fresh build output (peerboot build)", in)
	}
	if err := certMatchesKey(cert, key); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "peerboot-sbsign-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	kp, err := privateKeyPEM(key)
	if err != nil {
		return fmt.Errorf("db key: sbsign needs the key in a file, and it cannot be exported: %w", err)
	}
	keyFile, certFile := filepath.Join(tmp, "db.key"), filepath.Join(tmp, "db.crt")
	if err := os.WriteFile(keyFile, kp, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		return err
	}
	signed := filepath.Join(tmp, "signed.efi")
	cmd := exec.CommandContext(ctx, "sbsign", "--key", keyFile, "--cert", certFile, "--output", signed, in)
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sbsign %s: %w: %s", in, err, strings.TrimSpace(string(o)))
	}
	sb, err := os.ReadFile(signed)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(out, sb, 0o644)
}

// VerifyPE checks a PE image's Authenticode signature against cert with sbverify.
func VerifyPE(ctx context.Context, cert *x509.Certificate, file string) error {
	tmp, err := os.MkdirTemp("", "peerboot-sbverify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	certFile := filepath.Join(tmp, "db.crt")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), 0o644); err != nil {
		return err
	}
	o, err := exec.CommandContext(ctx, "sbverify", "--cert", certFile, file).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return fmt.Errorf("running sbverify: %w", err)
		}
		lines := strings.Split(strings.TrimSpace(string(o)), "\n")
		//lint:ignore ST1005 Authenticode is a proper noun
		return fmt.Errorf("Authenticode signature does not verify against the db certificate (sbverify: %s)", strings.Join(lines, "; "))
	}
	return nil
}

func certMatchesKey(cert *x509.Certificate, key crypto.Signer) error {
	type eq interface{ Equal(crypto.PublicKey) bool }
	if p, ok := key.Public().(eq); !ok || !p.Equal(cert.PublicKey) {
		return fmt.Errorf("db certificate %q is not the db key's certificate", cert.Subject.String())
	}
	return nil
}

// WriteDisk writes the GPT disk image the image stage writes (image.StandardDisk)
// around uki, with the GUIDs, volume ids and timestamps derived from the recipe digest.
func WriteDisk(path string, size int64, recipeDigest string, epoch int64, uki []byte) error {
	d, err := image.StandardDisk(recipeDigest, size, epoch, uki)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return fsutil.WriteAtomic(path, 0o644, func(f *os.File) error { return image.WriteDisk(f, d) })
}

// WriteISO writes the ISO the image stage writes (image.StandardISO) around uki.
func WriteISO(path string, recipeDigest string, epoch int64, uki []byte) error {
	iso := image.StandardISO(recipeDigest, epoch, uki)
	return fsutil.WriteAtomic(path, 0o644, func(f *os.File) error { return image.WriteISO(f, iso) })
}

func certName(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return c.Subject.CommonName
	}
	return c.Subject.String()
}
