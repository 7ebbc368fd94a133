package nvrun

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

const v = "580.142"

func write(t *testing.T, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "NVIDIA-Linux-x86_64-"+v+".run")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func build(t *testing.T, s nvruntest.Spec) []byte {
	t.Helper()
	if s.Version == "" {
		s.Version = v
	}
	b, err := nvruntest.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCksumMatchesPOSIX(t *testing.T) {
	// Vectors from cksum(1): `printf '' | cksum` and `printf 123456789 | cksum`.
	for in, want := range map[string]uint32{"": 4294967295, "123456789": 930766865} {
		c := &cksum{}
		c.Write([]byte(in))
		if got := c.Sum32(); got != want {
			t.Errorf("cksum(%q) = %d, want %d", in, got, want)
		}
		if got := nvruntest.Cksum([]byte(in)); got != want {
			t.Errorf("nvruntest.Cksum(%q) = %d, want %d", in, got, want)
		}
	}
}

// imageFiles is what Unpack takes from nvruntest's installer, sorted: kind,
// name, mode (or link target).
func imageFiles() []string {
	return []string{
		"binary nvidia-smi 755",
		"firmware gsp_ga10x.bin 644",
		"firmware gsp_tu10x.bin 644",
		"lib libcuda.so." + v + " 755",
		"lib libnvidia-ml.so." + v + " 755",
		"lib libnvidia-ptxjitcompiler.so." + v + " 755",
		"link libcuda.so.1 -> libcuda.so." + v,
		"link libnvidia-ml.so.1 -> libnvidia-ml.so." + v,
		"link libnvidia-ptxjitcompiler.so.1 -> libnvidia-ptxjitcompiler.so." + v,
	}
}

func TestUnpackTakesExactlyTheImageFiles(t *testing.T) {
	want := imageFiles()
	for _, comp := range []string{"xz", "zstd", "gzip"} {
		t.Run(comp, func(t *testing.T) {
			b := build(t, nvruntest.Spec{Compression: comp})
			sum := sha256.Sum256(b)
			scratch := t.TempDir()
			u, err := Unpack(context.Background(), write(t, b), Options{SHA256: hex.EncodeToString(sum[:]), Version: v, Scratch: scratch})
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			if u.Compression != comp || !strings.HasSuffix(u.Label, v) {
				t.Errorf("compression %q label %q", u.Compression, u.Label)
			}
			var got []string
			for _, f := range u.Files {
				if f.Kind == KindLink {
					got = append(got, string(f.Kind)+" "+f.Name+" -> "+f.Link)
					continue
				}
				got = append(got, fmt.Sprintf("%s %s %o", f.Kind, f.Name, f.Mode.Perm()))
				body, err := os.ReadFile(f.Src)
				if err != nil {
					t.Fatal(err)
				}
				src := f.Name
				if f.Kind == KindFirmware {
					src = "firmware/" + f.Name
				}
				if string(body) != "SYNTHETIC "+src+"\n" || f.Size != int64(len(body)) {
					t.Errorf("%s: staged %q (%d bytes)", f.Name, body, f.Size)
				}
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("took:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if err := u.Close(); err != nil {
				t.Fatal(err)
			}
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Errorf("Close left %d entries in the scratch directory", len(left))
			}
		})
	}
}

func TestUnpackErrors(t *testing.T) {
	good := build(t, nvruntest.Spec{})
	goodSum := sha256.Sum256(good)
	payloadAt := bytes.Index(good, []byte{0xFD, '7', 'z', 'X', 'Z', 0})
	if payloadAt < 0 {
		t.Fatal("synthetic archive has no xz payload")
	}
	flipped := bytes.Clone(good)
	flipped[payloadAt+len(flipped[payloadAt:])/2] ^= 0x55
	twoVersions := nvruntest.Manifest(v) + "libcuda.so.580.95.05 0755 CUDA_LIB NATIVE / MODULE:gpgpu\n"
	noSMI := strings.Replace(nvruntest.Manifest(v), "nvidia-smi 0755 UTILITY_BINARY MODULE:nvml\n", "", 1)
	noLink := strings.Replace(nvruntest.Manifest(v), "libnvidia-ml.so.1 0000 UTILITY_LIB_SYMLINK NATIVE libnvidia-ml.so."+v+" MODULE:nvml\n", "", 1)
	noFirmwareFile := nvruntest.Default(v)
	delete(noFirmwareFile, "firmware/gsp_tu10x.bin")
	cases := []struct {
		name    string
		data    []byte
		pin     string
		version string
		is      error
		msg     string
	}{
		{"wrong sha256", good, strings.Repeat("0", 64), v, ErrSHA256, "want 0000"},
		{"truncated in the payload", good[:payloadAt+(len(good)-payloadAt)/2], "", v, ErrTruncated, "ends before its archive does"},
		{"truncated in the stub", good[:200], "", v, ErrTruncated, "file ends at line"},
		{"flipped payload byte", flipped, "", v, ErrCorrupt, ""},
		{"header version differs", good, "", "580.95.05", ErrVersion, "version_string is 580.142, driver.version is 580.95.05"},
		{"two versions", build(t, nvruntest.Spec{Manifest: twoVersions}), "", v, ErrVersion, "two versions in one .manifest: 580.142 (line 2) and 580.95.05"},
		{"manifest version differs", build(t, nvruntest.Spec{Manifest: strings.Replace(nvruntest.Manifest(v), "\n"+v+"\n", "\n580.95.05\n", 1)}), "", v, ErrVersion, ".manifest line 2 says 580.95.05"},
		{"no nvidia-smi in the manifest", build(t, nvruntest.Spec{Manifest: noSMI}), "", v, ErrMissing, "lists no nvidia-smi"},
		{"no soname link", build(t, nvruntest.Spec{Manifest: noLink}), "", v, ErrMissing, "no soname link (libnvidia-ml.so.1)"},
		{"listed file not in the payload", build(t, nvruntest.Spec{Files: noFirmwareFile}), "", v, ErrMissing, "lists firmware/gsp_tu10x.bin, but the payload has no such file"},
		{"no manifest", build(t, nvruntest.Spec{Manifest: "x"}), "", v, nil, ".manifest line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			scratch := t.TempDir()
			_, err := Unpack(context.Background(), write(t, c.data), Options{SHA256: c.pin, Version: c.version, Scratch: scratch})
			if err == nil {
				t.Fatal("accepted")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error is not %v: %v", c.is, err)
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "NVIDIA-Linux-x86_64-"+v+".run") {
				t.Errorf("error %q: want it to name the file and say %q", err, c.msg)
			}
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Errorf("a failed unpack left %d entries in scratch", len(left))
			}
		})
	}
	// The same archive with the right pin passes: the cases above fail for their reason.
	if _, err := Unpack(context.Background(), write(t, good), Options{SHA256: hex.EncodeToString(goodSum[:]), Version: v, Scratch: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
}

func TestHeaderErrors(t *testing.T) {
	b := build(t, nvruntest.Spec{})
	good := string(b[:bytes.Index(b, []byte("END_OF_STUB"))])
	cases := map[string]struct{ head, msg string }{
		"not a script":      {"\x7fELF\n" + good, "line 1: want a shell script"},
		"no skip":           {strings.Replace(good, "skip=", "skop=", 1), "no skip= line"},
		"skip not a number": {strings.Replace(good, "\nskip=", "\nskip=x", 1), "skip: want a line number"},
		"inconsistent":      {strings.Replace(good, "size_decompress=2", "size_decompress=3", 1), "must equal skip="},
		"skip in header":    {strings.Replace(strings.Replace(good, "skip_decompress=", "x_decompress=", 1), "\nskip=", "\nskip=2\nold_skip=", 1), "points into the header block"},
		"bad MD5":           {strings.Replace(good, "MD5=", "MD5=zz", 1), "MD5: want 32"},
		"twice":             {strings.Replace(good, "\nlabel=", "\nskip=9\nlabel=", 1), "skip= given twice"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseHeader([]byte(c.head))
			var he *HeaderError
			if !errors.As(err, &he) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want a HeaderError saying %q", err, c.msg)
			}
		})
	}
	h, err := ParseHeader([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if h.CheckFrom != 4 || h.VersionString != v || h.Skip != h.SkipDecompress+h.SizeDecompress || !h.HasCRC || h.MD5 == "" {
		t.Errorf("header %+v", h)
	}
}

func TestParseManifest(t *testing.T) {
	m, err := ParseManifest([]byte(nvruntest.Manifest(v)))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != v || len(m.Modules) != 5 || len(m.Entries) != 17 {
		t.Fatalf("version %q modules %v entries %d", m.Version, m.Modules, len(m.Entries))
	}
	e := m.Entries[4] // libcuda.so.1
	if e.File != "libcuda.so.1" || e.Type != "CUDA_SYMLINK" || e.Arch != "NATIVE" || e.Path != "/" || e.Target != "libcuda.so."+v || e.Line != 13 {
		t.Errorf("entry %+v", e)
	}
	// A type newer than the table is kept unread, and refused only for a file
	// the image takes.
	um, err := ParseManifest([]byte(nvruntest.Manifest(v) + "libnvidia-future.so." + v + " 0755 FUTURE_LIB NATIVE whatever MODULE:x\n"))
	if err != nil || !um.Entries[len(um.Entries)-1].Unknown {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := take(um, nil, v); err == nil || strings.Contains(err.Error(), "FUTURE_LIB") {
		t.Fatalf("an unknown type for a file the image does not take was refused: %v", err)
	}
	um, _ = ParseManifest([]byte(strings.Replace(nvruntest.Manifest(v), "nvidia-smi 0755 UTILITY_BINARY", "nvidia-smi 0755 UTILITY_BINARY_V2 NATIVE", 1)))
	if _, err := take(um, nil, v); err == nil || !strings.Contains(err.Error(), "nvidia-smi has file type UTILITY_BINARY_V2, which this peerboot does not know") {
		t.Fatalf("an unknown type for nvidia-smi: %v", err)
	}
	fw := m.Entries[15]
	if fw.InstallPath() != "gsp_ga10x.bin" || fw.Mode != 0o644 {
		t.Errorf("firmware %+v -> %s", fw, fw.InstallPath())
	}
	for name, c := range map[string]struct{ line, msg string }{
		"bad type":      {"x 0755 surprise!", "file type: want an upper-case name"},
		"bad mode":      {"x 9 UTILITY_BINARY", "mode: want octal"},
		"no arch":       {"libx.so.1 0755 CUDA_LIB", "want NATIVE or COMPAT32"},
		"no target":     {"libx.so.1 0000 UTILITY_LIB_SYMLINK NATIVE", "missing its symlink target"},
		"escape":        {"../x 0755 UTILITY_BINARY", "leaves the payload"},
		"target escape": {"l 0000 UTILITY_BIN_SYMLINK /etc/passwd", "leaves its directory"},
		"depth":         {"firmware/a.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:2", "drops more directories"},
		"extra":         {"nvidia-smi 0755 UTILITY_BINARY junk", "unexpected field"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseManifest([]byte(nvruntest.Manifest(v) + c.line + "\n"))
			var me *ManifestError
			if !errors.As(err, &me) || me.Line != 26 || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want line 26: %s", err, c.msg)
			}
		})
	}
}
