package main

import (
	"bytes"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"

	"github.com/peerboot/peerboot/bootproto"
)

// checkInitrd hashes the initrd the kernel was handed (kept at
// bootproto.InitrdSysfs by retain_initrd) against peerboot.initrd_sha256=:
// serve names it when the boot files came from a mirror, where the firmware
// checked nothing. A boot loader pads the initrd to 4 bytes, so up to three
// trailing zero bytes may follow the file. "" is a match; otherwise why not.
// errNoKeptInitrd: the kernel does not show the initrd it kept. Linux exposes it as
// /sys/firmware/initrd from 6.9 on (with retain_initrd); an older kernel, such as
// the default recipe's 6.1, cannot let the init check it.
var errNoKeptInitrd = errors.New("this kernel has no " + bootproto.InitrdSysfs + " (Linux 6.9 and later keep the initrd there under " + bootproto.RetainInitrd + ")")

func checkInitrd(path, want string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", errNoKeptInitrd
	}
	if err != nil {
		return "", fmt.Errorf("reading the kept initrd: %w (the kernel needs %s on its command line)", err, bootproto.RetainInitrd)
	}
	if len(want) != 64 {
		return fmt.Sprintf("%s=%q is not a sha256", bootproto.ArgInitrdSHA256, want), nil
	}
	pad := 0
	for pad < 3 && pad < len(b) && b[len(b)-1-pad] == 0 {
		pad++
	}
	h := sha256.New()
	h.Write(b[:len(b)-pad])
	var got string
	for k := 0; k <= pad; k++ {
		c := clone(h)
		c.Write(bytes.Repeat([]byte{0}, k))
		got = hex.EncodeToString(c.Sum(nil))
		if got == want {
			return "", nil
		}
	}
	return fmt.Sprintf("the initrd this node booted (%d bytes) has sha256 %s, not the %s its boot script names: the mirror's copy was altered or damaged in transit", len(b)-pad, got[:16], want[:16]), nil
}

// clone copies a sha256 state, so each padding length hashes from the shared prefix.
func clone(h hash.Hash) hash.Hash {
	state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	c := sha256.New()
	c.(encoding.BinaryUnmarshaler).UnmarshalBinary(state)
	return c
}
