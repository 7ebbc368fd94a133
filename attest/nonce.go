package attest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"time"
)

// A nonce is bound to the node and the build it was issued for (the two things
// the node's report token names) by an HMAC under the collector's secret:
//
//	hex( build id (8 bytes) | expiry, Unix seconds (8) | random (NonceRandom) | HMAC-SHA256(secret, "peerboot nonce v1", node, the rest)[:16] )
//
// so the collector checks one without having stored it: issuing one stores
// nothing per node, and no number of anonymous script fetches can evict the
// nonce a node is about to spend (issue 28). Spending is the collector's
// business (a row per spent nonce until it expires).

// NonceRandom is the random part's length in bytes.
const NonceRandom = 8

// nonceLen is a nonce's length in hex digits.
const nonceLen = 2 * (8 + 8 + NonceRandom + 16)

// MakeNonce is the nonce of node booting build (16 hex digits), expiring at
// expires, with random bytes raw.
func MakeNonce(secret []byte, node, build string, expires time.Time, raw []byte) (string, error) {
	id, err := hex.DecodeString(build)
	if err != nil || len(id) != 8 {
		return "", fmt.Errorf("build id %q: want 16 hex digits", build)
	}
	if len(raw) != NonceRandom {
		return "", fmt.Errorf("nonce: want %d random bytes, got %d", NonceRandom, len(raw))
	}
	msg := make([]byte, 0, 8+8+NonceRandom)
	msg = append(msg, id...)
	msg = binary.BigEndian.AppendUint64(msg, uint64(expires.Unix()))
	msg = append(msg, raw...)
	return hex.EncodeToString(append(msg, nonceMAC(secret, node, msg)...)), nil
}

// OpenNonce checks that nonce was made under secret for node, and returns the
// build and expiry it names; false: it was not (another node's, altered, or not
// a nonce at all). Expiry is the caller's to check against its clock.
func OpenNonce(secret []byte, nonce, node string) (build string, expires time.Time, ok bool) {
	if len(nonce) != nonceLen {
		return "", time.Time{}, false
	}
	b, err := hex.DecodeString(nonce)
	if err != nil {
		return "", time.Time{}, false
	}
	msg, mac := b[:8+8+NonceRandom], b[8+8+NonceRandom:]
	if !hmac.Equal(mac, nonceMAC(secret, node, msg)) {
		return "", time.Time{}, false
	}
	return hex.EncodeToString(msg[:8]), time.Unix(int64(binary.BigEndian.Uint64(msg[8:16])), 0).UTC(), true
}

func nonceMAC(secret []byte, node string, msg []byte) []byte {
	m := hmac.New(sha256.New, secret)
	io.WriteString(m, "peerboot nonce v1\x00"+node+"\x00")
	m.Write(msg)
	return m.Sum(nil)[:16]
}
