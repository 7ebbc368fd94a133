package image

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Domain prefixes keep GUIDs and volume ids from one seed unrelated, and the
// NUL separators keep ("ab","c") and ("a","bc") apart.
const (
	guidDomain  = "peerboot/guid\x00"
	volIDDomain = "peerboot/volume-id\x00"
)

// DeriveGUID derives a stable GUID from a seed (the recipe digest) and a
// purpose ("disk", "esp", ...): the first 16 bytes of
// sha256("peerboot/guid\0" + seed + "\0" + purpose), with the RFC 4122
// version (4) and variant bits set so tools that check them accept it.
// The result is in RFC 4122 byte order, i.e. the order of the string form;
// WriteDisk converts to GPT's mixed-endian layout itself.
func DeriveGUID(seed, purpose string) [16]byte {
	h := sha256.Sum256([]byte(guidDomain + seed + "\x00" + purpose))
	var g [16]byte
	copy(g[:], h[:16])
	g[6] = g[6]&0x0f | 0x40
	g[8] = g[8]&0x3f | 0x80
	return g
}

// DeriveVolumeID derives a stable FAT volume serial number the same way.
func DeriveVolumeID(seed, purpose string) uint32 {
	h := sha256.Sum256([]byte(volIDDomain + seed + "\x00" + purpose))
	return binary.LittleEndian.Uint32(h[:4])
}

// GUIDString formats a GUID held in RFC 4122 byte order.
func GUIDString(g [16]byte) string {
	return fmt.Sprintf("%X-%X-%X-%X-%X", g[0:4], g[4:6], g[6:8], g[8:10], g[10:16])
}

// mustGUID parses a GUID string constant into RFC 4122 byte order.
func mustGUID(s string) [16]byte {
	var g [16]byte
	var a uint32
	var b, c, d uint16
	var e uint64
	if _, err := fmt.Sscanf(s, "%08x-%04x-%04x-%04x-%012x", &a, &b, &c, &d, &e); err != nil {
		panic(fmt.Sprintf("bad GUID constant %q: %v", s, err))
	}
	binary.BigEndian.PutUint32(g[0:], a)
	binary.BigEndian.PutUint16(g[4:], b)
	binary.BigEndian.PutUint16(g[6:], c)
	binary.BigEndian.PutUint16(g[8:], d)
	for i := 0; i < 6; i++ {
		g[10+i] = byte(e >> (8 * (5 - i)))
	}
	return g
}

// gptBytes converts RFC 4122 order to the on-disk GPT order, where the first
// three fields are little-endian.
func gptBytes(g [16]byte) [16]byte {
	var o [16]byte
	o[0], o[1], o[2], o[3] = g[3], g[2], g[1], g[0]
	o[4], o[5] = g[5], g[4]
	o[6], o[7] = g[7], g[6]
	copy(o[8:], g[8:])
	return o
}
