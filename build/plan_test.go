package build

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
	"github.com/peerboot/peerboot/store"
)

const planRecipe = `
name = "t"
source_date_epoch = 1700000000
[kernel]
source = { url = "https://example.invalid/linux-6.1.tar.xz", sha256 = "%s" }
fragments = ["base.config", "./local.config"]
cmdline = "console=ttyS0"
[driver]
version = "535.261.03"
source = { url = "https://example.invalid/nvidia.tar.xz", sha256 = "%s" }
patches = ["./0001-local.patch"]
[outputs]
efi_stub = { url = "https://example.invalid/stub.deb", sha256 = "%s" }
`

// readData is ReadData that must succeed.
func readData(t *testing.T, r *recipe.Resolved, tools Tools) *Data {
	t.Helper()
	d, err := ReadData(r, tools)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keysOf plans r and returns each stage's key ("" when unresolved).
func keysOf(t *testing.T, r *recipe.Resolved, tools Tools) (map[StageName]string, []lock.Input, []lock.Unresolved) {
	t.Helper()
	ins, un, err := lock.Inputs(r, nil, func(string) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(readData(t, r, tools), ins, un, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[StageName]string{}
	for _, s := range p.Stages {
		keys[s.Name] = s.Key
	}
	return keys, ins, un
}

func planFor(t *testing.T, dir string) map[StageName]string {
	t.Helper()
	p := fixturePlan(t, dir, nil)
	keys := map[StageName]string{}
	for _, s := range p.Stages {
		if s.Key == "" {
			t.Fatalf("stage %s unresolved: %v", s.Name, s.Unresolved)
		}
		keys[s.Name] = s.Key
	}
	return keys
}

// testCert is a PEM self-signed certificate; serial tells two apart.
func testCert(t *testing.T, serial int64) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "plan test"},
		NotBefore: time.Unix(1700000000, 0), NotAfter: time.Unix(1800000000, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// planFixture writes planRecipe (three distinct sha256s) as t.toml with its
// local files into a new directory, and returns it with a writer for changing
// them.
func planFixture(t *testing.T) (dir string, write func(name, body string)) {
	dir = t.TempDir()
	write = func(name, body string) { os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644) }
	write("t.toml", strings.Replace(strings.Replace(strings.Replace(planRecipe, "%s", strings.Repeat("a", 64), 1), "%s", strings.Repeat("b", 64), 1), "%s", strings.Repeat("c", 64), 1))
	write("local.config", "CONFIG_NUMA=y\n")
	write("0001-local.patch", "patch v1\n")
	write("init", "init v1")
	write("p2pcheck", "p2pcheck v1")
	return dir, write
}

// fixturePlan is the plan of dir's t.toml (planFixture), its init and p2pcheck
// the tools, with inputs resolved as unpinned and st the store (nil: none).
func fixturePlan(t *testing.T, dir string, st *store.Store) *Plan {
	t.Helper()
	p, _ := fixturePlanInputs(t, dir, st)
	return p
}

// fixturePlanInputs is fixturePlan and the inputs it resolved.
func fixturePlanInputs(t *testing.T, dir string, st *store.Store) (*Plan, []lock.Input) {
	t.Helper()
	r, err := recipe.Load(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	ins, un, err := lock.Inputs(r, nil, func(string) (string, error) { return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(readData(t, r, Tools{Init: filepath.Join(dir, "init"), P2PCheck: filepath.Join(dir, "p2pcheck")}), ins, un, st)
	if err != nil {
		t.Fatal(err)
	}
	return p, ins
}

// Which stages a change re-runs: the keys are the whole story.
func TestKeysFollowTheirInputs(t *testing.T) {
	dir, write := planFixture(t)
	base := planFor(t, dir)

	cases := []struct {
		name    string
		change  func()
		changed []string
	}{
		{"config fragment", func() { write("local.config", "CONFIG_NUMA=n\n") }, []string{"kernel", "driver", "modules", "initramfs", "image"}},
		{"driver patch", func() { write("0001-local.patch", "patch v2\n") }, []string{"driver", "modules", "initramfs", "image"}},
		// The tools are their own segment: a new binary re-packs neither config nor the recipe's files.
		{"self-test binary", func() { write("p2pcheck", "p2pcheck v2") }, []string{"tools", "initramfs", "image"}},
		// The recipe is written into the image: any edit re-lays the config layer.
		{"kernel cmdline", func() {
			b, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
			write("t.toml", strings.Replace(string(b), `cmdline = "console=ttyS0"`, `cmdline = "console=ttyS0 quiet"`, 1))
		}, []string{"config", "initramfs", "image"}},
		{"description", func() {
			b, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
			write("t.toml", strings.Replace(string(b), `name = "t"`, "name = \"t\"\ndescription = \"edited\"", 1))
		}, []string{"config", "initramfs", "image"}},
		{"module signing on", func() {
			write("module.crt", testCert(t, 1))
			write("module.key", "key v1")
			b, _ := os.ReadFile(filepath.Join(dir, "t.toml"))
			write("t.toml", string(b)+"[sign]\nmodule_key = \"file:module.key\"\nmodule_cert = \"file:module.crt\"\n")
		}, []string{"kernel", "driver", "modules", "config", "initramfs", "image"}},
		{"module key", func() { write("module.key", "key v2") }, []string{"modules", "initramfs", "image"}},
		{"module certificate", func() { write("module.crt", testCert(t, 2)) }, []string{"kernel", "driver", "modules", "initramfs", "image"}},
	}
	prev := base
	for _, c := range cases {
		c.change()
		now := planFor(t, dir)
		var changed []string
		for _, s := range StageNames() {
			if now[s] != prev[s] {
				changed = append(changed, string(s))
			}
		}
		if strings.Join(changed, " ") != strings.Join(c.changed, " ") {
			t.Errorf("%s: re-runs %v, want %v", c.name, changed, c.changed)
		}
		prev = now
	}
	// And nothing else moves a key: planning twice gives the same keys.
	again := planFor(t, dir)
	for s, k := range prev {
		if again[s] != k {
			t.Errorf("stage %s: key not stable", s)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// `plan` and `plan -v` for a small recipe, byte for byte: what every key
// covers. Without -v the recipe fields' lines are left out (the key covers
// them all the same) and no value is cut: none is over 80 characters.
func TestPlanVerboseGolden(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) { os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644) }
	write("t.toml", strings.NewReplacer("%s", strings.Repeat("a", 64)).Replace(planRecipe))
	write("local.config", "CONFIG_NUMA=y\n")
	write("0001-local.patch", "patch v1\n")
	write("init", "init v1")
	write("p2pcheck", "p2pcheck v1")
	p := fixturePlan(t, dir, nil)
	for _, c := range []struct {
		verbose bool
		golden  string
	}{{false, "plan.golden"}, {true, "plan-v.golden"}} {
		var buf bytes.Buffer
		p.Print(&buf, c.verbose)
		got := strings.ReplaceAll(buf.String(), dir, "DIR")
		golden := filepath.Join("testdata", c.golden)
		if *update {
			os.MkdirAll("testdata", 0o755)
			os.WriteFile(golden, []byte(got), 0o644)
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update ./build/)", err)
		}
		if got != string(want) {
			t.Errorf("plan (verbose %v) differs from %s (go test -update ./build/ after checking):\n%s", c.verbose, golden, got)
		}
	}
}
