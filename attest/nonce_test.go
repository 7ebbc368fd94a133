package attest

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNonce(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	exp := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	n, err := MakeNonce(secret, "52:54:00:00:00:01", "0123456789abcdef", exp, []byte("12345678"))
	if err != nil || len(n) != 80 || strings.Trim(n, "0123456789abcdef") != "" {
		t.Fatalf("MakeNonce: %q %v", n, err)
	}
	if b, e, ok := OpenNonce(secret, n, "52:54:00:00:00:01"); !ok || b != "0123456789abcdef" || !e.Equal(exp) {
		t.Errorf("OpenNonce: %s %s %t", b, e, ok)
	}
	flipped := []byte(n)
	for i := range flipped {
		c := bytes.Clone(flipped)
		c[i] = '0'
		if n[i] == '0' {
			c[i] = '1'
		}
		if _, _, ok := OpenNonce(secret, string(c), "52:54:00:00:00:01"); ok {
			t.Fatalf("digit %d changed, the nonce still opens", i)
		}
	}
	for _, c := range []struct {
		name        string
		secret      []byte
		nonce, node string
	}{
		{"another node", secret, n, "52:54:00:00:00:02"},
		{"another secret", bytes.Repeat([]byte{8}, 32), n, "52:54:00:00:00:01"},
		{"short", secret, n[:78], "52:54:00:00:00:01"},
		{"not hex", secret, strings.Repeat("z", 80), "52:54:00:00:00:01"},
		{"the old 32-digit form", secret, n[:32], "52:54:00:00:00:01"},
	} {
		if _, _, ok := OpenNonce(c.secret, c.nonce, c.node); ok {
			t.Errorf("%s: opens", c.name)
		}
	}
	if _, err := MakeNonce(secret, "n", "xyz", exp, []byte("12345678")); err == nil {
		t.Error("a build id that is not 16 hex digits made a nonce")
	}
}

func FuzzOpenNonce(f *testing.F) {
	secret := bytes.Repeat([]byte{7}, 32)
	n, _ := MakeNonce(secret, "node", "0123456789abcdef", time.Unix(1e9, 0), []byte("12345678"))
	f.Add(n, "node")
	f.Add("", "")
	f.Add(strings.Repeat("0", 80), "node")
	f.Fuzz(func(t *testing.T, nonce, node string) {
		b, _, ok := OpenNonce(secret, nonce, node)
		if ok && (nonce != n || node != "node" || b != "0123456789abcdef") {
			t.Fatalf("OpenNonce accepted %q for %q", nonce, node)
		}
	})
}
