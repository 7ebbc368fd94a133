package selftest

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/peerboot/peerboot/node/modinfo"
)

// elfWithModinfo is a minimal ELF64 relocatable object with a .modinfo section, the
// shape of a .ko as far as modinfo(8) reads it.
func elfWithModinfo(info string) []byte {
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")
	const ehsize, shentsize = 64, 64
	data := []byte(info)
	dataOff := uint64(ehsize)
	strOff := dataOff + uint64(len(data))
	shOff := (strOff + uint64(len(shstr)) + 7) &^ 7
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0})
	b.Write(make([]byte, 8))
	binary.Write(&b, le, uint16(1))  // ET_REL
	binary.Write(&b, le, uint16(62)) // EM_X86_64
	binary.Write(&b, le, uint32(1))
	binary.Write(&b, le, uint64(0)) // entry
	binary.Write(&b, le, uint64(0)) // phoff
	binary.Write(&b, le, shOff)
	binary.Write(&b, le, uint32(0))
	binary.Write(&b, le, uint16(ehsize))
	binary.Write(&b, le, uint16(0))
	binary.Write(&b, le, uint16(0))
	binary.Write(&b, le, uint16(shentsize))
	binary.Write(&b, le, uint16(3)) // shnum
	binary.Write(&b, le, uint16(2)) // shstrndx
	b.Write(data)
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	sh := func(name, typ uint32, off, size uint64) {
		binary.Write(&b, le, name)
		binary.Write(&b, le, typ)
		binary.Write(&b, le, uint64(0)) // flags
		binary.Write(&b, le, uint64(0)) // addr
		binary.Write(&b, le, off)
		binary.Write(&b, le, size)
		binary.Write(&b, le, uint32(0))
		binary.Write(&b, le, uint32(0))
		binary.Write(&b, le, uint64(1))
		binary.Write(&b, le, uint64(0))
	}
	sh(0, 0, 0, 0)
	sh(1, 1, dataOff, uint64(len(data)))  // .modinfo, SHT_PROGBITS
	sh(10, 3, strOff, uint64(len(shstr))) // .shstrtab, SHT_STRTAB
	return b.Bytes()
}

// writeKo writes a FAKE nvidia.ko whose modinfo says version v, where DKMS puts it.
func writeKo(t testing.TB, modDir, name, v string) string {
	t.Helper()
	p := filepath.Join(modDir, "updates", "dkms", name+".ko")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	info := "version=" + v + "\x00license=Dual MIT/GPL\x00alias=pci:v000010DEd*sv*sd*bc03sc00i00*\x00alias=second\x00vermagic=6.12.57 SMP preempt mod_unload modversions \x00"
	if err := os.WriteFile(p, elfWithModinfo(info), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// FillKoVersions reads each nvidia* module's version from its .ko, loaded or not.
func TestFillKoVersions(t *testing.T) {
	mod := t.TempDir()
	writeKo(t, mod, "nvidia", "550.163.01")
	writeKo(t, mod, "nvidia_uvm", "550.54.15")
	ms := []Module{{Name: "nvidia", File: "updates/dkms/nvidia.ko", Result: ModENODEV, Errno: 19}, {Name: "nvidia-uvm", Result: ModSkipped}, {Name: "ib_core"}}
	FillKoVersions(ms, mod)
	if ms[0].KoVersion != "550.163.01" || ms[1].KoVersion != "550.54.15" || ms[1].File != "updates/dkms/nvidia_uvm.ko" || ms[2].KoVersion != "" {
		t.Errorf("modules %+v", ms)
	}
}

func TestLibraryFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "libcuda.so.550.163.01"), []byte("FAKE"), 0o644)
	os.Symlink("libcuda.so.550.163.01", filepath.Join(dir, "libcuda.so.1"))
	got := LibraryFile(root, "libcuda.so.1")
	if got != filepath.Join(dir, "libcuda.so.550.163.01") || LibraryVersion(got) != "550.163.01" {
		t.Errorf("LibraryFile = %q, version %q", got, LibraryVersion(got))
	}
	if LibraryFile(root, "libnvidia-ml.so.1") != "" || LibraryVersion("libcuda.so.1") != "" {
		t.Error("an absent library or a soname resolved to a version")
	}
	// A mapped library wins: this test binary has libc mapped (or is static: none).
	maps := filepath.Join(root, "proc", "self", "maps")
	os.MkdirAll(filepath.Dir(maps), 0o755)
	os.WriteFile(maps, []byte("7f00-7f10 r-xp 00000000 08:01 1234 /opt/nv/libcuda.so.580.159.04\n7f10-7f20 r-xp 00000000 08:01 99 /usr/lib/libcudadebugger.so.1\n"), 0o644)
	if got := LibraryFile(root, "libcuda.so.1"); got != "/opt/nv/libcuda.so.580.159.04" {
		t.Errorf("mapped library %q", got)
	}
}

// PEERBOOT_WRITE_KO_FIXTURE=1 go test ./selftest -run TestWriteKoFixture writes cmd/p2pcheck's FAKE
// nvidia.ko fixtures: modinfo version 550.54.15 (another version than the recipes') and
// 550.163.01 (the 550 recipes' version, as a stock build of it has).
func TestWriteKoFixture(t *testing.T) {
	for _, v := range []string{"550.54.15", "550.163.01"} {
		path := filepath.Join("..", "cmd", "p2pcheck", "testdata", "nvidia-"+v+".ko")
		if os.Getenv("PEERBOOT_WRITE_KO_FIXTURE") == "" {
			// Check the committed fixture still reads back instead of rewriting it.
			info, err := modinfo.Read(path)
			if err != nil || info["version"] != v {
				t.Fatalf("fixture %s: %v %v", path, info, err)
			}
			continue
		}
		b, _ := os.ReadFile(writeKo(t, t.TempDir(), "nvidia", v))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A recorded KoFile is the report's (what the init loaded), kept even where
// the .ko was found elsewhere; a module with no .ko anywhere gets no version.
func TestFillKoVersionsKeepsRecordedFile(t *testing.T) {
	mod := t.TempDir()
	writeKo(t, mod, "nvidia", "580.95.05")
	ms := []Module{
		{Name: "nvidia", File: "kernel/drivers/video/nvidia.ko", Result: ModLoaded},
		{Name: "nvidia-drm", Result: ModSkipped},
	}
	FillKoVersions(ms, mod)
	if ms[0].KoVersion != "580.95.05" || ms[0].File != "kernel/drivers/video/nvidia.ko" {
		t.Errorf("nvidia: version %q, file %q; want 580.95.05 from the .ko found and the recorded file", ms[0].KoVersion, ms[0].File)
	}
	if ms[1].KoVersion != "" || ms[1].File != "" {
		t.Errorf("nvidia-drm has no .ko: %+v", ms[1])
	}
}

// LibraryFile's search: LD_LIBRARY_PATH's directories first (an empty element
// is no directory), a dangling symlink or a directory of the library's name is
// passed over for the next directory, and in /proc/self/maps only the
// library's own stem counts (not the first .so mapped, not an anonymous line).
func TestLibraryFileSearch(t *testing.T) {
	root := t.TempDir()
	sys := filepath.Join(root, "usr", "lib", "x86_64-linux-gnu")
	opt := filepath.Join(root, "opt", "nv")
	for _, d := range []string{sys, opt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(sys, "libnvidia-ml.so.580.95.05"), []byte("FAKE"), 0o644)
	os.Symlink("libnvidia-ml.so.580.95.05", filepath.Join(sys, "libnvidia-ml.so.1"))
	os.Symlink("gone.so", filepath.Join(opt, "libnvidia-ml.so.1")) // dangling, in LD_LIBRARY_PATH
	os.Mkdir(filepath.Join(opt, "libcuda.so.1"), 0o755)            // a directory, not a library
	os.WriteFile(filepath.Join(root, "libcuda.so.1"), []byte("FAKE"), 0o644)
	t.Setenv("LD_LIBRARY_PATH", "/opt/nv::")
	if got, want := LibraryFile(root, "libnvidia-ml.so.1"), filepath.Join(sys, "libnvidia-ml.so.580.95.05"); got != want {
		t.Errorf("past a dangling symlink: %q, want %q", got, want)
	}
	if got := LibraryFile(root, "libcuda.so.1"); got != "" {
		t.Errorf("libcuda.so.1 is a directory in LD_LIBRARY_PATH and only at the root otherwise: %q, want none", got)
	}

	maps := filepath.Join(root, "proc", "self", "maps")
	os.MkdirAll(filepath.Dir(maps), 0o755)
	os.WriteFile(maps, []byte(
		"7e00-7e10 rw-p 00000000 00:00 0\n"+ // anonymous: five fields
			"7e10-7e20 r-xp 00000000 08:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6\n"+
			"7e20-7e30 rw-p 00000000 00:00 0 [heap]\n"+
			"7f00-7f10 r-xp 00000000 08:01 1234 /opt/nv/libcuda.so.580.159.04\n"), 0o644)
	if got := LibraryFile(root, "libcuda.so.1"); got != "/opt/nv/libcuda.so.580.159.04" {
		t.Errorf("mapped libcuda: %q", got)
	}
}
