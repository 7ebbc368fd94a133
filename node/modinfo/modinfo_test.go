package modinfo

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		sec  string
		want map[string]string
	}{
		{"version=550.163.01\x00license=Dual MIT/GPL\x00", map[string]string{"version": "550.163.01", "license": "Dual MIT/GPL"}},
		{"alias=first\x00alias=second\x00", map[string]string{"alias": "first"}}, // a repeated key keeps its first value
		{"\x00\x00noequals\x00=nokey\x00k=v=w\x00", map[string]string{"k": "v=w"}},
		{"", map[string]string{}},
	}
	for _, tt := range tests {
		if got := Parse([]byte(tt.sec)); !maps.Equal(got, tt.want) {
			t.Errorf("Parse(%q) = %v, want %v", tt.sec, got, tt.want)
		}
	}
}

func TestRead(t *testing.T) {
	// p2pcheck's FAKE nvidia.ko: an ELF relocatable object with a .modinfo
	// section, as selftest's TestWriteKoFixture writes it.
	ko := filepath.Join("..", "..", "cmd", "p2pcheck", "testdata", "nvidia-550.54.15.ko")
	info, err := Read(ko)
	if err != nil {
		t.Fatal(err)
	}
	if info["version"] != "550.54.15" || info["license"] != "Dual MIT/GPL" {
		t.Errorf("Read(%s) = %v", ko, info)
	}
	dir := t.TempDir()
	notELF := filepath.Join(dir, "bad.ko")
	os.WriteFile(notELF, []byte("not elf"), 0o644)
	// The test binary: an ELF file without a .modinfo section.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	noSection := filepath.Join(dir, "exe.ko")
	if b, err := os.ReadFile(exe); err != nil || os.WriteFile(noSection, b, 0o644) != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{ko + ".xz", "not an uncompressed .ko"},
		{notELF, "bad.ko"},
		{noSection, "no .modinfo section"},
		{filepath.Join(dir, "missing.ko"), "missing.ko"},
	} {
		if _, err := Read(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Read(%s) = %v, want an error with %q", tt.path, err, tt.want)
		}
	}
}

func TestFindKo(t *testing.T) {
	mod := t.TempDir()
	for _, p := range []string{"kernel/drivers/gpu/nvidia.ko", "updates/dkms/nvidia.ko", "extra/nvidia_uvm.ko", "kernel/net/ib_core.ko"} {
		os.MkdirAll(filepath.Join(mod, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(mod, p), nil, 0o644)
	}
	tests := []struct{ name, rel, want string }{
		{"nvidia", "kernel/drivers/gpu/nvidia.ko", "kernel/drivers/gpu/nvidia.ko"}, // the recorded path first
		{"nvidia", "", "updates/dkms/nvidia.ko"},                                   // else DKMS's tree
		{"nvidia", "gone/nvidia.ko", "updates/dkms/nvidia.ko"},                     // a recorded path that is not there
		{"nvidia-uvm", "", "extra/nvidia_uvm.ko"},                                  // - and _ alike
		{"ib-core", "", "kernel/net/ib_core.ko"},
		{"nvidia_drm", "", ""},
	}
	for _, tt := range tests {
		got := FindKo(mod, tt.name, tt.rel)
		if tt.want != "" {
			tt.want = filepath.Join(mod, tt.want)
		}
		if got != tt.want {
			t.Errorf("FindKo(%s, %q) = %q, want %q", tt.name, tt.rel, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("version=550.163.01\x00license=MIT\x00"))
	f.Add([]byte("\x00\x00=x\x00noequals\x00k=v=w"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for k := range Parse(b) {
			if k == "" || bytes.ContainsAny([]byte(k), "\x00=") {
				t.Errorf("bad key %q", k)
			}
		}
	})
}
