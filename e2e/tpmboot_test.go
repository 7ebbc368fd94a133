package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/qemu"
	"github.com/peerboot/peerboot/selftest"
	"github.com/peerboot/peerboot/store"
)

// fetchBuildDefault fetches the inputs and builds the default recipe into
// outRoot, as an operator does before anything else.
func fetchBuildDefault(t *testing.T, outRoot string) {
	t.Helper()
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
}

// bootWithTPM network-boots script (an iPXE script) by UEFI (OVMF, the NIC's
// iPXE EFI ROM) with swtpm as the TPM on the state in tpmState, until the
// init says "report POST" or the self-test's marker shows. It returns the
// boot's result and its console; a boot QEMU could not run fails t.
func bootWithTPM(t *testing.T, script, tpmState string) (*qemu.Result, string) {
	t.Helper()
	pxe := t.TempDir()
	if err := os.WriteFile(filepath.Join(pxe, "boot.ipxe"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	var console bytes.Buffer
	res, err := qemu.Boot(context.Background(), qemu.Options{Mode: qemu.UEFIPXE, PXEDir: pxe, WorkDir: t.TempDir(), Timeout: 10 * time.Minute,
		TPM: true, TPMStateDir: tpmState,
		Console: &console, KVMHint: (&store.Store{Root: cacheDir()}).HintPath(store.KVMFailsHint),
		Stop:      func(line string) bool { return strings.Contains(line, "report POST") },
		Succeeded: func() bool { return strings.Contains(console.String(), selftest.Marker) }})
	if err != nil {
		t.Fatalf("boot: %v\n%s", err, tailOf(console.String(), 40))
	}
	return res, console.String()
}
