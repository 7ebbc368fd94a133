package keyref

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/asn1"
	"errors"
	"fmt"
	"hash"
)

// PKCS#8 EncryptedPrivateKeyInfo with PBES2 (RFC 8018): PBKDF2 with an HMAC
// PRF, then AES-CBC or DES-EDE3-CBC. This is what `openssl pkcs8 -topk8` and
// `openssl genpkey -aes256` write, and how Debian's snakeoil key is stored.
var (
	oidPBES2      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 13}
	oidPBKDF2     = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 5, 12}
	oidHMACSHA1   = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 7}
	oidHMACSHA256 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 9}
	oidHMACSHA512 = asn1.ObjectIdentifier{1, 2, 840, 113549, 2, 11}
	oidDESEDE3CBC = asn1.ObjectIdentifier{1, 2, 840, 113549, 3, 7}
	oidAES128CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 2}
	oidAES192CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 22}
	oidAES256CBC  = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 1, 42}
)

type algID struct {
	Algorithm  asn1.ObjectIdentifier
	Parameters asn1.RawValue `asn1:"optional"`
}

type encryptedPKInfo struct {
	Algo algID
	Data []byte
}

type pbes2Params struct {
	KDF    algID
	Scheme algID
}

type pbkdf2Params struct {
	Salt      []byte
	Iter      int
	KeyLength int   `asn1:"optional"`
	PRF       algID `asn1:"optional"`
}

func decryptPKCS8(der, pass []byte) ([]byte, error) {
	var info encryptedPKInfo
	if _, err := asn1.Unmarshal(der, &info); err != nil {
		return nil, fmt.Errorf("encrypted PKCS#8: %w", err)
	}
	if !info.Algo.Algorithm.Equal(oidPBES2) {
		return nil, fmt.Errorf("encrypted PKCS#8: scheme %v is not PBES2 (re-encrypt with `openssl pkcs8 -topk8 -v2 aes256`)", info.Algo.Algorithm)
	}
	var p pbes2Params
	if _, err := asn1.Unmarshal(info.Algo.Parameters.FullBytes, &p); err != nil {
		return nil, fmt.Errorf("PBES2 parameters: %w", err)
	}
	if !p.KDF.Algorithm.Equal(oidPBKDF2) {
		return nil, fmt.Errorf("PBES2: key derivation %v is not PBKDF2", p.KDF.Algorithm)
	}
	var kp pbkdf2Params
	if _, err := asn1.Unmarshal(p.KDF.Parameters.FullBytes, &kp); err != nil {
		return nil, fmt.Errorf("PBKDF2 parameters: %w", err)
	}
	var prf func() hash.Hash
	switch {
	case len(kp.PRF.Algorithm) == 0 || kp.PRF.Algorithm.Equal(oidHMACSHA1):
		prf = sha1.New
	case kp.PRF.Algorithm.Equal(oidHMACSHA256):
		prf = sha256.New
	case kp.PRF.Algorithm.Equal(oidHMACSHA512):
		prf = sha512.New
	default:
		return nil, fmt.Errorf("PBKDF2: unsupported PRF %v", kp.PRF.Algorithm)
	}
	var keyLen int
	var newBlock func([]byte) (cipher.Block, error)
	switch s := p.Scheme.Algorithm; {
	case s.Equal(oidDESEDE3CBC):
		keyLen, newBlock = 24, des.NewTripleDESCipher
	case s.Equal(oidAES128CBC):
		keyLen, newBlock = 16, aes.NewCipher
	case s.Equal(oidAES192CBC):
		keyLen, newBlock = 24, aes.NewCipher
	case s.Equal(oidAES256CBC):
		keyLen, newBlock = 32, aes.NewCipher
	default:
		return nil, fmt.Errorf("PBES2: unsupported cipher %v", s)
	}
	var iv []byte
	if _, err := asn1.Unmarshal(p.Scheme.Parameters.FullBytes, &iv); err != nil {
		return nil, fmt.Errorf("PBES2 cipher IV: %w", err)
	}
	key, err := pbkdf2.Key(prf, string(pass), kp.Salt, kp.Iter, keyLen)
	if err != nil {
		return nil, fmt.Errorf("PBKDF2: %w", err)
	}
	blk, err := newBlock(key)
	if err != nil {
		return nil, err
	}
	if len(iv) != blk.BlockSize() || len(info.Data)%blk.BlockSize() != 0 || len(info.Data) == 0 {
		return nil, errors.New("encrypted PKCS#8: bad IV or data length")
	}
	out := make([]byte, len(info.Data))
	cipher.NewCBCDecrypter(blk, iv).CryptBlocks(out, info.Data)
	// PKCS#7 padding; a wrong passphrase almost always breaks it.
	n := int(out[len(out)-1])
	if n == 0 || n > blk.BlockSize() || !hmac.Equal(out[len(out)-n:], bytesOf(byte(n), n)) {
		return nil, fmt.Errorf("wrong passphrase in %s (the decrypted key has bad padding)", PassphraseEnv)
	}
	return out[:len(out)-n], nil
}

func bytesOf(b byte, n int) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = b
	}
	return s
}
