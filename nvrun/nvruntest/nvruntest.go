// Package nvruntest builds SYNTHETIC NVIDIA installers for tests: the header form
// of NVIDIA's makeself (CRCsum, MD5 over `tail -n +4`, skip, skip_decompress,
// size_decompress, label, version_string, ... a stub, an embedded "decompressor"
// block) and a compressed tar payload with a .manifest in nvidia-installer's
// form. The libraries in it are placeholders unless the test supplies bytes.
package nvruntest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Spec describes the archive.
type Spec struct {
	Version     string            // driver version, e.g. "580.142"
	Compression string            // "xz" (default, -C none as NVIDIA's), "zstd" or "gzip"
	Files       map[string][]byte // payload path -> bytes; nil: Default(Version)
	Manifest    string            // "" = Manifest(Version)
	NoMD5       bool              // MD5 all zeros, as makeself writes without md5sum (CRCsum stays)
	// Hostile archives: Tar replaces the payload's tar stream (Files and
	// Manifest are then unused), Payload the compressed payload itself.
	Tar     []byte
	Payload []byte
}

// Manifest is a .manifest in nvidia-installer's form for version v: the eight
// header lines, then the entries for the files Default puts in the payload,
// plus entries the image does not take.
func Manifest(v string) string {
	lines := []string{
		"NVIDIA Accelerated Graphics Driver for Linux-x86_64 " + v,
		v,
		"kernel",
		"nvidia nvidia-uvm nvidia-modeset nvidia-drm nvidia-peermem",
		"", "", "", "",
	}
	lines[4], lines[5], lines[6], lines[7] = "KERNEL_MODULE_SRC", "x86_64", "Linux", "-"
	lines = append(lines,
		"LICENSE 0644 DOCUMENTATION share/doc/NVIDIA_GLX-1.0 MODULE:installer",
		"nvidia-installer 0755 INSTALLER_BINARY MODULE:installer",
		"kernel-open/nvidia/nv.c 0644 KERNEL_MODULE_SRC INHERIT_PATH_DEPTH:1 MODULE:resman",
		"libcuda.so."+v+" 0755 CUDA_LIB NATIVE / MODULE:gpgpu",
		"libcuda.so.1 0000 CUDA_SYMLINK NATIVE / libcuda.so."+v+" MODULE:gpgpu",
		"libcuda.so 0000 CUDA_SYMLINK NATIVE / libcuda.so.1 MODULE:gpgpu",
		"32/libcuda.so."+v+" 0755 CUDA_LIB COMPAT32 / MODULE:gpgpu",
		"libnvidia-ptxjitcompiler.so."+v+" 0755 CUDA_LIB NATIVE / MODULE:gpgpu",
		"libnvidia-ptxjitcompiler.so.1 0000 CUDA_SYMLINK NATIVE / libnvidia-ptxjitcompiler.so."+v+" MODULE:gpgpu",
		"libnvidia-ml.so."+v+" 0755 UTILITY_LIB NATIVE MODULE:nvml",
		"libnvidia-ml.so.1 0000 UTILITY_LIB_SYMLINK NATIVE libnvidia-ml.so."+v+" MODULE:nvml",
		"libnvidia-glcore.so."+v+" 0755 OPENGL_LIB NATIVE MODULE:opengl",
		"libnvidia-egl-wayland.so.1.1.19 0755 OPENGL_LIB NATIVE MODULE:opengl",
		"nvidia-smi 0755 UTILITY_BINARY MODULE:nvml",
		"nvidia-smi.1.gz 0644 MANPAGE share/man/man1 MODULE:nvml",
		"firmware/gsp_ga10x.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:1 MODULE:resman",
		"firmware/gsp_tu10x.bin 0644 FIRMWARE INHERIT_PATH_DEPTH:1 MODULE:resman",
	)
	return strings.Join(lines, "\n") + "\n"
}

// Default is the payload for version v: the files Manifest lists, with
// placeholder bytes that name the file.
func Default(v string) map[string][]byte {
	files := map[string][]byte{}
	for _, p := range []string{
		"LICENSE", "nvidia-installer", "kernel-open/nvidia/nv.c",
		"libcuda.so." + v, "32/libcuda.so." + v, "libnvidia-ptxjitcompiler.so." + v, "libnvidia-ml.so." + v,
		"libnvidia-glcore.so." + v, "libnvidia-egl-wayland.so.1.1.19", "nvidia-smi", "nvidia-smi.1.gz",
		"firmware/gsp_ga10x.bin", "firmware/gsp_tu10x.bin",
	} {
		files[p] = []byte("SYNTHETIC " + p + "\n")
	}
	return files
}

// Build returns the archive's bytes.
func Build(s Spec) ([]byte, error) {
	files := s.Files
	if files == nil {
		files = Default(s.Version)
	}
	manifest := s.Manifest
	if manifest == "" {
		manifest = Manifest(s.Version)
	}
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	names := []string{".manifest"}
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names[1:])
	for _, p := range names {
		body := files[p]
		mode := int64(0o644)
		if p == ".manifest" {
			body = []byte(manifest)
		} else if !strings.HasPrefix(p, "firmware/") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: "./" + p, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if s.Tar != nil {
		tarBuf.Reset()
		tarBuf.Write(s.Tar)
	}
	var payload bytes.Buffer
	switch s.Compression {
	case "", "xz":
		w, err := xz.WriterConfig{CheckSum: xz.None}.NewWriter(&payload)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(w, &tarBuf); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
	case "zstd":
		w, _ := zstd.NewWriter(&payload, zstd.WithEncoderConcurrency(1))
		io.Copy(w, &tarBuf)
		if err := w.Close(); err != nil {
			return nil, err
		}
	case "gzip":
		w := gzip.NewWriter(&payload)
		io.Copy(w, &tarBuf)
		if err := w.Close(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("nvruntest: compression %q", s.Compression)
	}
	if s.Payload != nil {
		payload.Reset()
		payload.Write(s.Payload)
	}

	// The stub, as NVIDIA's makeself writes it: the assignment block, a banner,
	// the shell code (abridged here: it must never matter what it says), then the
	// embedded decompressor's lines, then the payload.
	decompressor := "\x7fELF SYNTHETIC decompressor\nline 2 of it\n"
	stub := []string{
		"label=\"NVIDIA Accelerated Graphics Driver for Linux-x86_64 " + s.Version + "\"",
		"version_string=" + s.Version,
		"pkg_version=1",
		"script=./nvidia-installer",
		"targetdir=NVIDIA-Linux-x86_64-" + s.Version,
		"scriptargs=\"\"",
		"keep=n",
		"add_this_kernel=n",
		"apply_patch=n",
		"TMPROOT=${TMPDIR:=/tmp}",
		"TARGET_OS=\"Linux\"",
		"TARGET_ARCH=\"x86_64\"",
		"",
		"#",
		"# NVIDIA Accelerated Graphics Driver for Linux-x86_64 " + s.Version,
		"# Generated by Makeself 1.6.0-nv4 (SYNTHETIC test archive)",
		"# Do not edit by hand.",
		"",
		"echo \"this is a synthetic test archive; running it is never right\"",
		"exit 1",
		"",
		"END_OF_STUB",
	}
	headerLines := 6 // #!, CRCsum, MD5, skip, skip_decompress, size_decompress
	skipDecompress := headerLines + len(stub) + 1
	sizeDecompress := strings.Count(decompressor, "\n")
	skip := skipDecompress + sizeDecompress
	var tail bytes.Buffer // line 4 on: what CRCsum and MD5 cover
	fmt.Fprintf(&tail, "skip=%d\nskip_decompress=%d\nsize_decompress=%d\n", skip, skipDecompress, sizeDecompress)
	tail.WriteString(strings.Join(stub, "\n") + "\n")
	tail.WriteString(decompressor)
	tail.Write(payload.Bytes())
	tail.WriteString("\n") // makeself's closing echo
	crc, sum := Cksum(tail.Bytes()), md5.Sum(tail.Bytes())
	md5hex := hex.EncodeToString(sum[:])
	crcText := fmt.Sprint(crc)
	if s.NoMD5 {
		md5hex = strings.Repeat("0", 32)
	}
	var out bytes.Buffer
	fmt.Fprintf(&out, "#! /bin/sh\nCRCsum=%s\nMD5=%s\n", crcText, md5hex)
	out.Write(tail.Bytes())
	return out.Bytes(), nil
}

// Cksum is POSIX cksum(1) of b, written independently of the package under test.
func Cksum(b []byte) uint32 {
	var crc uint32
	step := func(c byte) {
		crc ^= uint32(c) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04C11DB7
			} else {
				crc <<= 1
			}
		}
	}
	for _, c := range b {
		step(c)
	}
	for n := len(b); n > 0; n >>= 8 {
		step(byte(n))
	}
	return ^crc
}
