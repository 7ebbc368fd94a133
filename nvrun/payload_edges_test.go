package nvrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// unpack is Unpack of b under lim; a refusal must leave scratch empty.
func unpack(t *testing.T, b []byte, lim Limits) (*Unpacked, error) {
	t.Helper()
	scratch := t.TempDir()
	u, err := Unpack(context.Background(), write(t, b), Options{Version: v, Scratch: scratch, Limits: lim})
	if err != nil {
		if left, _ := os.ReadDir(scratch); len(left) != 0 {
			t.Errorf("a refused installer left %d entries in scratch", len(left))
		}
		return nil, err
	}
	t.Cleanup(func() { u.Close() })
	return u, nil
}

// Payload forms at the edges of decompressor and the header checks (make
// mutants' nvrun survivors): an uncompressed tar (-C none) is read as one; a
// payload in no known form is refused saying what it starts with, however
// short; a payload cut inside xz's 12-byte stream header is refused as
// truncated (the block header's size byte lies past it); an installer whose
// header carries no CRCsum= and MD5= checks no sums.
func TestUnpackPayloadForms(t *testing.T) {
	// Each payload replaces a gzip'd one: building it is cheaper than xz.
	payload := func(p []byte) []byte { return build(t, nvruntest.Spec{Compression: "gzip", Payload: p}) }
	good := payload(nil)
	sums := regexp.MustCompile(`(?m)^CRCsum=\d+\nMD5=[0-9a-f]{32}\n`)
	if !sums.Match(good) {
		t.Fatal("the synthetic installer has no sums")
	}
	for _, c := range []struct {
		name  string
		data  []byte
		is    error  // a refusal's class; nil: any
		msg   string // a refusal's message; accepted: the compression Unpack reports
		files int    // how many files it takes; 0: refused
	}{
		{"uncompressed tar", payload(tarOf(t, nvruntest.Manifest(v), nvruntest.Default(v))), nil, "none", 9},
		// Shorter than a tar header, and long enough for one: both are neither.
		{"unknown, short", payload([]byte("PK\x03\x04 a zip")), nil, "the payload starts with 50 4b 03 04 20 61: not xz, zstd, gzip, bzip2 or tar", 0},
		{"unknown, a tar header long", payload(bytes.Repeat([]byte("Z"), 1024)), ErrCorrupt, "the payload starts with 5a 5a 5a 5a 5a 5a: not xz, zstd, gzip, bzip2 or tar", 0},
		// 11 bytes of the stream header (magic, flags, part of the CRC32),
		// then makeself's closing newline: 12 in all.
		{"cut in xz's stream header", payload([]byte{0xFD, '7', 'z', 'X', 'Z', 0, 0, 0, 0xFF, 0x12, 0xD9}), ErrTruncated, "the payload ends before its archive does", 0},
		// Two other assignments in place of the sums keep every line number.
		{"no sums", sums.ReplaceAll(good, []byte("pkg_a=1\npkg_b=2\n")), nil, "gzip", 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, err := unpack(t, c.data, Limits{})
			if c.files == 0 {
				if err == nil || c.is != nil && !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("got %v\nwant %v saying %q", err, c.is, c.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if u.Compression != c.msg || len(u.Files) != c.files {
				t.Errorf("compression %q, %d files; want %q, %d", u.Compression, len(u.Files), c.msg, c.files)
			}
		})
	}
}

// The bounds Unpack applies to what the installer declares, each exactly at
// its limit (make mutants' nvrun survivors): an xz dictionary of exactly
// Limits.Window passes and the next size up is refused; the payload bound is
// Ratio times the compressed payload's own size (the file from the payload
// line on) plus RatioSlack, as the refusal says; a .manifest of exactly
// maxManifest bytes is read whole, its last byte included.
func TestUnpackBoundsAreExact(t *testing.T) {
	t.Run("xz dictionary", func(t *testing.T) {
		lim := Limits{Window: 8 << 20}
		if _, err := unpack(t, xzWithDict(t, 22), lim); err != nil { // 8 MiB
			t.Fatalf("a dictionary of exactly the window: %v", err)
		}
		_, err := unpack(t, xzWithDict(t, 23), lim) // 12 MiB
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "declares a 12582912-byte dictionary, more than 8388608") {
			t.Fatalf("a dictionary one size past the window: %v", err)
		}
	})
	t.Run("payload bound", func(t *testing.T) {
		b := build(t, nvruntest.Spec{Compression: "gzip", Tar: zeros(t, 1<<20)})
		payload := int64(len(b) - bytes.Index(b, []byte{0x1F, 0x8B, 8}))
		lim := Limits{Ratio: 32, RatioSlack: 4096}
		_, err := unpack(t, b, lim)
		want := fmt.Sprintf("the payload decompresses past %d bytes (32x plus 4096 for a %d-byte compressed payload)", 32*payload+4096, payload)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v\nwant %q", err, want)
		}
	})
	t.Run("manifest of maxManifest bytes", func(t *testing.T) {
		// Padding in header line 5, which nvidia-installer and ParseManifest
		// ignore, and nvidia-smi's line last, with no newline after it: a
		// manifest cut by one byte would give nvidia-smi the type
		// UTILITY_BINAR.
		smi := "nvidia-smi 0755 UTILITY_BINARY"
		lines := strings.Split(strings.Replace(nvruntest.Manifest(v), smi+" MODULE:nvml\n", "", 1), "\n")
		body := strings.Join(lines[:len(lines)-1], "\n") + "\n" + smi
		lines = strings.SplitN(body, "\n", 6)
		lines[4] += strings.Repeat("x", maxManifest-len(body))
		manifest := strings.Join(lines, "\n")
		if len(manifest) != maxManifest {
			t.Fatalf("the manifest is %d bytes", len(manifest))
		}
		// The zeros compress ~1000:1: a ratio that lets them through.
		u, err := unpack(t, build(t, nvruntest.Spec{Compression: "gzip", Manifest: manifest}), Limits{Ratio: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(fileList(u.Files), "binary nvidia-smi 755") {
			t.Errorf("took:\n%s", fileList(u.Files))
		}
	})
}

// Where the header puts the payload at line N of an N-byte file, the line
// could still start inside it (line N starts after at least N-1 bytes), so the
// refusal is the one that read the file: it says where the file ends.
func TestUnpackSkipOfTheFileSize(t *testing.T) {
	b := []byte("#! /bin/sh\nskip=20\n\n")
	if len(b) != 20 {
		t.Fatalf("%d bytes", len(b))
	}
	_, err := unpack(t, b, Limits{})
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "the header puts the payload at line 20, but the file ends at line 4 (20 bytes)") {
		t.Fatalf("got %v", err)
	}
}

// lineOffsets reads no further than the start of the last line it is asked
// for, and says how many lines it saw: Unpack finds the payload line with it,
// then reads the payload once, through the sums and the decompressor. Here
// the reader fails past that point.
func TestLineOffsetsStopsAtTheLastLine(t *testing.T) {
	r := io.MultiReader(strings.NewReader("#! /bin/sh\nskip=3\n"), errReader{errors.New("read past the payload line")})
	offs, lines, err := lineOffsets(r, 0, 3)
	if err != nil || lines != 3 || offs[3] != 18 {
		t.Fatalf("offsets %v, %d lines, %v; want line 3 at 18, 3 lines", offs, lines, err)
	}
	offs, lines, err = lineOffsets(strings.NewReader("a\nb\n"), 2, 5)
	if err != nil || lines != 3 || offs[2] != 2 || offs[5] != -1 {
		t.Fatalf("a short file: offsets %v, %d lines, %v; want line 2 at 2, line 5 missing, 3 lines", offs, lines, err)
	}
}
