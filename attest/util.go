package attest

import (
	"encoding/hex"
	"fmt"
	"sort"
)

// hexBytes decodes s as lower- or upper-case hex of exactly n bytes.
func hexBytes(s string, n int) ([]byte, error) {
	if len(s) != 2*n {
		return nil, fmt.Errorf("want %d hex digits, got %d", 2*n, len(s))
	}
	return hex.DecodeString(s)
}

// clip shortens outside text quoted into an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func sortStrings(s []string) { sort.Strings(s) }
