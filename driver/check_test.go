package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// fakeModule describes a stand-in module built from testdata/module.c.
type fakeModule struct {
	name     string
	vermagic string // "" leaves vermagic out
	license  string
	needs    string // an undefined (imported) function
	weak     string // a weak undefined function
	exports  string // a __ksymtab_ entry
	importNS string
}

// build compiles m into dir/<name>.ko with gcc: a relocatable ELF object with a
// .modinfo section and a symbol table, which is all the checks read.
func (m fakeModule) build(t *testing.T, dir string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testguard.Skip(t, "gcc is not installed (make deps installs build-essential)")
	}
	out := filepath.Join(dir, m.name+".ko")
	args := []string{"-c", "-O0", "-o", out}
	def := func(k, v string, quote bool) {
		if v == "" {
			return
		}
		if quote {
			v = fmt.Sprintf("%q", v)
		}
		args = append(args, "-D"+k+"="+v)
	}
	def("VERMAGIC", m.vermagic, true)
	def("LICENSE", m.license, true)
	def("NEEDS", m.needs, false)
	def("WEAK", m.weak, false)
	def("EXPORTS", m.exports, false)
	def("IMPORT_NS", m.importNS, false)
	args = append(args, filepath.Join("testdata", "module.c"))
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

const rel = "6.1.192"

func TestCheckVermagic(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.o")
	if b, err := exec.Command("gcc", "-c", "-x", "c", "-o", plain, "-").CombinedOutput(); err != nil {
		testguard.Skipf(t, "gcc: %v %s", err, b)
	}
	for _, tc := range []struct {
		name, vermagic, path string
		want                 string // error substring; "" for success
	}{
		{name: "match", vermagic: rel + " SMP mod_unload "},
		{name: "other-release", vermagic: "6.1.191 SMP mod_unload ", want: `module other-release was built for kernel "6.1.191", not "6.1.192"`},
		{name: "longer-release", vermagic: "6.1.1920 SMP ", want: `was built for kernel "6.1.1920", not "6.1.192"`},
		{name: "release-only", vermagic: rel, want: `built for kernel "6.1.192", not "6.1.192" (vermagic "6.1.192")`},
		{name: "no-vermagic", want: "module no-vermagic has no vermagic"},
		{name: "plain", path: plain, want: "module plain.o has no .modinfo section"},
		{name: "missing", path: filepath.Join(dir, "missing.ko"), want: "module missing: not a readable ELF object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.path
			if p == "" {
				p = fakeModule{name: tc.name, vermagic: tc.vermagic}.build(t, dir)
			}
			checkErr(t, CheckVermagic(p, rel), tc.want)
		})
	}
}

const symvers = "0x00000000\tprintk\tvmlinux\tEXPORT_SYMBOL\t\n" +
	"0x00000000\tpci_find_host_bridge\tvmlinux\tEXPORT_SYMBOL_GPL\t\n" +
	"0x00000000\tcxl_thing\tvmlinux\tEXPORT_SYMBOL_GPL\tCXL\n" +
	"0x00000000\tdrm_helper\tdrivers/gpu/drm/drm_kms_helper\tEXPORT_SYMBOL\n"

func TestCheckSymbols(t *testing.T) {
	for _, tc := range []struct {
		name string
		mods []fakeModule
		want []string // error substrings; none for success
	}{
		{name: "kernel export", mods: []fakeModule{{name: "nvidia", needs: "printk"}}},
		{name: "module export in symvers", mods: []fakeModule{{name: "nvidia-drm", needs: "drm_helper"}}},
		{name: "no imports", mods: []fakeModule{{name: "nvidia"}}},
		{name: "weak import", mods: []fakeModule{{name: "nvidia", weak: "not_anywhere"}}},
		{name: "missing", mods: []fakeModule{{name: "nvidia"}, {name: "nvidia-uvm", needs: "rm_missing_fn"}},
			want: []string{"module nvidia-uvm needs symbol rm_missing_fn, which neither the kernel nor the other driver modules export"}},
		{name: "sibling export", mods: []fakeModule{{name: "nvidia", exports: "nvUvmInterfaceFoo"}, {name: "nvidia-uvm", needs: "nvUvmInterfaceFoo"}}},
		{name: "sibling does not export it", mods: []fakeModule{{name: "nvidia", exports: "nvUvmInterfaceBar"}, {name: "nvidia-uvm", needs: "nvUvmInterfaceFoo"}},
			want: []string{"module nvidia-uvm needs symbol nvUvmInterfaceFoo"}},
		{name: "namespace not imported", mods: []fakeModule{{name: "nvidia", needs: "cxl_thing"}},
			want: []string{"module nvidia uses cxl_thing from namespace CXL without MODULE_IMPORT_NS(CXL)"}},
		{name: "namespace imported", mods: []fakeModule{{name: "nvidia", needs: "cxl_thing", importNS: "CXL"}}},
		{name: "gpl-only symbol, proprietary", mods: []fakeModule{{name: "nvidia", needs: "pci_find_host_bridge", license: "NVIDIA"}},
			want: []string{`module nvidia (license "NVIDIA") uses GPL-only symbol pci_find_host_bridge`}},
		{name: "gpl-only symbol, dual license", mods: []fakeModule{{name: "nvidia", needs: "pci_find_host_bridge"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for _, m := range tc.mods {
				paths = append(paths, m.build(t, dir))
			}
			err := CheckSymbols(paths, strings.NewReader(symvers))
			if len(tc.want) == 0 {
				checkErr(t, err, "")
			}
			for _, w := range tc.want {
				checkErr(t, err, w)
			}
		})
	}
}

func TestCheckSymbolsBadSymvers(t *testing.T) {
	m := fakeModule{name: "nvidia"}.build(t, t.TempDir())
	checkErr(t, CheckSymbols([]string{m}, strings.NewReader("0x0 printk vmlinux EXPORT_SYMBOL\n")), "Module.symvers line 1")
}

func TestCheckDepmod(t *testing.T) {
	if _, err := findDepmod(); err != nil {
		testguard.Skip(t, err.Error())
	}
	for _, tc := range []struct {
		name string
		mods []fakeModule
		want string
	}{
		{name: "resolved", mods: []fakeModule{{name: "nvidia", needs: "printk", exports: "nv_export"}, {name: "nvidia-uvm", needs: "nv_export"}}},
		{name: "unresolved", mods: []fakeModule{{name: "nvidia-uvm", needs: "gone_in_this_kernel"}},
			want: "/lib/modules/6.1.192/updates/dkms/nvidia-uvm.ko needs unknown symbol gone_in_this_kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kout := t.TempDir()
			kmods := filepath.Join(kout, "modules", "lib", "modules", rel, "kernel")
			if err := os.MkdirAll(kmods, 0o755); err != nil {
				t.Fatal(err)
			}
			// A kernel module from the kernel stage, to see the tree copied in.
			fakeModule{name: "dummy", vermagic: rel + " "}.build(t, kmods)
			if err := os.WriteFile(filepath.Join(kmods, "..", "modules.order"), []byte("kernel/dummy.ko\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(kout, "build", "Module.symvers"), symvers)
			var paths []string
			for _, m := range tc.mods {
				paths = append(paths, m.build(t, t.TempDir()))
			}
			checkErr(t, CheckDepmod(context.Background(), kout, rel, paths), tc.want)
			// depmod must not have written into the kernel stage's output.
			if _, err := os.Stat(filepath.Join(kmods, "..", "modules.dep")); err == nil {
				t.Error("depmod wrote modules.dep into the kernel stage output")
			}
		})
	}
}

func TestParseSymversFixture(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "Module.symvers"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ParseSymvers(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Errorf("%d exports, want 6", len(got))
	}
	for sym, want := range map[string]Export{
		"init_uts_ns":                   {CRC: "0x00000000", Module: "vmlinux", Type: "EXPORT_SYMBOL_GPL"},
		"insert_resource_expand_to_fit": {CRC: "0x00000000", Module: "vmlinux", Type: "EXPORT_SYMBOL_GPL", Namespace: "CXL"},
		"drm_atomic_helper_commit":      {CRC: "0x00000000", Module: "drivers/gpu/drm/drm_kms_helper", Type: "EXPORT_SYMBOL"},
		"pci_resize_resource":           {CRC: "0x4b2cd3a1", Module: "vmlinux", Type: "EXPORT_SYMBOL"}, // no namespace column
	} {
		if got[sym] != want {
			t.Errorf("%s: got %+v, want %+v", sym, got[sym], want)
		}
	}
}

func TestParseSymvers(t *testing.T) {
	got, err := ParseSymvers(strings.NewReader(symvers + "\n0x1234abcd\tcrlf\tvmlinux\tEXPORT_SYMBOL\t\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Export{
		"printk":               {CRC: "0x00000000", Module: "vmlinux", Type: "EXPORT_SYMBOL"},
		"pci_find_host_bridge": {CRC: "0x00000000", Module: "vmlinux", Type: "EXPORT_SYMBOL_GPL"},
		"cxl_thing":            {CRC: "0x00000000", Module: "vmlinux", Type: "EXPORT_SYMBOL_GPL", Namespace: "CXL"},
		"drm_helper":           {CRC: "0x00000000", Module: "drivers/gpu/drm/drm_kms_helper", Type: "EXPORT_SYMBOL"},
		"crlf":                 {CRC: "0x1234abcd", Module: "vmlinux", Type: "EXPORT_SYMBOL"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseSymvers:\n got %v\nwant %v", got, want)
	}
	for _, bad := range []string{
		"0x0\tprintk\tvmlinux\n",
		"0x0\t\tvmlinux\tEXPORT_SYMBOL\t\n",
		"0x0\tprintk\tvmlinux\tEXPORT_SYMBOL\tNS\textra\n",
		"0x0 printk vmlinux EXPORT_SYMBOL\n",
	} {
		if _, err := ParseSymvers(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseSymvers(%q) accepted it", bad)
		}
	}
}

// FuzzParseSymvers: any input parses or fails cleanly, and what parses survives
// being written back out in the same format.
func FuzzParseSymvers(f *testing.F) {
	f.Add(symvers)
	f.Add("0x0\ta\tvmlinux\tEXPORT_SYMBOL\n\n0x0\ta\tm\tEXPORT_SYMBOL_GPL\tNS\n")
	f.Add("\t\t\t\t")
	if b, err := os.ReadFile(filepath.Join("testdata", "Module.symvers")); err == nil {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseSymvers(strings.NewReader(in))
		if err != nil {
			return
		}
		var lines []string
		for sym, e := range got {
			if sym == "" {
				t.Fatalf("empty symbol parsed from %q", in)
			}
			lines = append(lines, strings.Join([]string{e.CRC, sym, e.Module, e.Type, e.Namespace}, "\t"))
		}
		sort.Strings(lines)
		again, err := ParseSymvers(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatalf("re-parsing %q: %v", lines, err)
		}
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("round trip of %q:\n got %v\nwant %v", in, again, got)
		}
	})
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Errorf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error %q\ndoes not contain %q", err, want)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
