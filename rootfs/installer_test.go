package rootfs

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// installerRun writes a SYNTHETIC NVIDIA installer whose libraries are real ELF
// shared objects (so the host's ldconfig and CheckResolves treat them as the real
// ones), and the libc6 package of fakeDebs.
func installerRun(t *testing.T, version string) (run string, libc string) {
	files := nvruntest.Default(version)
	files["libcuda.so."+version] = []byte(sharedObject(t, "libcuda.so.1"))
	files["libnvidia-ml.so."+version] = []byte(sharedObject(t, "libnvidia-ml.so.1"))
	files["libnvidia-ptxjitcompiler.so."+version] = []byte(sharedObject(t, "libnvidia-ptxjitcompiler.so.1"))
	b, err := nvruntest.Build(nvruntest.Spec{Version: version, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	run = filepath.Join(t.TempDir(), "NVIDIA-Linux-x86_64-"+version+".run")
	os.WriteFile(run, b, 0o644)
	for _, d := range fakeDebs(t, version) {
		if filepath.Base(d) == "libc6.deb" {
			libc = d
		}
	}
	return run, libc
}

func TestUserspaceFromTheInstaller(t *testing.T) {
	const v = "595.45.04"
	run, libc := installerRun(t, v)
	lay := func() string {
		root := t.TempDir()
		if err := Userspace(context.Background(), UserspaceOptions{Debs: []string{libc}, DriverVersion: v, Installer: run, Scratch: t.TempDir()}, root); err != nil {
			t.Fatal(err)
		}
		return root
	}
	root := lay()
	for p, want := range map[string]string{
		"usr/bin/nvidia-smi":                              "SYNTHETIC nvidia-smi\n",
		"usr/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin": "SYNTHETIC firmware/gsp_ga10x.bin\n",
		"lib/firmware/nvidia/" + v + "/gsp_tu10x.bin":     "SYNTHETIC firmware/gsp_tu10x.bin\n", // through /lib
	} {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(got) != want {
			t.Errorf("%s: got %q, %v; want %q", p, got, err, want)
		}
	}
	for p, mode := range map[string]fs.FileMode{"usr/bin/nvidia-smi": 0o755, NVIDIALibDir + "/libcuda.so." + v: 0o755, "usr/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin": 0o644} {
		if info, err := os.Stat(filepath.Join(root, p)); err != nil || info.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", p, info.Mode().Perm(), err, mode)
		}
	}
	for _, so := range []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"} {
		got, err := os.ReadFile(filepath.Join(root, "usr/lib/x86_64-linux-gnu", so))
		if err != nil || !strings.Contains(string(got), so) {
			t.Errorf("%s does not resolve to the installer's library: %v", so, err)
		}
	}
	// Nothing the image does not take: no OpenGL library, no 32-bit libcuda, no installer binary.
	for _, p := range []string{NVIDIALibDir + "/libnvidia-glcore.so." + v, "usr/bin/nvidia-installer", NVIDIALibDir + "/32"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s was laid into the image", p)
		}
	}
	// Twice, the same tree (names, modes, bytes, link targets).
	if a, b := treeDigest(t, root), treeDigest(t, lay()); a != b {
		t.Errorf("two lays of the same installer differ:\n%s\n---\n%s", a, b)
	}
}

func TestInstallerAndDebianPackageOfTheSameFileConflict(t *testing.T) {
	const v = "580.142"
	run, _ := installerRun(t, v)
	root := t.TempDir()
	err := Userspace(context.Background(), UserspaceOptions{Debs: fakeDebs(t, v), DriverVersion: v, Installer: run, Scratch: t.TempDir()}, root)
	if err == nil || !strings.Contains(err.Error(), "comes from a userspace package and from NVIDIA's installer") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/bin/nvidia-smi")); err == nil {
		t.Error("a refused installer still laid files")
	}
}

func TestInstallerOfAnotherVersionIsRefused(t *testing.T) {
	run, libc := installerRun(t, "580.142")
	err := Userspace(context.Background(), UserspaceOptions{Debs: []string{libc}, DriverVersion: "580.95.05", Installer: run}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "version_string is 580.142, driver.version is 580.95.05") {
		t.Fatalf("got %v", err)
	}
}

func treeDigest(t *testing.T, root string) string {
	var lines []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		info, _ := d.Info()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			lines = append(lines, rel+" -> "+l)
		case d.Type().IsRegular():
			b, _ := os.ReadFile(p)
			lines = append(lines, rel+" "+info.Mode().String()+" "+string(b[:min(len(b), 64)]))
		default:
			lines = append(lines, rel+" "+info.Mode().String())
		}
		return nil
	})
	return strings.Join(lines, "\n")
}
