package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/selftest"
)

// fakeLoader records loads and answers from a table keyed by module name; it logs to
// a fakeKlog the way the kernel would.
type fakeLoader struct {
	errs   map[string]error
	klog   *fakeKlog
	loaded []string // "name params"
}

func (l *fakeLoader) Load(path, params string) error {
	name := modName(path)
	l.loaded = append(l.loaded, strings.TrimSpace(name+" "+params))
	if l.klog != nil {
		l.klog.pending = append(l.klog.pending, "loading "+name)
	}
	return l.errs[name]
}

type fakeKlog struct{ pending []string }

func (k *fakeKlog) Drain() []string {
	out := k.pending
	k.pending = nil
	if out == nil {
		out = []string{}
	}
	return out
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// modTree lays out a /lib/modules/<release> with in-tree DRM modules known to depmod
// and out-of-tree nvidia modules it never saw (as a driver stage without depmod leaves them).
func modTree(t *testing.T) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "modules.dep"), strings.Join([]string{
		"kernel/drivers/gpu/drm/drm_kms_helper.ko: kernel/drivers/gpu/drm/drm.ko kernel/drivers/i2c/i2c-core.ko",
		"kernel/drivers/gpu/drm/drm.ko: kernel/drivers/i2c/i2c-core.ko",
		"kernel/drivers/i2c/i2c-core.ko:",
		"updates/nvidia-drm.ko: updates/nvidia-modeset.ko kernel/drivers/gpu/drm/drm_kms_helper.ko kernel/drivers/gpu/drm/drm.ko updates/nvidia.ko kernel/drivers/i2c/i2c-core.ko",
		"",
	}, "\n"))
	writeFile(t, filepath.Join(dir, "modules.builtin"), "kernel/lib/crc32.ko\n")
	for _, f := range []string{"kernel/drivers/gpu/drm/drm_kms_helper.ko", "kernel/drivers/gpu/drm/drm.ko", "kernel/drivers/i2c/i2c-core.ko",
		"updates/nvidia.ko", "updates/nvidia-uvm.ko", "updates/nvidia-modeset.ko", "updates/nvidia-drm.ko"} {
		writeFile(t, filepath.Join(dir, f), "not really ELF")
	}
	return dir
}

var recipeModules = []string{"nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem"}

func summarize(ms []selftest.Module) []string {
	var out []string
	for _, m := range ms {
		s := m.Name + ":" + m.Result
		if m.RequiredBy != "" {
			s += "<" + m.RequiredBy
		}
		if m.Error != "" {
			s += " (" + m.Error + ")"
		}
		out = append(out, s)
	}
	return out
}

func TestLoadModulesNoGPU(t *testing.T) {
	ix, err := loadModIndex(modTree(t))
	if err != nil {
		t.Fatal(err)
	}
	klog := &fakeKlog{pending: []string{"boot noise"}}
	l := &fakeLoader{errs: map[string]error{"nvidia": unix.ENODEV}, klog: klog}
	params := map[string]map[string]string{"nvidia": {"NVreg_EnableResizableBar": "1", "NVreg_A": "x"}}
	got := loadModules(ix, l, klog, recipeModules, params)
	want := []string{
		"nvidia:ENODEV (no such device)",
		"nvidia-uvm:skipped (nvidia not loaded)",
		"nvidia-modeset:skipped (nvidia not loaded)",
		"nvidia-drm:skipped (nvidia not loaded)",
		"nvidia-peermem:skipped (nvidia not loaded)",
	}
	if !reflect.DeepEqual(summarize(got), want) {
		t.Errorf("got  %q\nwant %q", summarize(got), want)
	}
	if !reflect.DeepEqual(l.loaded, []string{"nvidia NVreg_A=x NVreg_EnableResizableBar=1"}) {
		t.Errorf("loads %q", l.loaded)
	}
	if got[0].Errno != 19 || got[0].File != "updates/nvidia.ko" || !reflect.DeepEqual(got[0].KernelLog, []string{"loading nvidia"}) {
		t.Errorf("nvidia record %+v", got[0])
	}
}

func TestLoadModulesWithGPU(t *testing.T) {
	ix, err := loadModIndex(modTree(t))
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLoader{errs: map[string]error{"nvidia_modeset": unix.EEXIST}}
	got := loadModules(ix, l, &fakeKlog{}, recipeModules, nil)
	want := []string{
		"nvidia:loaded",
		"nvidia-uvm:loaded",
		"nvidia-modeset:loaded (already loaded)",
		"i2c_core:loaded<nvidia-drm",
		"drm:loaded<nvidia-drm",
		"drm_kms_helper:loaded<nvidia-drm",
		"nvidia-drm:loaded",
		"nvidia-peermem:error (nvidia-peermem.ko not found under " + ix.dir + ")",
	}
	if !reflect.DeepEqual(summarize(got), want) {
		t.Errorf("got  %q\nwant %q", summarize(got), want)
	}
	if got[7].Errno != 2 || got[7].File != "" {
		t.Errorf("missing module record %+v", got[7])
	}
}

func TestLoadModulesUnknownSymbol(t *testing.T) {
	ix, err := loadModIndex(modTree(t))
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLoader{errs: map[string]error{"drm": unix.ENOENT}}
	got := loadModules(ix, l, &fakeKlog{}, []string{"nvidia", "nvidia-drm"}, nil)
	want := []string{
		"nvidia:loaded",
		"i2c_core:loaded<nvidia-drm",
		"drm:error<nvidia-drm (ENOENT: no such file or directory)",
		"nvidia-drm:skipped (drm not loaded)",
	}
	if !reflect.DeepEqual(summarize(got), want) {
		t.Errorf("got  %q\nwant %q", summarize(got), want)
	}
}

// Out-of-tree modules that depmod never saw carry their needs in .modinfo.
func TestModinfoDepends(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		testguard.Skip(t, "gcc not installed (make deps installs build-essential)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.c")
	writeFile(t, src, `__attribute__((section(".modinfo"), used)) static const char info[] = "license=MIT\0depends=drm,drm_kms_helper,nvidia-modeset\0vermagic=6.1.0 SMP";`+"\n")
	ko := filepath.Join(dir, "updates", "nvidia-drm.ko")
	os.MkdirAll(filepath.Dir(ko), 0o755)
	if out, err := exec.Command("gcc", "-c", "-o", ko, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if got := modinfoDepends(ko); !reflect.DeepEqual(got, []string{"drm", "drm_kms_helper", "nvidia_modeset"}) {
		t.Errorf("modinfoDepends = %q", got)
	}
	ix, err := loadModIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := ix.loadOrder("nvidia_drm"); !reflect.DeepEqual(got, []string{"nvidia_modeset", "drm_kms_helper", "drm", "nvidia_drm"}) {
		t.Errorf("loadOrder = %q", got)
	}
}

func TestModName(t *testing.T) {
	for in, want := range map[string]string{"nvidia-uvm": "nvidia_uvm", "updates/nvidia-drm.ko": "nvidia_drm", "a/b/i2c-core.ko.zst": "i2c_core", "drm": "drm"} {
		if got := modName(in); got != want {
			t.Errorf("modName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParamString(t *testing.T) {
	if got := paramString(map[string]string{"b": "2", "a": "1"}); got != "a=1 b=2" {
		t.Errorf("paramString = %q", got)
	}
	if got := paramString(nil); got != "" {
		t.Errorf("paramString(nil) = %q", got)
	}
}
