package recipe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadText(t *testing.T, name, text string) *Resolved {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(p)
	if err != nil {
		t.Fatalf("Load:\n%s\nerror: %v", text, err)
	}
	return r
}

const digestBase = `name = "digest"
[platform]
cpu_vendor = "intel"
sockets = 2

[[repo]]
suite = "bookworm"
components = ["main"]
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
mirror = "system"

[kernel]
source = { deb = "linux-source-6.1" }

[driver]
version = "535.261.03"
source = { deb = "nvidia-open-kernel-source" }

[env]
B = "2"
A = "1"
`

// Same recipe: keys and tables reordered, comments, blank lines, other spacing,
// literal strings, defaults written out, sizes and durations in other spellings.
const digestReordered = `# the same recipe, written differently
[env]
A = '1'   # literal string
B="2"

[driver]
source = {deb="nvidia-open-kernel-source"}
version    =    "535.261.03"
modules = ["nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem"]


[kernel.source]
deb = "linux-source-6.1"

[[repo]]
mirror = "system"
keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
architecture = "amd64"
components = [
  "main",   # only main
]
suite = "bookworm"
name = "bookworm"

[platform]
sockets = 2
cpu_vendor = "intel"

[selftest]
copy_size = "262144KiB"
[selftest.deadlines]
total = "300s"
`

func TestDigestStable(t *testing.T) {
	a := loadText(t, "digest.toml", digestBase)
	b := loadText(t, "other-file-name.toml", "name = \"digest\"\n"+digestReordered)
	if a.Digest != b.Digest {
		t.Errorf("digest depends on how the recipe is written:\n%s\n%s\n--- a\n%s\n--- b\n%s", a.Digest, b.Digest, a.Canonical(), b.Canonical())
	}
	// Loading twice gives the same digest (map order must not leak in).
	for i := 0; i < 20; i++ {
		if c := loadText(t, "digest.toml", digestBase); c.Digest != a.Digest {
			t.Fatalf("load %d: digest %s, first %s", i, c.Digest, a.Digest)
		}
	}
	// The same content through an include gives the same digest.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "base.toml"), []byte(digestBase), 0o644)
	os.WriteFile(filepath.Join(dir, "digest.toml"), []byte("include = [\"base.toml\"]\n"), 0o644)
	c, err := Load(filepath.Join(dir, "digest.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest != a.Digest {
		t.Errorf("digest through an include %s, direct %s", c.Digest, a.Digest)
	}
}

func TestDigestChanges(t *testing.T) {
	base := loadText(t, "digest.toml", digestBase).Digest
	seen := map[string]string{base: "base"}
	for name, edit := range map[string][2]string{
		"env value":       {`A = "1"`, `A = "11"`},
		"env key":         {`A = "1"`, `C = "1"`},
		"sockets":         {"sockets = 2", "sockets = 1"},
		"repo component":  {`components = ["main"]`, `components = ["main", "contrib"]`},
		"component order": {`components = ["main"]`, `components = ["main", "non-free"]`},
		"kernel version":  {`source = { deb = "linux-source-6.1" }`, `source = { deb = "linux-source-6.1", version = "6.1.192-3" }`},
		"name":            {`name = "digest"`, `name = "digest2"`},
		"added default":   {"[env]", "[boot]\non_pass = \"reboot\"\n[env]"},
		"size":            {"[env]", "[selftest]\ncopy_size = \"512MiB\"\n[env]"},
	} {
		text := strings.Replace(digestBase, edit[0], edit[1], 1)
		if text == digestBase {
			t.Fatalf("%s: edit did not apply", name)
		}
		d := loadText(t, "digest.toml", text).Digest
		if prev, ok := seen[d]; ok {
			t.Errorf("%s: digest %s equals that of %s", name, d, prev)
		}
		seen[d] = name
	}
	// Reordering an array is a change: module load order and repo order matter.
	a := loadText(t, "digest.toml", strings.Replace(digestBase, `components = ["main"]`, `components = ["main", "contrib"]`, 1)).Digest
	b := loadText(t, "digest.toml", strings.Replace(digestBase, `components = ["main"]`, `components = ["contrib", "main"]`, 1)).Digest
	if a == b {
		t.Error("reordering an array kept the digest")
	}
}

func TestCanonicalReloads(t *testing.T) {
	files, _ := filepath.Glob("../recipes/*.toml")
	for _, f := range files {
		r, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		r2 := loadText(t, "x.toml", string(r.Canonical()))
		if r2.Digest != r.Digest {
			t.Errorf("%s: canonical form re-loads to %s, want %s", f, r2.Digest, r.Digest)
		}
	}
}

// The [cache] table says where stage outputs are shared, not what they are:
// the digest (and so every whole-recipe key) and the recipe copied into the
// image are the same with it or without it.
func TestCacheTableOutsideDigest(t *testing.T) {
	a := loadText(t, "digest.toml", digestBase)
	b := loadText(t, "digest.toml", digestBase+`
[cache]
from = "oci://127.0.0.1:5000/peerboot/cache"
to = "ghcr.io/org/peerboot-cache"
keys = ["file:cosign.pub", "env:PEERBOOT_ARTIFACT_PUB"]
`)
	if b.Cache.From != "oci://127.0.0.1:5000/peerboot/cache" || len(b.Cache.Keys) != 2 {
		t.Fatalf("the [cache] table was not read: %+v", b.Cache)
	}
	if a.Digest != b.Digest || string(a.Canonical()) != string(b.Canonical()) {
		t.Errorf("[cache] changed the digest or the canonical recipe:\n%s\n%s", a.Canonical(), b.Canonical())
	}
}
