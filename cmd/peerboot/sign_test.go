package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keys init, sign and verify through the binary: exit codes and messages.
func TestKeysSignVerify(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	out, errs, code := run(t, "keys", "init", keys)
	if code != 0 || !strings.Contains(out, "TEST KEYS") || !strings.Contains(errs, "NOT FOR PRODUCTION") {
		t.Fatalf("keys init: exit %d\n%s%s", code, out, errs)
	}
	if _, _, code := run(t, "keys", "init", keys); code != 2 {
		t.Errorf("keys init over existing keys: exit %d, want 2", code)
	}
	outDir := filepath.Join(dir, "default")
	os.MkdirAll(filepath.Join(outDir, "pxe"), 0o755)
	files := map[string]string{
		"manifest.json": `{"recipe":"default","recipe_digest":"sha256:` + strings.Repeat("ab", 32) + `","source_date_epoch":1,"inputs":[],"stages":[],"outputs":[]}` + "\n",
		"pxe/vmlinuz":   strings.Repeat("k", 4096),
	}
	sums := ""
	for _, n := range []string{"manifest.json", "pxe/vmlinuz"} {
		os.WriteFile(filepath.Join(outDir, n), []byte(files[n]), 0o644)
		h := sha256.Sum256([]byte(files[n]))
		sums += fmt.Sprintf("%s  %s\n", hex.EncodeToString(h[:]), n)
	}
	os.WriteFile(filepath.Join(outDir, "SHA256SUMS"), []byte(sums), 0o644)

	if _, errs, code := run(t, "sign", outDir); code != 2 {
		t.Errorf("sign without --artifact-key: exit %d, want 2\n%s", code, errs)
	}
	if _, errs, code := run(t, "sign", outDir, "--artifact-key", "file:"+filepath.Join(keys, "artifact.key"), "--db-key", "file:"+filepath.Join(keys, "db.key")); code == 0 || !strings.Contains(errs, "both") {
		t.Errorf("--db-key without --db-cert: exit %d\n%s", code, errs)
	}
	// A plain path, as verify --key takes one; --json lists what signing did.
	out, errs, code = run(t, "sign", outDir, "--artifact-key", filepath.Join(keys, "artifact.key"), "--json")
	var sj signJSON
	if err := json.Unmarshal([]byte(out), &sj); code != 0 || err != nil || sj.Dir != outDir || len(sj.Steps) == 0 {
		t.Fatalf("sign --json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	pub := filepath.Join(keys, "cosign.pub")
	if out, errs, code := run(t, "verify", outDir, "--key", pub); code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
	if _, _, code := run(t, "verify", outDir); code != 2 {
		t.Errorf("verify without --key: exit %d, want 2", code)
	}
	p := filepath.Join(outDir, "pxe/vmlinuz")
	b, _ := os.ReadFile(p)
	b[100] ^= 0x40
	os.WriteFile(p, b, 0o644)
	out, errs, code = run(t, "verify", outDir, "--key", pub)
	if code != 6 || !strings.Contains(errs, "pxe/vmlinuz: sha256 ") {
		t.Errorf("verify after a flip in pxe/vmlinuz: exit %d, want 6 naming the file\n%s%s", code, out, errs)
	}
	if _, errs, code := run(t, "verify", outDir, "--key", filepath.Join(keys, "db.crt")); code != 2 {
		t.Errorf("verify with an RSA key: exit %d, want 2\n%s", code, errs)
	}
}
