package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	frags := []Fragment{
		{Name: "base.config", Data: []byte("CONFIG_EFI_STUB=y\nCONFIG_MODULES=y\n# CONFIG_SOUND is not set\nCONFIG_NR_CPUS=512\n")},
		{Name: "gpu-node.config", Data: []byte("CONFIG_PCI_P2PDMA=y\nCONFIG_NR_CPUS=256\nCONFIG_NOT_A_REAL_OPTION=y\n")},
	}
	final := "CONFIG_EFI_STUB=y\nCONFIG_MODULES=y\nCONFIG_SOUND=y\nCONFIG_NR_CPUS=256\n# CONFIG_PCI_P2PDMA is not set\n"
	got := CheckConfig(frags, final)
	var lines []string
	for _, d := range got {
		lines = append(lines, d.String())
	}
	want := []string{
		"base.config: CONFIG_SOUND is not set in the fragment but kconfig set it (final .config: y)",
		"gpu-node.config: CONFIG_NOT_A_REAL_OPTION=y was dropped by kconfig (final .config: absent)",
		"gpu-node.config: CONFIG_PCI_P2PDMA=y was dropped by kconfig (final .config: is not set)",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if d := CheckConfig(frags[:1], "CONFIG_EFI_STUB=y\nCONFIG_MODULES=y\nCONFIG_NR_CPUS=512\n"); len(d) != 0 {
		t.Fatalf("an absent option satisfies 'is not set': %v", d)
	}
}

func TestExplainDropped(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "drivers/pci"), 0o755)
	os.WriteFile(filepath.Join(root, "drivers/pci/Kconfig"), []byte(`
config PCI_P2PDMA
	bool "PCI peer-to-peer transfer support"
	depends on ZONE_DEVICE
	depends on 64BIT
	select GENERIC_ALLOCATOR
`), 0o644)
	d := []Dropped{{Symbol: "CONFIG_PCI_P2PDMA"}, {Symbol: "CONFIG_NOT_A_REAL_OPTION"}}
	ExplainDropped(root, d)
	if d[0].Why != "drivers/pci/Kconfig: depends on ZONE_DEVICE && 64BIT" {
		t.Errorf("got %q", d[0].Why)
	}
	if d[1].Why != "no Kconfig in this kernel defines it" {
		t.Errorf("got %q", d[1].Why)
	}
}

// The fragments shipped in configs/ parse, and none sets an option twice.
func TestShippedFragments(t *testing.T) {
	entries, err := Configs.ReadDir(ConfigsDir)
	if err != nil || len(entries) < 3 {
		t.Fatalf("fragments: %v %v", entries, err)
	}
	for _, e := range entries {
		data, _ := Configs.ReadFile(ConfigsDir + "/" + e.Name())
		seen := map[string]bool{}
		for i, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || (strings.HasPrefix(line, "#") && !unsetRe.MatchString(line)) {
				continue
			}
			sym := ""
			if m := setRe.FindStringSubmatch(line); m != nil {
				sym = m[1]
			} else if m := unsetRe.FindStringSubmatch(line); m != nil {
				sym = m[1]
			} else {
				t.Errorf("%s:%d: not a config line: %q", e.Name(), i+1, line)
				continue
			}
			if seen[sym] {
				t.Errorf("%s:%d: %s set twice", e.Name(), i+1, sym)
			}
			seen[sym] = true
		}
	}
}
