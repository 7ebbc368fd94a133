package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestWritePXE(t *testing.T) {
	p := PXE{Kernel: []byte("kernel bytes"), Initrd: []byte("initrd bytes"), Cmdline: "console=ttyS0 peerboot.selftest=1"}
	dir := filepath.Join(t.TempDir(), "pxe")
	if err := WritePXE(dir, p); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"vmlinuz": p.Kernel, "initrd.img": p.Initrd} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %q %v", name, got, err)
		}
		if st, _ := os.Stat(filepath.Join(dir, name)); st.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v", name, st.Mode())
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "boot.ipxe"))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "boot.ipxe.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./image -run TestWritePXE -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("boot.ipxe differs from %s:\n%s", golden, got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("left %d entries in the bundle dir (temp files?)", len(entries))
	}
}

func TestWritePXERejects(t *testing.T) {
	dir := t.TempDir()
	for name, p := range map[string]PXE{
		"newline":   {Kernel: []byte("k"), Initrd: []byte("i"), Cmdline: "quiet\nshell"},
		"no kernel": {Initrd: []byte("i")},
		"no initrd": {Kernel: []byte("k")},
	} {
		if err := WritePXE(dir, p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// LinkPXE gives the bundle WritePXE gives, its kernel and initrd linked to
// the files it was handed (no second copy of either).
func TestLinkPXEMatchesWritePXE(t *testing.T) {
	p := PXE{Kernel: []byte("kernel bytes"), Initrd: []byte("initrd bytes"), Cmdline: "console=ttyS0"}
	src := t.TempDir()
	kf, inf := filepath.Join(src, "bzImage"), filepath.Join(src, "initrd.img")
	os.WriteFile(kf, p.Kernel, 0o644)
	os.WriteFile(inf, p.Initrd, 0o644)
	a, b := filepath.Join(t.TempDir(), "pxe"), filepath.Join(t.TempDir(), "pxe")
	if err := WritePXE(a, p); err != nil {
		t.Fatal(err)
	}
	if err := LinkPXE(b, p, kf, inf); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vmlinuz", "initrd.img", "boot.ipxe"} {
		x, _ := os.ReadFile(filepath.Join(a, name))
		y, err := os.ReadFile(filepath.Join(b, name))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s: LinkPXE %q (%v), WritePXE %q", name, y, err, x)
		}
	}
	ks, _ := os.Stat(kf)
	ls, _ := os.Stat(filepath.Join(b, "vmlinuz"))
	if !os.SameFile(ks, ls) {
		t.Error("vmlinuz is a copy, not a link to the kernel file")
	}
}

// Sums a builder already knows give the same script as hashing the bytes.
func TestIPXEScriptKnownSums(t *testing.T) {
	p := PXE{Kernel: []byte("kernel bytes"), Initrd: []byte("initrd bytes"), Cmdline: "console=ttyS0"}
	want, err := IPXEScript(p)
	if err != nil {
		t.Fatal(err)
	}
	k, i := sha256.Sum256(p.Kernel), sha256.Sum256(p.Initrd)
	known := PXE{Cmdline: p.Cmdline, KernelSHA256: hex.EncodeToString(k[:]), InitrdSHA256: hex.EncodeToString(i[:])}
	if got, err := IPXEScript(known); err != nil || got != want {
		t.Errorf("with known sums:\n%s\nwant:\n%s (%v)", got, want, err)
	}
	known.InitrdSHA256 = strings.Repeat("0", 64)
	if got, _ := IPXEScript(known); got == want {
		t.Error("the known initrd sum does not reach the script")
	}
}

// With a burn-in length boot.ipxe is a menu: the normal boot first (the default, and
// the first kernel line, which serve reads as the build's command line), then the
// burn-in entry with peerboot.soak=; each with peerboot.entry=.
func TestIPXEScriptBurnInMenu(t *testing.T) {
	p := PXE{Kernel: []byte("kernel bytes"), Initrd: []byte("initrd bytes"), Cmdline: "console=ttyS0", BurnIn: 8 * time.Hour}
	got, err := IPXEScript(p)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "boot-burnin.ipxe.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./image -run TestIPXEScriptBurnInMenu -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("boot.ipxe differs from %s:\n%s", golden, got)
	}
	var kernels []string
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "kernel ") {
			kernels = append(kernels, l)
		}
	}
	// Each entry names itself (peerboot.entry=), so the init does not ask again at the console.
	if len(kernels) != 2 || kernels[0] != "kernel vmlinuz console=ttyS0 peerboot.entry=normal" || kernels[1] != "kernel vmlinuz console=ttyS0 peerboot.entry=burnin peerboot.soak=8h0m0s" {
		t.Errorf("kernel lines %q: want the normal boot first, then the burn-in, each naming its entry", kernels)
	}
}
