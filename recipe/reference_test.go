package recipe

import (
	"strings"
	"testing"
)

// TestReferenceCoversSchema: every leaf of the schema is in the reference with a doc
// comment (Reference fails naming a field without one), and a few keys whose shape is
// special come out as a recipe writes them.
func TestReferenceCoversSchema(t *testing.T) {
	keys, err := Keys()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, k := range keys {
		have[k] = true
	}
	for _, want := range []string{
		"name", "platform.bar1", "repo[].suite", "kernel.source.commit", "driver.params.<module>.<param>",
		"userspace.exclude[].reason", "userspace.installer.sha256", "selftest.deadlines.nccl",
		"selftest.thresholds.<class>.max_latency_us", "env.<NAME>", "outputs.efi_stub.deb", "sign.pcr_key",
	} {
		if !have[want] {
			t.Errorf("reference lacks %s; it has %s", want, strings.Join(keys, " "))
		}
	}
	sections, _ := Reference()
	for _, s := range sections {
		for _, k := range s.Keys {
			if k.Doc == "" {
				t.Errorf("%s: no text", k.Path)
			}
		}
	}
}

// TestReferenceDefaults: the default column is defaults.toml's value as a recipe writes it.
func TestReferenceDefaults(t *testing.T) {
	sections, err := Reference()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range sections {
		for _, k := range s.Keys {
			got[k.Path] = k.Default
		}
	}
	for path, want := range map[string]string{
		"kernel.base":              `"tinyconfig"`,
		"selftest.copy_size":       `"256MiB"`,
		"selftest.min_busbw_gbps":  `0.0`,
		"selftest.verify":          `true`,
		"platform.sockets":         `1`,
		"outputs.formats":          `["uki", "disk", "pxe"]`,
		"outputs.efi_stub.deb":     `"systemd-boot-efi"`,
		"selftest.deadlines.total": `"5m0s"`,
		"platform.bar1":            ``,
	} {
		if got[path] != want {
			t.Errorf("%s: default %q, want %q", path, got[path], want)
		}
	}
}
