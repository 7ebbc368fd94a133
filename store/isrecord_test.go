package store

import "testing"

func TestIsRecord(t *testing.T) {
	for name, want := range map[string]bool{
		"MANIFEST": true, "SIZES": true, "MIDSTATES": true,
		"uki.efi": false, "manifest": false, "MANIFEST.tmp": false, "": false, "sub/MANIFEST": false,
	} {
		if got := IsRecord(name); got != want {
			t.Errorf("IsRecord(%q) = %v, want %v", name, got, want)
		}
	}
}
