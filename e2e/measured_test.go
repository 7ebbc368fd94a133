package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/output"
)

// Measured boot, for real: the default image built with sign.pcr_key, signed,
// verified (its .pcrsig against .pcrpkey and the sections), then booted with
// OVMF, systemd-stub 252 and swtpm. The PCR 11 the init reads from the TPM
// before it extends "enter-initrd" is the value manifest.json predicted for
// phase "" (measure.Predict: .linux zero-filled to its VirtualSize, .pcrpkey).
func TestMeasuredBootPCR11(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image stage (the rest from the store) and boots QEMU with swtpm; runs in `make test`")
	}
	tmp := t.TempDir()
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	keys := filepath.Join(tmp, "keys")
	if out, code := peerboot(t, "keys", "init", keys); code != 0 {
		t.Fatalf("keys init: exit %d\n%s", code, out)
	}
	recipe := variantRecipe(t, tmp, "measured", "[sign]\npcr_key = \"file:keys/pcr.key\"\n")
	outRoot := filepath.Join(tmp, "out")
	if out, code := peerboot(t, "build", recipe, "--out", outRoot); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	dir := filepath.Join(outRoot, "default")
	var m output.Manifest
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.PCR11 == nil || !strings.Contains(strings.Join(m.PCR11.Sections, " "), ".pcrpkey") {
		t.Fatalf("manifest pcr11 %+v: want a prediction covering .pcrpkey", m.PCR11)
	}
	var stub string
	for _, ph := range m.PCR11.Phases {
		if ph.Phase == "" {
			stub = ph.Value
		}
	}
	if out, code := peerboot(t, "sign", dir, "--artifact-key", "file:"+filepath.Join(keys, "artifact.key")); code != 0 {
		t.Fatalf("sign: exit %d\n%s", code, out)
	}
	out, code := peerboot(t, "verify", dir, "--key", filepath.Join(keys, "cosign.pub"), "--pcr-pub", filepath.Join(keys, "pcr.pub"))
	if code != 0 || !strings.Contains(out, "peerboot.efi: .pcrsig OK: 4 phases") {
		t.Fatalf("verify: exit %d, want the .pcrsig checked\n%s", code, out)
	}
	out, code = peerboot(t, "run", "--tpm", dir)
	t.Logf("run --tpm:\n%s", out)
	if code != 0 {
		t.Fatalf("run --tpm: exit %d", code)
	}
	console, _ := os.ReadFile(filepath.Join(dir, "console-uefi.log"))
	got := regexp.MustCompile(`PCR 11 ([0-9a-f]{16})… \(systemd-stub's measurements\)`).FindSubmatch(console)
	if got == nil {
		t.Fatalf("the init printed no PCR 11 line: %s", lineWith(string(console), "TPM"))
	}
	if !strings.HasPrefix(stub, string(got[1])) {
		t.Errorf("the TPM's PCR 11 after systemd-stub is %s…, manifest.json predicted %s", got[1], stub)
	}
}
