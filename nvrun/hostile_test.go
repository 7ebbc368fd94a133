package nvrun

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

var update = flag.Bool("update", false, "rewrite testdata/fuzz/FuzzUnpack's hostile seeds")

// declares is a tar stream of one entry that declares size bytes but carries
// no data: what a hostile archive needs to make an unbounded reader allocate or
// write, at a few hundred bytes. The reader must refuse at the header.
func declares(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Mode: 0o755, Size: size, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// zeros is a real decompression bomb: n zero bytes in a file the image does
// not take, gzip'd (~1000:1), before the real payload.
func zeros(t testing.TB, n int64) []byte {
	t.Helper()
	good := tarOf(t, nvruntest.Manifest(v), nvruntest.Default(v))
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: "./LICENSE", Mode: 0o644, Size: n, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	tw.Flush()
	return append(b.Bytes(), good...)
}

func tarOf(t testing.TB, manifest string, files map[string][]byte) []byte {
	t.Helper()
	// nvruntest builds the tar; take it back out of a gzip'd archive.
	b, err := nvruntest.Build(nvruntest.Spec{Version: v, Compression: "gzip", Manifest: manifest, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b[bytes.Index(b, []byte{0x1F, 0x8B, 8}):]))
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	var out bytes.Buffer
	if _, err := out.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// xzWithDict is the good archive with its xz block header's LZMA2 dictionary
// code set to d (40: 4 GiB - 1) and the header's CRC32 made right again.
func xzWithDict(t testing.TB, d byte) []byte {
	t.Helper()
	b := build(t.(*testing.T), nvruntest.Spec{})
	at := bytes.Index(b, []byte{0xFD, '7', 'z', 'X', 'Z', 0})
	x := bytes.Clone(b[at:])
	x = x[:len(x)-1] // makeself's closing newline
	end := 12 + (int(x[12])+1)*4
	// No size fields (flags 0x00), one filter: 0x21 (LZMA2), 1 property byte.
	if x[13]&0xC3 != 0 || x[14] != 0x21 || x[15] != 1 {
		t.Fatalf("unexpected xz block header % x", x[12:end])
	}
	x[16] = d
	binary.LittleEndian.PutUint32(x[end-4:], crc32.ChecksumIEEE(x[12:end-4]))
	return build(t.(*testing.T), nvruntest.Spec{Compression: "gzip", Payload: x}) // gzip: cheaper to build, then replaced
}

// zstdWindow is a zstd frame whose header declares a 2^(10+exp)-byte window.
func zstdWindow(exp byte) []byte {
	// magic, frame header descriptor 0 (window descriptor follows), window
	// descriptor (exponent << 3), then a last raw block of 4 bytes.
	return []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, exp << 3, 0x21, 0x00, 0x00, 't', 'a', 'r', '!'}
}

type hostile struct {
	name  string
	data  func(t *testing.T) []byte
	lim   Limits
	is    error
	msg   string
	fuzzy bool // also a seed of FuzzUnpack's committed corpus
}

func hostileArchives() []hostile {
	return []hostile{
		{name: "declares-3GiB-libcuda", data: func(t *testing.T) []byte {
			return build(t, nvruntest.Spec{Compression: "gzip", Tar: declares(t, "libcuda.so."+v, 3<<30)})
		}, is: ErrTooLarge, msg: "libcuda.so." + v + " declares 3221225472 bytes, more than the 536870912 one file may have", fuzzy: true},
		{name: "declares-past-ratio", data: func(t *testing.T) []byte {
			return build(t, nvruntest.Spec{Tar: declares(t, "firmware/gsp_ga10x.bin", 200<<20)})
		}, is: ErrTooLarge, msg: "firmware/gsp_ga10x.bin declares 209715200 bytes, more than the", fuzzy: true},
		{name: "manifest-declares-5MiB", data: func(t *testing.T) []byte {
			return build(t, nvruntest.Spec{Tar: declares(t, ".manifest", 5<<20)})
		}, is: ErrTooLarge, msg: ".manifest declares 5242880 bytes, more than the 4194304", fuzzy: true},
		{name: "zeros-in-a-skipped-file", data: func(t *testing.T) []byte {
			return build(t, nvruntest.Spec{Compression: "gzip", Tar: zeros(t, 4<<20)})
		}, lim: Limits{Ratio: 32, RatioSlack: 64 << 10}, is: ErrTooLarge, msg: "the payload decompresses past", fuzzy: true},
		{name: "staged-files-past-taken", data: func(t *testing.T) []byte { return build(t, nvruntest.Spec{}) },
			lim: Limits{Taken: 100}, is: ErrTooLarge, msg: "past the 100 all staged files together may have"},
		{name: "xz-4GiB-dictionary", data: func(t *testing.T) []byte { return xzWithDict(t, 40) },
			is: ErrTooLarge, msg: "the xz stream declares a 4294967295-byte dictionary, more than 268435456", fuzzy: true},
		{name: "zstd-2TiB-window", data: func(t *testing.T) []byte { return build(t, nvruntest.Spec{Payload: zstdWindow(31)}) },
			is: ErrTooLarge, msg: "the zstd payload declares a window past 268435456 bytes", fuzzy: true},
		{name: "skip-past-the-file", data: func(t *testing.T) []byte { return []byte("#! /bin/sh\nskip=900000\nlabel=x\n\nshort\n") },
			is: ErrTruncated, msg: "the header puts the payload at line 900000, past the file's 38 bytes", fuzzy: true},
	}
}

// Each hostile archive is refused for its reason, with nothing staged and
// nothing left in Scratch.
func TestHostileArchives(t *testing.T) {
	for _, c := range hostileArchives() {
		t.Run(c.name, func(t *testing.T) {
			data := c.data(t)
			if len(data) > 64<<10 {
				t.Fatalf("the hostile archive is %d bytes; it should be small", len(data))
			}
			scratch := t.TempDir()
			_, err := Unpack(context.Background(), write(t, data), Options{Version: v, Scratch: scratch, Limits: c.lim})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("got %v\nwant %v saying %q", err, c.is, c.msg)
			}
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Errorf("a refused archive left %d entries in scratch", len(left))
			}
			seed := filepath.Join("testdata", "fuzz", "FuzzUnpack", c.name)
			if !c.fuzzy {
				return
			}
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
			if *update {
				if err := os.MkdirAll(filepath.Dir(seed), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(seed, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := os.ReadFile(seed); err != nil || string(got) != want {
				t.Errorf("%s is not this archive (go test ./nvrun -run TestHostileArchives -update rewrites it): %v", seed, err)
			}
		})
	}
	// The same limits let the good archive through: the cases fail for their reason.
	for _, c := range hostileArchives() {
		if c.lim == (Limits{}) || c.lim.Taken != 0 {
			continue
		}
		u, err := Unpack(context.Background(), write(t, build(t, nvruntest.Spec{})), Options{Version: v, Scratch: t.TempDir(), Limits: c.lim})
		if err != nil {
			t.Fatalf("%s's limits refuse the good archive: %v", c.name, err)
		}
		u.Close()
	}
}

// FuzzUnpack feeds whole installers (the committed hostile corpus in
// testdata/fuzz/FuzzUnpack, and good archives) to Unpack under small limits:
// never a panic, nothing left behind on error, and an accepted archive's
// staged files are within the limits.
func FuzzUnpack(f *testing.F) {
	for _, comp := range []string{"xz", "gzip", "zstd"} {
		b, err := nvruntest.Build(nvruntest.Spec{Version: v, Compression: comp})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lim := Limits{File: 1 << 20, Taken: 2 << 20, Payload: 4 << 20, Ratio: 32, RatioSlack: 64 << 10, Window: 8 << 20}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "NVIDIA-Linux-x86_64-"+v+".run")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		scratch := filepath.Join(dir, "scratch")
		os.Mkdir(scratch, 0o755)
		u, err := Unpack(context.Background(), p, Options{Version: v, Scratch: scratch, Limits: lim})
		if err != nil {
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Fatalf("refused (%v) but left %d entries in scratch", err, len(left))
			}
			return
		}
		defer u.Close()
		var total int64
		for _, fl := range u.Files {
			if fl.Size > lim.File {
				t.Fatalf("staged %s of %d bytes past the %d limit", fl.Name, fl.Size, lim.File)
			}
			total += fl.Size
		}
		if total > lim.Taken {
			t.Fatalf("staged %d bytes past the %d limit", total, lim.Taken)
		}
	})
}
