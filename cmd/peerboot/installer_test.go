package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// The air-gapped path for NVIDIA's installer, through the real binary, with a
// SYNTHETIC installer (the real one cannot be downloaded here) pinned by its
// sha256: lock records it, `store import` refuses a file that is not the pin and
// takes the one that is, `build --stage userspace` lays its files, and
// `build --stage kernel` asks for the kernel source, never for the installer.
func TestInstallerAirGappedPath(t *testing.T) {
	const v = "580.142"
	dir := t.TempDir()
	files := nvruntest.Default(v)
	for _, lib := range []string{"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"} {
		files[lib+".so."+v] = elfLib(t, lib+".so.1")
	}
	inst, err := nvruntest.Build(nvruntest.Spec{Version: v, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	runFile := filepath.Join(dir, "NVIDIA-Linux-x86_64-"+v+".run")
	os.WriteFile(runFile, inst, 0o644)
	other := filepath.Join(dir, "other", "NVIDIA-Linux-x86_64-"+v+".run")
	os.MkdirAll(filepath.Dir(other), 0o755)
	os.WriteFile(other, append(inst, 10), 0o644)
	sum := sha256.Sum256(inst)
	fake := strings.Repeat("a", 64)
	recipeFile := filepath.Join(dir, "r.toml")
	os.WriteFile(recipeFile, []byte(`name = "r"
source_date_epoch = 1700000000
[kernel]
source = { url = "https://example.invalid/linux.tar.xz", sha256 = "`+fake+`" }
[driver]
version = "`+v+`"
source = { url = "https://example.invalid/nvidia.tar.xz", sha256 = "`+fake+`" }
[userspace]
installer = { url = "https://example.invalid/XFree86/Linux-x86_64/`+v+`/NVIDIA-Linux-x86_64-`+v+`.run", sha256 = "`+hex.EncodeToString(sum[:])+`" }
[outputs]
efi_stub = { url = "https://example.invalid/stub.deb", sha256 = "`+fake+`" }
`), 0o644)
	cache := filepath.Join(dir, "cache")
	if out, errs, code := run(t, "--cache", cache, "lock", recipeFile); code != 0 {
		t.Fatalf("lock: exit %d\n%s%s", code, out, errs)
	}
	if lk, _ := os.ReadFile(filepath.Join(dir, "r.lock")); !strings.Contains(string(lk), "NVIDIA-Linux-x86_64-"+v+".run") {
		t.Fatalf("the lock does not record the installer:\n%s", lk)
	}
	if _, errs, code := run(t, "--cache", cache, "build", recipeFile, "--stage", "userspace"); code != 4 || !strings.Contains(errs, "peerboot store import "+recipeFile+" NVIDIA-Linux-x86_64-"+v+".run") {
		t.Fatalf("build before the import: exit %d, want 4 naming store import\n%s", code, errs)
	}
	if _, errs, code := run(t, "--cache", cache, "store", "import", recipeFile, other); code != 6 || !strings.Contains(errs, "matches no pin") {
		t.Fatalf("import of a file that is not the pin: exit %d, want 6\n%s", code, errs)
	}
	if out, errs, code := run(t, "--cache", cache, "store", "import", recipeFile, runFile); code != 0 {
		t.Fatalf("import: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code := run(t, "--cache", cache, "build", recipeFile, "--stage", "userspace")
	if code != 0 {
		t.Fatalf("build --stage userspace: exit %d\n%s%s", code, out, errs)
	}
	m := regexp.MustCompile(`(?m)^userspace\s+built\s+\S+\s+(\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no userspace output in:\n%s", out)
	}
	for p, want := range map[string]string{
		"root/usr/bin/nvidia-smi":                              "SYNTHETIC nvidia-smi\n",
		"root/usr/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin": "SYNTHETIC firmware/gsp_ga10x.bin\n",
	} {
		if b, err := os.ReadFile(filepath.Join(m[1], p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(m[1], "root/usr/lib/x86_64-linux-gnu/libcuda.so.1")); err != nil || l != "nvidia/current/libcuda.so.1" {
		t.Errorf("libcuda.so.1 -> %q, %v", l, err)
	}
	_, errs, code = run(t, "--cache", cache, "build", recipeFile, "--stage", "kernel")
	if code != 4 || !strings.Contains(errs, "stage kernel: input linux.tar.xz is not in the store") || strings.Contains(errs, "NVIDIA") {
		t.Fatalf("build --stage kernel: exit %d, want 4 naming only the kernel source\n%s", code, errs)
	}
}

// elfLib compiles an empty shared object with the given soname: the image's
// ldconfig and link checks see it as the real library.
func elfLib(t *testing.T, soname string) []byte {
	dir := t.TempDir()
	src, out := filepath.Join(dir, "x.c"), filepath.Join(dir, "x.so")
	os.WriteFile(src, []byte("int peerboot_fake(void) { return 0; }\n"), 0o644)
	if b, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", out, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(out)
	return b
}
