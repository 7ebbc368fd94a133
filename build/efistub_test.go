package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/debfile/debtest"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

// The EFI stub comes out of the pinned package once; later builds take it from
// the store's hint, and a damaged hint is read as none, never trusted.
func TestEFIStubHint(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stub := "MZ\x90\x00 a stub " + strings.Repeat("x", 1000)
	deb := debtest.Build("systemd-boot-efi", []debtest.Entry{{Name: "./" + stubPath, Body: stub}})
	sum := sha256.Sum256(deb)
	in := lock.Input{Name: "systemd-boot-efi", Role: lock.RoleEFIStub, SHA256: hex.EncodeToString(sum[:])}
	if err := st.Put(context.Background(), bytes.NewReader(deb), in.SHA256); err != nil {
		t.Fatal(err)
	}
	sr := &stageRun{Store: st, Inputs: []lock.Input{in}}
	got := func(when string) {
		t.Helper()
		b, err := efiStub(sr)
		if err != nil || string(b) != stub {
			t.Fatalf("%s: %d bytes, %v; want the package's stub", when, len(b), err)
		}
	}
	got("from the package")
	hint := st.HintPath("efi-stub-" + in.SHA256)
	if _, err := os.Stat(hint); err != nil {
		t.Fatalf("no hint kept: %v", err)
	}
	// Without the package, the hint alone gives the stub.
	if err := st.Remove(in.SHA256); err != nil {
		t.Fatal(err)
	}
	got("from the hint")
	// A hint whose body no longer matches its sum is not used: with the package
	// gone, that is an error, not a wrong stub.
	b, _ := os.ReadFile(hint)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(hint, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := efiStub(sr); err == nil {
		t.Fatalf("a damaged hint and no package gave %d bytes", len(b))
	}
	// With the package back, the damaged hint is replaced.
	if err := st.Put(context.Background(), bytes.NewReader(deb), in.SHA256); err != nil {
		t.Fatal(err)
	}
	got("from the package again")
	if b, ok := readStubHint(hint); !ok || string(b) != stub {
		t.Fatal("the damaged hint was not rewritten")
	}
}
