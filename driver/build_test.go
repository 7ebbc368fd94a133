package driver

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/patch"
)

// fakeTree lays out the parts of a driver tree and a kernel stage output that
// Build looks at before it runs make, so its early failures can be tested
// without a compiler or a kernel.
func fakeTree(t *testing.T) (src, kout string) {
	t.Helper()
	src, kout = t.TempDir(), t.TempDir()
	for _, f := range []string{"Kbuild", "Makefile", "conftest.sh", "nvidia/nvidia.Kbuild"} {
		writeFile(t, filepath.Join(src, f), "# "+f+"\n")
	}
	writeFile(t, filepath.Join(src, "nvidia/nv-reg.h"), "one\ntwo\nthree\n")
	writeFile(t, filepath.Join(kout, "release"), rel+"\n")
	writeFile(t, filepath.Join(kout, "build", "Makefile"), "# kernel\n")
	return src, kout
}

const badPatch = `From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: peerboot <peerboot@localhost>
Subject: [PATCH] change a line that is not there

---
 nvidia/nv-reg.h | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/nvidia/nv-reg.h b/nvidia/nv-reg.h
--- a/nvidia/nv-reg.h
+++ b/nvidia/nv-reg.h
@@ -1,3 +1,3 @@
 one
-zwei
+TWO
 three
`

func TestBuildEarlyErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, o *Options)
		want  string
	}{
		{name: "no modules", setup: func(t *testing.T, o *Options) { o.Modules = nil }, want: "no modules to build"},
		{name: "unknown module", setup: func(t *testing.T, o *Options) { o.Modules = []string{"nvidia", "nvidia-peermen"} },
			want: `driver module "nvidia-peermen" is not in the driver source`},
		{name: "path as module", setup: func(t *testing.T, o *Options) { o.Modules = []string{"../nvidia"} },
			want: `driver module name "../nvidia" is not a module name`},
		{name: "not a driver tree", setup: func(t *testing.T, o *Options) { os.Remove(filepath.Join(o.Source, "conftest.sh")) },
			want: "does not look like NVIDIA's open kernel module tree (no conftest.sh)"},
		{name: "no release", setup: func(t *testing.T, o *Options) { os.Remove(filepath.Join(o.KernelOut, "release")) },
			want: "reading the kernel release from the kernel stage output"},
		{name: "bad release", setup: func(t *testing.T, o *Options) { writeFile(t, filepath.Join(o.KernelOut, "release"), "6.1 x\n") },
			want: `holds "6.1 x", not a kernel release`},
		{name: "no build tree", setup: func(t *testing.T, o *Options) { os.RemoveAll(filepath.Join(o.KernelOut, "build")) },
			want: "the kernel stage output has no module build tree"},
		{name: "patch does not apply", setup: func(t *testing.T, o *Options) {
			o.Patches = []Patch{{Name: "0009-bad.patch", Data: []byte(badPatch)}}
		}, want: "patch 0009-bad.patch: nvidia/nv-reg.h: hunk 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, kout := fakeTree(t)
			o := Options{Source: src, KernelOut: kout, Modules: []string{"nvidia"}, LogFile: filepath.Join(t.TempDir(), "log")}
			tc.setup(t, &o)
			_, err := Build(context.Background(), o, t.TempDir())
			checkErr(t, err, tc.want)
		})
	}
}

// A patch failure must stay a *patch.Error so callers can point at the file.
func TestBuildPatchErrorType(t *testing.T) {
	src, kout := fakeTree(t)
	_, err := Build(context.Background(), Options{Source: src, KernelOut: kout, Modules: []string{"nvidia"},
		Patches: []Patch{{Name: "0009-bad.patch", Data: []byte(badPatch)}}}, t.TempDir())
	var pe *patch.Error
	if !errors.As(err, &pe) || pe.File != "nvidia/nv-reg.h" || pe.Hunk != 1 {
		t.Fatalf("got %v (%T), want a *patch.Error for nvidia/nv-reg.h hunk 1", err, err)
	}
}

func TestIsFullTree(t *testing.T) {
	src, _ := fakeTree(t)
	if IsFullTree(src) {
		t.Errorf("a kernel-open tree taken for the full tree")
	}
	full := t.TempDir()
	writeFile(t, filepath.Join(full, "kernel-open", "Kbuild"), "\n")
	writeFile(t, filepath.Join(full, "src", "nvidia", "Makefile"), "\n")
	if !IsFullTree(full) {
		t.Errorf("the full tree not recognised")
	}
}

func TestModulePath(t *testing.T) {
	if got, want := ModulePath(rel, "nvidia-uvm"), "modules/lib/modules/6.1.192/updates/dkms/nvidia-uvm.ko"; got != want {
		t.Errorf("ModulePath = %q, want %q", got, want)
	}
}

func TestIsStep(t *testing.T) {
	for line, want := range map[string]bool{
		"  CC [M]  /src/nvidia/nv.o": true,
		"  LD [M]  /src/nvidia.ko":   true,
		" CONFTEST: ioremap_wc":      true,
		" [ nvidia            ]  CC           src/kernel/rmapi/nv_gpu_ops.c":         true,
		" [ nvidia-modeset    ]  LD           _out/Linux_x86_64/nv-modeset-kernel.o": true,
		" [ nvidia            ]  GEN          g_nvid_string.c":                       false,
		"  MODPOST /src/Module.symvers":                                              false,
		"make[1]: Entering directory '/k'":                                           false,
		"#define NV_LINUX_MDEV_H_PRESENT":                                            false,
		"":                                                                           false,
	} {
		if got := isStep(line); got != want {
			t.Errorf("isStep(%q) = %v, want %v", line, got, want)
		}
	}
}

// fakeBuild sets up a tree whose Makefile is testdata/fake-driver.mk and a
// kernel stage output with a module tree and Module.symvers, so Build runs
// end to end with gcc standing in for kbuild.
func fakeBuild(t *testing.T, fakeMk string) Options {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		testguard.Skip(t, "gcc is not installed (make deps installs build-essential)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		testguard.Skip(t, "make is not installed (make deps installs it)")
	}
	src, kout := fakeTree(t)
	mk, err := os.ReadFile(filepath.Join("testdata", "fake-driver.mk"))
	if err != nil {
		t.Fatal(err)
	}
	testdata, _ := filepath.Abs("testdata")
	writeFile(t, filepath.Join(src, "Makefile"), string(mk))
	writeFile(t, filepath.Join(src, "fake.mk"), "FAKE_TESTDATA := "+testdata+"\n"+fakeMk)
	for _, m := range []string{"nvidia-uvm", "nvidia-drm"} {
		writeFile(t, filepath.Join(src, m, m+".Kbuild"), "\n")
	}
	writeFile(t, filepath.Join(kout, "build", "Module.symvers"), symvers)
	writeFile(t, filepath.Join(kout, "modules", "lib", "modules", rel, "modules.order"), "")
	return Options{Source: src, KernelOut: kout, Modules: []string{"nvidia", "nvidia-uvm", "nvidia-drm"},
		Epoch: 1700000000, Jobs: 2, LogFile: filepath.Join(t.TempDir(), "driver.log")}
}

func TestBuildFake(t *testing.T) {
	o := fakeBuild(t, "")
	var progress strings.Builder
	o.Log = &progress
	out := t.TempDir()
	res, err := Build(context.Background(), o, out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Release != rel {
		t.Errorf("Release = %q, want %q", res.Release, rel)
	}
	want := []string{ModulePath(rel, "nvidia"), ModulePath(rel, "nvidia-uvm"), ModulePath(rel, "nvidia-drm")}
	if !reflect.DeepEqual(res.Modules, want) {
		t.Errorf("Modules = %q, want %q", res.Modules, want)
	}
	for _, m := range res.Modules {
		f, err := elf.Open(filepath.Join(out, m))
		if err != nil {
			t.Fatal(err)
		}
		if s := f.Section(".debug_info"); s != nil {
			t.Errorf("%s still has debug info", m)
		}
		f.Close()
	}
	args, err := os.ReadFile(filepath.Join(o.Source, "make-args"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"KCFLAGS=-ffile-prefix-map=" + o.Source + "=.", "OFA_DIR=/nonexistent"} {
		if !strings.Contains(string(args), w) {
			t.Errorf("make got %q, want it to contain %q", args, w)
		}
	}
	if !strings.Contains(progress.String(), "driver compile") {
		t.Errorf("no progress line in %q", progress.String())
	}
	if log, _ := os.ReadFile(o.LogFile); !strings.Contains(string(log), "CONFTEST: pci_resize_resource_has_exclude_bars_arg") {
		t.Errorf("make output is not in the log file:\n%s", log)
	}
}

func TestBuildFakeFailures(t *testing.T) {
	for _, tc := range []struct {
		name, fakeMk string
		want         []string
	}{
		{name: "make fails", fakeMk: "FAKE_FAIL := nv-pci.c:42: error: too few arguments to function\n",
			want: []string{"driver compile step failed", "last lines of output:", "nv-pci.c:42: error: too few arguments", "full log: "}},
		{name: "module missing", fakeMk: "FAKE_SKIP := nvidia-drm\n",
			want: []string{"did not produce nvidia-drm.ko"}},
		{name: "unresolved symbol", fakeMk: "FAKE_NEEDS := pci_resize_resource_old\n",
			want: []string{"module nvidia needs symbol pci_resize_resource_old", "module nvidia-uvm needs symbol pci_resize_resource_old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := fakeBuild(t, tc.fakeMk)
			_, err := Build(context.Background(), o, t.TempDir())
			for _, w := range tc.want {
				checkErr(t, err, w)
			}
		})
	}
}

func TestBuildCanceled(t *testing.T) {
	o := fakeBuild(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Build(ctx, o, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// The full NVIDIA tree builds from its root (RM core first, then
// kernel-open/), with the id string's user, host and date pinned, and the
// modules are taken from kernel-open/.
func TestBuildFakeFullTree(t *testing.T) {
	o := fakeBuild(t, "")
	full := t.TempDir()
	if err := os.Rename(o.Source, filepath.Join(full, "kernel-open")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(full, "src", "nvidia", "Makefile"), "\n")
	writeFile(t, filepath.Join(full, "Makefile"),
		"modules:\n\t@echo '$(WHOAMI)|$(HOSTNAME)|$(NV_BUILD_USER)@$(NV_BUILD_HOST)|$(DATE)' > id-args\n\t$(MAKE) -C kernel-open modules\n")
	o.Source = full
	out := t.TempDir()
	res, err := Build(context.Background(), o, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Modules) != 3 {
		t.Errorf("Modules = %q, want 3", res.Modules)
	}
	id, err := os.ReadFile(filepath.Join(full, "id-args"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(id)), "echo peerboot|peerboot|peerboot@peerboot|date -u -d @1700000000"; got != want {
		t.Errorf("id string inputs = %q, want %q", got, want)
	}
}
