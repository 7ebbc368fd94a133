package kmod_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testfs"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/node/kmod"
	"github.com/peerboot/peerboot/node/kmod/kmodtest"
)

// modTree lays out a /lib/modules/<release> with in-tree DRM modules known to depmod
// and out-of-tree nvidia modules it never saw (as a driver stage without depmod leaves them).
func modTree(t *testing.T) string {
	dir := t.TempDir()
	testfs.Write(t, filepath.Join(dir, "modules.dep"), strings.Join([]string{
		"kernel/drivers/gpu/drm/drm_kms_helper.ko: kernel/drivers/gpu/drm/drm.ko kernel/drivers/i2c/i2c-core.ko",
		"kernel/drivers/gpu/drm/drm.ko: kernel/drivers/i2c/i2c-core.ko",
		"kernel/drivers/i2c/i2c-core.ko:",
		"updates/nvidia-drm.ko: updates/nvidia-modeset.ko kernel/drivers/gpu/drm/drm_kms_helper.ko kernel/drivers/gpu/drm/drm.ko updates/nvidia.ko kernel/drivers/i2c/i2c-core.ko",
		"",
	}, "\n"))
	testfs.Write(t, filepath.Join(dir, "modules.builtin"), "kernel/lib/crc32.ko\n")
	for _, f := range []string{"kernel/drivers/gpu/drm/drm_kms_helper.ko", "kernel/drivers/gpu/drm/drm.ko", "kernel/drivers/i2c/i2c-core.ko",
		"updates/nvidia.ko", "updates/nvidia-uvm.ko", "updates/nvidia-modeset.ko", "updates/nvidia-drm.ko"} {
		testfs.Write(t, filepath.Join(dir, f), "not really ELF")
	}
	return dir
}

var recipeModules = []string{"nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem"}

func TestLoad(t *testing.T) {
	dir := modTree(t)
	for _, tc := range []struct {
		name    string
		errs    map[string]error
		modules []string
		params  map[string]map[string]string
		want    []string
		loads   []string // nil: not checked
	}{
		{
			name: "no GPU", errs: map[string]error{"nvidia": unix.ENODEV}, modules: recipeModules,
			params: map[string]map[string]string{"nvidia": {"NVreg_EnableResizableBar": "1", "NVreg_A": "x"}},
			want: []string{
				"nvidia:ENODEV (no such device)",
				"nvidia-uvm:skipped (nvidia not loaded)",
				"nvidia-modeset:skipped (nvidia not loaded)",
				"nvidia-drm:skipped (nvidia not loaded)",
				"nvidia-peermem:skipped (nvidia not loaded)",
			},
			loads: []string{"nvidia NVreg_A=x NVreg_EnableResizableBar=1"},
		},
		{
			name: "with GPU", errs: map[string]error{"nvidia_modeset": unix.EEXIST}, modules: recipeModules,
			want: []string{
				"nvidia:loaded",
				"nvidia-uvm:loaded",
				"nvidia-modeset:loaded (already loaded)",
				"i2c_core:loaded<nvidia-drm",
				"drm:loaded<nvidia-drm",
				"drm_kms_helper:loaded<nvidia-drm",
				"nvidia-drm:loaded",
				"nvidia-peermem:error (nvidia-peermem.ko not found under " + dir + ")",
			},
		},
		{
			name: "unknown symbol", errs: map[string]error{"drm": unix.ENOENT}, modules: []string{"nvidia", "nvidia-drm"},
			want: []string{
				"nvidia:loaded",
				"i2c_core:loaded<nvidia-drm",
				"drm:error<nvidia-drm (ENOENT: no such file or directory)",
				"nvidia-drm:skipped (drm not loaded)",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := kmod.LoadIndex(dir)
			if err != nil {
				t.Fatal(err)
			}
			klog := &kmodtest.Klog{Pending: []string{"boot noise"}}
			l := &kmodtest.Loader{Errs: tc.errs, Klog: klog}
			got := kmod.Load(ix, l, klog, tc.modules, tc.params)
			if !reflect.DeepEqual(kmodtest.Summarize(got), tc.want) {
				t.Errorf("got  %q\nwant %q", kmodtest.Summarize(got), tc.want)
			}
			if tc.loads != nil && !reflect.DeepEqual(l.Loaded(), tc.loads) {
				t.Errorf("loads %q, want %q", l.Loaded(), tc.loads)
			}
			if got[0].File != "updates/nvidia.ko" || !reflect.DeepEqual(got[0].KernelLog, []string{"loading nvidia"}) {
				t.Errorf("nvidia record %+v", got[0])
			}
			for _, m := range got {
				if m.Result == "error" && strings.Contains(m.Error, "not found") && (m.Errno != 2 || m.File != "") {
					t.Errorf("missing module record %+v", m)
				}
				if m.Result == "ENODEV" && m.Errno != 19 {
					t.Errorf("ENODEV record %+v", m)
				}
			}
		})
	}
}

// The load order is a pure function of the index: the same on every run (u-root's
// kmodule gave three orders in 200 dry runs).
func TestLoadOrderDeterministic(t *testing.T) {
	dir := modTree(t)
	var first []string
	for i := range 50 {
		ix, err := kmod.LoadIndex(dir)
		if err != nil {
			t.Fatal(err)
		}
		l := &kmodtest.Loader{}
		kmod.Load(ix, l, &kmodtest.Klog{}, recipeModules, nil)
		if i == 0 {
			first = l.Loaded()
			continue
		}
		if got := l.Loaded(); !reflect.DeepEqual(got, first) {
			t.Fatalf("run %d loaded %q, run 0 %q", i, got, first)
		}
	}
	want := []string{"nvidia", "nvidia_uvm", "nvidia_modeset", "i2c_core", "drm", "drm_kms_helper", "nvidia_drm"}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("order %q, want %q", first, want)
	}
}

// Out-of-tree modules that depmod never saw carry their needs in .modinfo.
func TestModinfoDepends(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testguard.Skip(t, "gcc not installed (make deps installs build-essential)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	testfs.Write(t, src, `__attribute__((section(".modinfo"), used)) static const char info[] = "license=MIT\0depends=drm,drm_kms_helper,nvidia-modeset\0vermagic=6.1.0 SMP";`+"\n")
	ko := filepath.Join(dir, "updates", "nvidia-drm.ko")
	os.MkdirAll(filepath.Dir(ko), 0o755)
	if out, err := exec.Command("gcc", "-c", "-o", ko, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	ix, err := kmod.LoadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := ix.LoadOrder("nvidia_drm"); !reflect.DeepEqual(got, []string{"nvidia_modeset", "drm_kms_helper", "drm", "nvidia_drm"}) {
		t.Errorf("LoadOrder = %q", got)
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{"nvidia-uvm": "nvidia_uvm", "updates/nvidia-drm.ko": "nvidia_drm", "a/b/i2c-core.ko.zst": "i2c_core", "drm": "drm"} {
		if got := kmod.Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParamString(t *testing.T) {
	if got := kmod.ParamString(map[string]string{"b": "2", "a": "1"}); got != "a=1 b=2" {
		t.Errorf("ParamString = %q", got)
	}
	if got := kmod.ParamString(nil); got != "" {
		t.Errorf("ParamString(nil) = %q", got)
	}
}
