package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckInitrd(t *testing.T) {
	initrd := []byte("070701 a cpio archive that ends in a zero\x00")
	h := sha256.Sum256(initrd)
	want := hex.EncodeToString(h[:])
	dir := t.TempDir()
	write := func(b []byte) string {
		p := filepath.Join(dir, "initrd")
		if err := os.WriteFile(p, b, 0o444); err != nil {
			os.Chmod(p, 0o644)
			os.WriteFile(p, b, 0o444)
		}
		return p
	}
	altered := append([]byte(nil), initrd...)
	altered[3] ^= 1
	for _, c := range []struct {
		name string
		kept []byte
		want string
		bad  string // "" a match
	}{
		{"as fetched", initrd, want, ""},
		{"padded to 4 bytes", append(append([]byte(nil), initrd...), 0, 0, 0), want, ""},
		{"padded by 1", append(append([]byte(nil), initrd...), 0), want, ""},
		{"altered", altered, want, "has sha256 "},
		{"a byte more", append(append([]byte(nil), initrd...), 1), want, "has sha256 "},
		{"not a sha256", initrd, "abc", `peerboot.initrd_sha256="abc" is not a sha256`},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(filepath.Join(dir, "initrd"))
			bad, err := checkInitrd(write(c.kept), c.want)
			if err != nil {
				t.Fatal(err)
			}
			if (c.bad == "") != (bad == "") || !strings.Contains(bad, c.bad) {
				t.Fatalf("got %q, want %q", bad, c.bad)
			}
		})
	}
	// A kernel before 6.9 has no /sys/firmware/initrd: said as such (the init
	// makes it an info finding), not as a mismatch or an unreadable file.
	if _, err := checkInitrd(filepath.Join(dir, "absent"), want); !errors.Is(err, errNoKeptInitrd) || !strings.Contains(err.Error(), "retain_initrd") {
		t.Fatalf("no kept initrd: %v", err)
	}
	// Present but unreadable (a directory here) stays an error of its own.
	if _, err := checkInitrd(dir, want); err == nil || errors.Is(err, errNoKeptInitrd) {
		t.Fatalf("unreadable kept initrd: %v", err)
	}
}
