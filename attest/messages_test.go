package attest

import (
	"strings"
	"testing"
)

// The helpers that shape refusal messages: clip keeps 80 bytes and marks the
// cut, short keeps 16 hex digits of a long name.
func TestMessageHelpers(t *testing.T) {
	s80, s81 := strings.Repeat("a", 80), strings.Repeat("b", 81)
	if clip(s80) != s80 || clip(s81) != strings.Repeat("b", 80)+"…" {
		t.Errorf("clip: %q %q", clip(s80), clip(s81))
	}
	name := "000b" + strings.Repeat("0123456789abcdef", 4)
	if got := short(name); got != "0123456789abcdef…" {
		t.Errorf("short(name) = %q", got)
	}
	if s20 := strings.Repeat("c", 20); short(s20) != s20 {
		t.Errorf("short of 20 bytes = %q", short(s20))
	}
}
