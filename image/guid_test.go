package image

import "testing"

func TestDeriveGUID(t *testing.T) {
	a := DeriveGUID(testSeed, "esp")
	if a != DeriveGUID(testSeed, "esp") {
		t.Fatal("not stable")
	}
	if a == DeriveGUID(testSeed, "reports") || a == DeriveGUID(testSeed+"x", "esp") {
		t.Fatal("purpose or seed does not change the GUID")
	}
	// Concatenation ambiguity: ("ab","c") and ("a","bc") must differ.
	if DeriveGUID("ab", "c") == DeriveGUID("a", "bc") {
		t.Fatal("seed/purpose boundary is ambiguous")
	}
	if a[6]>>4 != 4 || a[8]>>6 != 2 {
		t.Errorf("version/variant bits wrong: %s", GUIDString(a))
	}
	// Golden: a change here changes every image's identity; only on purpose.
	if got, want := GUIDString(a), "8F779B1B-587C-4652-B239-E2631B55FEC5"; got != want {
		t.Errorf("DeriveGUID(%q, esp) = %s, want %s", testSeed, got, want)
	}
	if DeriveVolumeID(testSeed, "esp") == DeriveVolumeID(testSeed, "reports") {
		t.Error("volume ids collide")
	}
}

func TestGUIDEncoding(t *testing.T) {
	if s := GUIDString(GUIDTypeESP); s != "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" {
		t.Errorf("round trip: %s", s)
	}
	// The ESP type GUID as it appears on disk (UEFI spec, mixed endian).
	want := [16]byte{0x28, 0x73, 0x2A, 0xC1, 0x1F, 0xF8, 0xD2, 0x11, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B}
	if got := gptBytes(GUIDTypeESP); got != want {
		t.Errorf("on-disk bytes % X", got)
	}
}
