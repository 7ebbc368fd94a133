// Package stubtest gives tests systemd's real UKI stub, the one the default
// recipe pins, so the UKI writer and the PCR 11 prediction are both checked
// against the stub nodes really boot: one helper, instead of a copy in each
// package's tests.
package stubtest

import (
	"os"
	"testing"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

// Real is systemd's linuxx64.efi.stub from the systemd-boot-efi .deb the lock
// at lockPath pins (role efi-stub; tests pass ../recipes/default.lock), read
// from the store `peerboot fetch` fills ($PEERBOOT_CACHE, else the default;
// `make test` fetches first). A stub not in the store is a skip away from CI
// and a failure under CI. PEERBOOT_STUB names another stub file instead.
func Real(tb testing.TB, lockPath string) []byte {
	tb.Helper()
	if path := os.Getenv("PEERBOOT_STUB"); path != "" {
		stub, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		return stub
	}
	lf, err := lock.Read(lockPath)
	if err != nil {
		tb.Fatal(err)
	}
	var deb *lock.Deb
	for i, d := range lf.Debs {
		if d.Role == lock.RoleEFIStub {
			deb = &lf.Debs[i]
		}
	}
	if deb == nil {
		tb.Fatalf("%s pins no %s package", lockPath, lock.RoleEFIStub)
	}
	st, err := store.Open(store.DefaultRoot())
	if err != nil {
		tb.Fatal(err)
	}
	if !st.HasBlob(deb.SHA256) {
		testguard.Skipf(tb, "%s %s (sha256 %s) is not in the store %s: run `peerboot fetch recipes/default.toml` (make test does)",
			deb.Package, deb.Version, deb.SHA256, st.Root)
	}
	if err := st.CheckBlob(deb.SHA256); err != nil {
		tb.Fatal(err)
	}
	f, err := st.Open(deb.SHA256)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	const stubPath = "usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	stub, err := debfile.DataFile(f, stubPath)
	if err != nil {
		tb.Fatalf("%s: %v", deb.Filename, err)
	}
	return stub
}
