package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// sign refuses what it cannot sign with the documented classes, never exit 1
// ("a bug"): a directory that is not a build output and a lone --db-key are usage
// errors (2), an output whose files no longer match SHA256SUMS is an integrity
// failure (6), as verify calls it; each leaves OUTDIR unsigned.
func TestSignRefusals(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if _, errs, code := run(t, "keys", "init", keys); code != 0 {
		t.Fatalf("keys init: exit %d\n%s", code, errs)
	}
	art := filepath.Join(keys, "artifact.key")
	output := func(name string) string {
		d := filepath.Join(dir, name)
		os.MkdirAll(filepath.Join(d, "pxe"), 0o755)
		m := `{"recipe":"default","recipe_digest":"sha256:` + strings.Repeat("ab", 32) + `","source_date_epoch":1,"inputs":[],"stages":[],"outputs":[]}` + "\n"
		sums := ""
		for _, f := range [][2]string{{"manifest.json", m}, {"pxe/vmlinuz", strings.Repeat("k", 4096)}} { // SHA256SUMS is sorted
			n, s := f[0], f[1]
			os.WriteFile(filepath.Join(d, n), []byte(s), 0o644)
			h := sha256.Sum256([]byte(s))
			sums += fmt.Sprintf("%s  %s\n", hex.EncodeToString(h[:]), n)
		}
		os.WriteFile(filepath.Join(d, "SHA256SUMS"), []byte(sums), 0o644)
		return d
	}
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	changed := output("changed")
	os.WriteFile(filepath.Join(changed, "pxe/vmlinuz"), []byte("tampered"), 0o644)
	gone := output("gone")
	os.Remove(filepath.Join(gone, "pxe/vmlinuz"))
	cases := []struct {
		name string
		args []string
		dir  string
		code int
		re   string
	}{
		{"not a build output", []string{"sign", empty, "--artifact-key", art}, empty, 2, `^peerboot: \S*empty: not a build output: no manifest.json \(peerboot build writes out/RECIPE\)\n$`},
		{"db key without cert", []string{"sign", output("lone"), "--artifact-key", art, "--db-key", filepath.Join(keys, "db.key")}, filepath.Join(dir, "lone"), 2, `^peerboot: give both --db-key and --db-cert, or neither\n$`},
		{"changed file", []string{"sign", changed, "--artifact-key", art}, changed, 6, `^peerboot: \S*changed/pxe/vmlinuz: sha256 \w+, but SHA256SUMS lists \w+: refusing to sign a changed output\n$`},
		{"missing file", []string{"sign", gone, "--artifact-key", art}, gone, 6, `^peerboot: \S*gone/pxe/vmlinuz: listed in SHA256SUMS but missing: refusing to sign a changed output\n$`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs, code := run(t, c.args...)
			if code != c.code || !regexp.MustCompile(c.re).MatchString(errs) {
				t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d, stderr matching %s", c.args, code, errs, c.code, c.re)
			}
			if _, err := os.Stat(filepath.Join(c.dir, "SHA256SUMS.sig")); err == nil {
				t.Errorf("%s: SHA256SUMS.sig written by a refused sign", c.dir)
			}
		})
	}
}
