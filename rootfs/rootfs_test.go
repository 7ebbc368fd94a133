package rootfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/debfile/debtest"
)

// fakeDebs writes packages shaped like Debian's libc6 and libcuda1 (the same paths,
// links and usr-merge cases; the ELF files are placeholders).
func fakeDebs(t *testing.T, cudaVersion string) []string {
	dir := t.TempDir()
	cudaSO, nvmlSO := sharedObject(t, "libcuda.so.1"), sharedObject(t, "libnvidia-ml.so.1")
	libc := debtest.Build("libc6", []debtest.Entry{
		{Name: "./etc/ld.so.conf.d/", Dir: true},
		{Name: "./etc/ld.so.conf.d/x86_64-linux-gnu.conf", Body: "/usr/local/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu\n/usr/lib/x86_64-linux-gnu\n"},
		{Name: "./lib/x86_64-linux-gnu/", Dir: true},
		{Name: "./lib/x86_64-linux-gnu/libc.so.6", Body: "libc", Mode: 0o755},
		{Name: "./lib/x86_64-linux-gnu/libc-hard.so.6", Hardlink: "./lib/x86_64-linux-gnu/libc.so.6"},
		{Name: "./lib64/ld-linux-x86-64.so.2", Symlink: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		{Name: "./usr/share/doc/libc6/copyright", Body: "docs are dropped"},
	})
	cuda := debtest.Build("libcuda1", []debtest.Entry{
		{Name: "./usr/lib/x86_64-linux-gnu/nvidia/current/", Dir: true},
		{Name: "./usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so." + cudaVersion, Body: cudaSO},
		{Name: "./usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1", Symlink: "libcuda.so." + cudaVersion},
		{Name: "./usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so." + cudaVersion, Body: nvmlSO},
		{Name: "./usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1", Symlink: "libnvidia-ml.so." + cudaVersion},
	})
	var paths []string
	for name, b := range map[string][]byte{"libc6.deb": libc, "libcuda1.deb": cuda} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		paths = append(paths, p)
	}
	return paths
}

// sharedObject compiles an empty ELF shared object with the given soname, so the
// host's ldconfig treats it as the real library would be treated.
func sharedObject(t *testing.T, soname string) string {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "x.c"), filepath.Join(dir, "x.so")
	os.WriteFile(src, []byte("int peerboot_fake(void) { return 0; }\n"), 0o644)
	if b, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(out)
	return string(b)
}

func TestLayersLayOutTheTree(t *testing.T) {
	root, config := t.TempDir(), t.TempDir()
	err := Userspace(context.Background(), UserspaceOptions{Debs: fakeDebs(t, "535.261.03"), DriverVersion: "535.261.03"}, root)
	if err != nil {
		t.Fatal(err)
	}
	err = Config(context.Background(), ConfigOptions{
		Overlay:     map[string][]byte{"etc/hostname": []byte("peerboot\n")},
		Files:       map[string][]byte{"etc/peerboot/recipe.toml": []byte("name = \"t\"\n")},
		Executables: map[string][]byte{"init": []byte("#!init"), "bin/tool": []byte("#!tool")},
	}, config)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"usr/lib/x86_64-linux-gnu/libc.so.6":      "libc",
		"lib/x86_64-linux-gnu/libc.so.6":          "libc", // through the usr-merge link
		"usr/lib/x86_64-linux-gnu/libc-hard.so.6": "libc", // a hardlink became a copy
		"etc/ld.so.conf.d/00-nvidia.conf":         "/usr/lib/x86_64-linux-gnu/nvidia/current\n",
	} {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || string(got) != want {
			t.Errorf("userspace %s: got %q, %v; want %q", path, got, err, want)
		}
	}
	// The configuration layer is unpacked over the userspace: its paths are
	// real directories (bin/tool lands in usr/bin, not through a link).
	for path, want := range map[string]string{
		"etc/hostname":             "peerboot\n",
		"etc/peerboot/recipe.toml": "name = \"t\"\n",
		"init":                     "#!init",
		"usr/bin/tool":             "#!tool",
	} {
		got, err := os.ReadFile(filepath.Join(config, path))
		if err != nil || string(got) != want {
			t.Errorf("config %s: got %q, %v; want %q", path, got, err, want)
		}
	}
	if info, _ := os.Lstat(filepath.Join(config, "usr/bin")); info == nil || !info.IsDir() {
		t.Error("config layer: usr/bin is not a real directory")
	}
	for _, so := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		got, err := os.ReadFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu", so))
		if err != nil || !strings.Contains(string(got), so) {
			t.Errorf("%s does not resolve to the NVIDIA library: %v", so, err)
		}
	}
	if info, _ := os.Stat(filepath.Join(config, "init")); info.Mode().Perm() != 0o755 {
		t.Errorf("init mode %v, want 0755 whatever the source mode", info.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/doc/libc6")); !os.IsNotExist(err) {
		t.Error("documentation was not dropped")
	}
	if l, _ := os.Readlink(filepath.Join(root, "lib")); l != "usr/lib" {
		t.Errorf("/lib -> %q, want usr/lib", l)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/ld.so.cache")); err != nil {
		t.Errorf("no linker cache: %v", err)
	}
}

func TestRefusesLibcudaOfAnotherVersion(t *testing.T) {
	err := Userspace(context.Background(), UserspaceOptions{Debs: fakeDebs(t, "550.163.01"), DriverVersion: "535.261.03"}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "libcuda is 550.163.01 but the driver is 535.261.03") {
		t.Fatalf("got %v", err)
	}
}

func TestImagePath(t *testing.T) {
	for in, want := range map[string]string{
		"./lib/firmware/nvidia/x.bin": "usr/lib/firmware/nvidia/x.bin",
		"./usr/bin/nvidia-smi":        "usr/bin/nvidia-smi",
		"./sbin/ldconfig":             "usr/sbin/ldconfig",
		"./lib64":                     "usr/lib64",
		"./library/x":                 "library/x",
	} {
		if got, ok := imagePath(in); !ok || got != want {
			t.Errorf("%s -> %s %v, want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"../etc/passwd", "./", "/"} {
		if got, ok := imagePath(bad); ok {
			t.Errorf("%s accepted as %s", bad, got)
		}
	}
}

// The modules layer: the kernel's tree and the driver's .ko under
// usr/lib/modules/<release>, indexed by depmod, with no /lib link left behind.
func TestModulesLayer(t *testing.T) {
	kmods := t.TempDir()
	os.WriteFile(filepath.Join(kmods, "modules.order"), nil, 0o644)
	os.WriteFile(filepath.Join(kmods, "modules.builtin"), nil, 0o644)
	ko := filepath.Join(t.TempDir(), "nvidia.ko")
	os.WriteFile(ko, []byte("not an ELF"), 0o600)
	root := t.TempDir()
	err := Modules(context.Background(), ModulesOptions{KernelModules: kmods, Release: "6.1.0-test", DriverModules: []string{ko}}, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/lib/modules/6.1.0-test/updates/dkms/nvidia.ko", "usr/lib/modules/6.1.0-test/modules.dep"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "lib")); !os.IsNotExist(err) {
		t.Errorf("the modules layer keeps a /lib entry (%v): it would replace the userspace's usr-merge link", err)
	}
}
