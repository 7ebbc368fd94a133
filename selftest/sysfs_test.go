package selftest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseResource(t *testing.T) {
	tests := []struct {
		in   string
		want []int64
	}{
		{"", nil},
		{"0x1000 0x1fff 0x0\n0x0 0x0 0x0\n", []int64{0x1000, 0}},
		{"junk\n0x10 0x0f 0\nzz yy 0\n", []int64{0, 0}},
		{"0x0 0xffffffffffffffff 0x0", []int64{0}},
		// Two fields are enough (flags are not read); one is no resource.
		{"0x100 0x1ff\n0x100\n", []int64{0x100}},
		// Either bound unreadable is an unassigned resource, never a size.
		{"0x100 zz 0\nzz 0x1ff 0\n", []int64{0, 0}},
		// An end past 64 bits (ParseUint gives the maximum and an error) is no size,
		// even from a start near the top where the difference would look sane.
		{"0xf000000000000000 0x1ffffffffffffffff 0\n", []int64{0}},
		// A one-byte resource (end == start) is assigned; one starting at 0 is too.
		{"0x100 0x100 0\n0x0 0xfff 0\n", []int64{1, 0x1000}},
		// The largest size kept is 1<<62; one byte more is nonsense.
		{"0x0 0x3fffffffffffffff 0\n0x0 0x4000000000000000 0\n", []int64{1 << 62, 0}},
	}
	for _, tt := range tests {
		if got := ParseResource(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseResource(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseResource(f *testing.F) {
	f.Add("0x00000000fb000000 0x00000000fbffffff 0x0000000000040200\n")
	f.Add("0 0 0\n1 2\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, n := range ParseResource(s) {
			if n < 0 {
				t.Fatalf("negative size %d from %q", n, s)
			}
		}
	})
}

func TestLoadedModules(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "nvidia"), 0o755)
	os.WriteFile(filepath.Join(dir, "nvidia", "version"), []byte("580.159.04\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "nvidia_uvm"), 0o755)
	params := filepath.Join(dir, "nvidia", "parameters")
	os.MkdirAll(filepath.Join(params, "subdir"), 0o755)
	os.WriteFile(filepath.Join(params, "NVreg_RegistryDwords"), []byte("RMForceStaticBar1=1;OverrideFbSize=30720\n"), 0o644)
	os.WriteFile(filepath.Join(params, "NVreg_EnableResizableBar"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(params, "NVreg_OpenRmEnableUnsupportedGpus"), []byte("\n"), 0o644)
	// A write-only parameter: a dangling symlink stands in for one that cannot be read
	// (root reads any mode bits, so permissions alone would not make the test fail).
	os.Symlink(filepath.Join(dir, "absent"), filepath.Join(params, "NVreg_WriteOnly"))
	got := LoadedModules(dir, []string{"nvidia", "nvidia_uvm", "nvidia_drm"})
	if len(got) != 2 || got[0].Name != "nvidia" || got[0].Version != "580.159.04" || got[0].Result != ModLoaded || got[1].Name != "nvidia-uvm" {
		t.Fatalf("got %+v", got)
	}
	want := map[string]string{
		"NVreg_RegistryDwords":              "RMForceStaticBar1=1;OverrideFbSize=30720",
		"NVreg_EnableResizableBar":          "1",
		"NVreg_OpenRmEnableUnsupportedGpus": "",
	}
	if !reflect.DeepEqual(got[0].Parameters, want) {
		t.Errorf("parameters %v, want %v", got[0].Parameters, want)
	}
	if got[1].Parameters != nil {
		t.Errorf("nvidia-uvm has no parameters directory, got %v", got[1].Parameters)
	}
}

func TestBAR1Size(t *testing.T) {
	line := func(start, size, flags uint64) string {
		if size == 0 {
			return "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
		}
		return fmt.Sprintf("0x%016x 0x%016x 0x%016x\n", start, start+size-1, flags)
	}
	for _, tt := range []struct {
		name string
		res  string
		want int64
	}{
		// RTX 4090: BAR0 32-bit 16 MiB, BAR1 64-bit 32 GiB at line 1, BAR3 at line 3.
		{"32-bit BAR0", line(0xfa000000, 16<<20, 0x40200) + line(0x38000000000, 32<<30, 0x14220c) + line(0, 0, 0) + line(0x38800000000, 32<<20, 0x14220c), 32 << 30},
		// H100/H200: BAR0 64-bit, so line 1 is its upper half and BAR1 is line 2.
		{"64-bit BAR0", line(0x80000000000, 64<<20, 0x14220c) + line(0, 0, 0) + line(0x40000000000, 256<<30, 0x14220c) + line(0, 0, 0), 256 << 30},
		{"only BAR0", line(0xfa000000, 16<<20, 0x40200), 0},
		// Lines 1-5 are the BARs after BAR0; line 6 is the expansion ROM, never BAR1.
		{"ROM only", line(0xfa000000, 16<<20, 0x40200) + strings.Repeat(line(0, 0, 0), 5) + line(0xfb000000, 512<<10, 0x46200), 0},
		{"BAR1 at line 5", line(0xfa000000, 16<<20, 0x40200) + strings.Repeat(line(0, 0, 0), 4) + line(0x38000000000, 32<<30, 0x14220c), 32 << 30},
		{"empty", "", 0},
	} {
		if got := BAR1Size(tt.res); got != tt.want {
			t.Errorf("%s: BAR1Size = %d, want %d", tt.name, got, tt.want)
		}
	}
}
