package nvrun

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// The error classes Unpack's errors wrap, for callers and tests (errors.Is).
var (
	ErrSHA256    = errors.New("sha256 differs from the pin")
	ErrTruncated = errors.New("truncated")
	ErrCorrupt   = errors.New("corrupt")
	ErrVersion   = errors.New("wrong driver version")
	ErrMissing   = errors.New("missing file")
)

var versionRe = regexp.MustCompile(`^[0-9]+\.[0-9]+(\.[0-9]+)?$`)

// Kind says what a taken file is; the caller decides where each kind goes.
type Kind string

const (
	KindLib      Kind = "lib"      // a shared library, e.g. libcuda.so.580.142
	KindLink     Kind = "link"     // a soname link beside the libraries, e.g. libcuda.so.1
	KindBinary   Kind = "binary"   // nvidia-smi
	KindFirmware Kind = "firmware" // a GSP image; Name is relative to /lib/firmware/nvidia/<version>/
)

// File is one file the image takes from the installer.
type File struct {
	Kind Kind
	Name string      // file name (firmware: path under the version's directory)
	Mode fs.FileMode // from the manifest; links: 0
	Link string      // a link's target, a file name in the same directory
	Src  string      // where the bytes of a regular file are staged
	Size int64
}

// Libraries are the shared libraries the image takes, by the name before ".so.":
// the CUDA driver API, NVML, and the PTX JIT compiler libcuda loads for PTX.
var Libraries = []string{"libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"}

// Binaries are the executables the image takes.
var Binaries = []string{"nvidia-smi"}

var (
	libRe      = regexp.MustCompile(`^(libcuda|libnvidia-ml|libnvidia-ptxjitcompiler)\.so\.([0-9]+\.[0-9]+(?:\.[0-9]+)?)$`)
	sonameRe   = regexp.MustCompile(`^(libcuda|libnvidia-ml|libnvidia-ptxjitcompiler)\.so\.[0-9]+$`)
	firmwareRe = regexp.MustCompile(`^firmware/gsp_[A-Za-z0-9_.-]+\.bin$`)
)

// Options tune Unpack.
type Options struct {
	SHA256  string // the pin of the file; "" = not checked here
	Version string // driver.version: the one version the files may carry (required)
	Scratch string // where taken files are staged; "" = the system's temporary directory
	Limits  Limits // bounds on what the file may make Unpack decompress and stage; zeros: DefaultLimits
}

// Unpacked is what Unpack took; Close removes the staged bytes.
type Unpacked struct {
	Version     string
	Label       string
	Compression string
	Files       []File // sorted by kind, then name
	dir         string
}

// Close removes the staging directory.
func (u *Unpacked) Close() error { return os.RemoveAll(u.dir) }

// Unpack reads the installer at file, checks it (the pin, the header, the header's
// CRC and MD5, the manifest's version against opt.Version) and stages exactly the
// files the image needs. It never runs any part of the file. Every size the file
// declares is checked against opt.Limits and the file's size before anything is
// allocated or written for it, and files are streamed to Scratch, never held in
// memory. On error nothing is left behind.
func Unpack(ctx context.Context, file string, opt Options) (_ *Unpacked, err error) {
	name := filepath.Base(file)
	defer func() {
		if err != nil {
			err = fmt.Errorf("NVIDIA installer %s: %w", name, err)
		}
	}()
	if !versionRe.MatchString(opt.Version) {
		return nil, fmt.Errorf("want the driver version to check against (driver.version), got %q", opt.Version)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if opt.SHA256 != "" {
		h := sha256.New()
		if _, err := io.Copy(h, &ctxReader{ctx, f}); err != nil {
			return nil, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != opt.SHA256 {
			return nil, fmt.Errorf("%w: want %s (the recipe's userspace.installer.sha256), got %s: not the file the recipe pins", ErrSHA256, opt.SHA256, got)
		}
	}
	head := make([]byte, min(size, HeaderLimit))
	if _, err := f.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	h, err := ParseHeader(head)
	if err != nil {
		return nil, err
	}
	if int64(h.Skip) > size {
		// Line n starts after at least n-1 bytes: said before reading the file through.
		return nil, fmt.Errorf("%w: the header puts the payload at line %d, past the file's %d bytes", ErrTruncated, h.Skip, size)
	}
	if h.VersionString != "" && h.VersionString != opt.Version {
		return nil, fmt.Errorf("%w: the header's version_string is %s, driver.version is %s: the userspace must match the kernel driver exactly", ErrVersion, h.VersionString, opt.Version)
	}
	offs, lines, err := lineOffsets(&ctxReader{ctx, io.NewSectionReader(f, 0, size)}, h.CheckFrom, h.Skip)
	if err != nil {
		return nil, err
	}
	if offs[h.Skip] < 0 {
		return nil, fmt.Errorf("%w: the header puts the payload at line %d, but the file ends at line %d (%d bytes)", ErrTruncated, h.Skip, lines, size)
	}
	dir, err := os.MkdirTemp(opt.Scratch, "nvrun-")
	if err != nil {
		return nil, err
	}
	u := &Unpacked{Version: opt.Version, Label: h.Label, dir: dir}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()

	// One pass: from the first checked line on, every byte feeds the CRC and MD5;
	// from the payload line on it also feeds the decompressor.
	start := offs[h.Skip]
	if h.CheckFrom > 0 {
		start = offs[h.CheckFrom]
	}
	sum, crc := md5.New(), &cksum{}
	src := &eofReader{r: &ctxReader{ctx, io.NewSectionReader(f, start, size-start)}}
	raw := io.TeeReader(src, io.MultiWriter(sum, crc))
	if _, err := io.CopyN(io.Discard, raw, offs[h.Skip]-start); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(raw, 1<<20)
	lim := opt.Limits.withDefaults()
	payload := size - offs[h.Skip]
	bud := &budget{lim: lim, bound: lim.payloadBound(payload), payload: payload}
	manifest, staged, err := readPayload(br, u, dir, bud)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		if src.eof {
			return nil, fmt.Errorf("%w: the payload ends before its archive does (%d bytes): %v", ErrTruncated, size, err)
		}
		return nil, fmt.Errorf("%w: payload (%s): %v", ErrCorrupt, u.Compression, err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, err
	}
	if h.CheckFrom > 0 {
		if got := crc.Sum32(); got != h.CRC {
			return nil, fmt.Errorf("%w: cksum of lines %d.. is %d, the header's CRCsum is %d", ErrCorrupt, h.CheckFrom, got, h.CRC)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); h.MD5 != "" && got != h.MD5 {
			return nil, fmt.Errorf("%w: MD5 of lines %d.. is %s, the header's MD5 is %s", ErrCorrupt, h.CheckFrom, got, h.MD5)
		}
	}
	if manifest == nil {
		return nil, fmt.Errorf("%w: the payload has no .manifest", ErrMissing)
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	if u.Files, err = take(m, staged, opt.Version); err != nil {
		return nil, err
	}
	return u, nil
}

// readPayload walks the payload's tar, keeping .manifest and staging every file
// whose name the image might take.
func readPayload(br *bufio.Reader, u *Unpacked, dir string, bud *budget) ([]byte, map[string]staged, error) {
	dec, err := decompressor(br, u, bud.lim)
	if err != nil {
		return nil, nil, err
	}
	defer dec.Close()
	bud.r = dec
	tr := tar.NewReader(bud)
	var manifest []byte
	files := map[string]staged{}
	for {
		hd, err := tr.Next()
		if err == io.EOF {
			return manifest, files, nil
		}
		if err != nil {
			return nil, nil, err
		}
		p := strings.TrimPrefix(path.Clean(hd.Name), "./")
		if hd.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case p == ".manifest":
			if manifest != nil {
				return nil, nil, fmt.Errorf(".manifest appears twice")
			}
			if err := bud.admit(".manifest", hd.Size, maxManifest, false); err != nil {
				return nil, nil, err
			}
			if manifest, err = io.ReadAll(io.LimitReader(tr, maxManifest+1)); err != nil {
				return nil, nil, err
			}
		case libRe.MatchString(p) || slices.Contains(Binaries, p) || firmwareRe.MatchString(p):
			if _, dup := files[p]; dup {
				return nil, nil, fmt.Errorf("%s appears twice", p)
			}
			if err := bud.admit(p, hd.Size, bud.lim.File, true); err != nil {
				return nil, nil, err
			}
			dst := filepath.Join(dir, strings.ReplaceAll(p, "/", "__"))
			n, err := stage(tr, dst, hd.Size)
			if err != nil {
				return nil, nil, err
			}
			files[p] = staged{path: dst, size: n}
		}
	}
}

type staged struct {
	path string
	size int64
}

// stage streams exactly size bytes (the entry's declared, admitted size) to dst.
func stage(r io.Reader, dst string, size int64) (int64, error) {
	w, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyN(w, r, size)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return n, err
}

type nopCloser struct{ io.Reader }

func (nopCloser) Close() error { return nil }

// decompressor picks the payload's decompressor by its magic bytes. A window
// or dictionary the stream declares past lim.Window is refused before the
// decoder allocates it (xz: the first block's; zstd: every frame's, by the
// decoder's own bound; gzip and bzip2 have small fixed ones).
func decompressor(br *bufio.Reader, u *Unpacked, lim Limits) (io.ReadCloser, error) {
	magic, _ := br.Peek(512)
	switch {
	case bytes.HasPrefix(magic, []byte{0xFD, '7', 'z', 'X', 'Z', 0x00}):
		u.Compression = "xz"
		// Peek only as far as the block header goes: reading past the payload's
		// end here would make a corrupt payload look truncated.
		hdr := magic
		if len(magic) > 12 {
			hdr, _ = br.Peek(13 + int(magic[12])*4 + 3)
		}
		if d, ok := xzDict(hdr); ok && d > lim.Window {
			return nil, fmt.Errorf("%w: the xz stream declares a %d-byte dictionary, more than %d", ErrTooLarge, d, lim.Window)
		}
		r, err := xz.ReaderConfig{SingleStream: true}.NewReader(br)
		return nopCloser{r}, err
	case bytes.HasPrefix(magic, []byte{0x28, 0xB5, 0x2F, 0xFD}):
		u.Compression = "zstd"
		r, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(uint64(lim.Window)), zstd.WithDecoderMaxMemory(uint64(lim.Window)))
		if err != nil {
			return nil, err
		}
		return r.IOReadCloser(), nil
	case bytes.HasPrefix(magic, []byte{0x1F, 0x8B}):
		u.Compression = "gzip"
		r, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		r.Multistream(false)
		return r, nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		u.Compression = "bzip2"
		return nopCloser{bzip2.NewReader(br)}, nil
	case len(magic) == 512 && bytes.Equal(magic[257:262], []byte("ustar")):
		u.Compression = "none"
		return nopCloser{br}, nil
	}
	u.Compression = "unknown"
	return nil, fmt.Errorf("the payload starts with % x: not xz, zstd, gzip, bzip2 or tar", magic[:min(len(magic), 6)])
}

// take selects the image's files from the manifest: exactly one version, every
// wanted file present in the payload.
func take(m *Manifest, staged map[string]staged, version string) ([]File, error) {
	if m.Version != version {
		return nil, fmt.Errorf("%w: .manifest line 2 says %s, driver.version is %s: the userspace must match the kernel driver exactly", ErrVersion, m.Version, version)
	}
	for _, e := range m.Entries {
		if e.Unknown && (libRe.MatchString(e.File) || sonameRe.MatchString(e.File) || slices.Contains(Binaries, e.File) || firmwareRe.MatchString(e.File)) {
			return nil, fmt.Errorf(".manifest line %d: %s has file type %s, which this peerboot does not know: it cannot tell that line's fields apart", e.Line, e.File, e.Type)
		}
	}
	var out []File
	native := func(e Entry) bool { return !e.Unknown && e.Arch != "COMPAT32" && !strings.Contains(e.File, "/") }
	libs := map[string]Entry{} // by file name
	for _, e := range m.Entries {
		if !native(e) {
			continue
		}
		if sm := libRe.FindStringSubmatch(e.File); sm != nil && e.Target == "" {
			if sm[2] != m.Version {
				return nil, fmt.Errorf("%w: two versions in one .manifest: %s (line 2) and %s (line %d: %s); an image carries exactly one", ErrVersion, m.Version, sm[2], e.Line, e.File)
			}
			libs[e.File] = e
		}
	}
	for _, lib := range Libraries {
		file := lib + ".so." + version
		e, ok := libs[file]
		if !ok {
			return nil, fmt.Errorf("%w: the .manifest lists no %s", ErrMissing, file)
		}
		s, ok := staged[file]
		if !ok {
			return nil, fmt.Errorf("%w: .manifest line %d lists %s, but the payload has no such file", ErrMissing, e.Line, file)
		}
		out = append(out, File{Kind: KindLib, Name: file, Mode: e.Mode, Src: s.path, Size: s.size})
	}
	// Soname links, as the manifest declares them, to a taken library.
	links := map[string]bool{}
	for _, e := range m.Entries {
		if !native(e) || e.Target == "" || !sonameRe.MatchString(e.File) {
			continue
		}
		if _, ok := libs[e.Target]; !ok {
			return nil, fmt.Errorf("%w: .manifest line %d links %s to %s, which is not a %s library it lists", ErrVersion, e.Line, e.File, e.Target, version)
		}
		out = append(out, File{Kind: KindLink, Name: e.File, Link: e.Target})
		links[strings.SplitN(e.File, ".so.", 2)[0]] = true
	}
	for _, lib := range Libraries {
		if !links[lib] {
			return nil, fmt.Errorf("%w: the .manifest gives %s.so.%s no soname link (%s.so.1)", ErrMissing, lib, version, lib)
		}
	}
	for _, bin := range Binaries {
		i := slices.IndexFunc(m.Entries, func(e Entry) bool { return e.File == bin && e.Target == "" })
		if i < 0 {
			return nil, fmt.Errorf("%w: the .manifest lists no %s", ErrMissing, bin)
		}
		s, ok := staged[bin]
		if !ok {
			return nil, fmt.Errorf("%w: .manifest line %d lists %s, but the payload has no such file", ErrMissing, m.Entries[i].Line, bin)
		}
		out = append(out, File{Kind: KindBinary, Name: bin, Mode: m.Entries[i].Mode, Src: s.path, Size: s.size})
	}
	nfw := 0
	for _, e := range m.Entries {
		if e.Unknown || e.Type != "FIRMWARE" || !firmwareRe.MatchString(e.File) {
			continue
		}
		s, ok := staged[e.File]
		if !ok {
			return nil, fmt.Errorf("%w: .manifest line %d lists %s, but the payload has no such file", ErrMissing, e.Line, e.File)
		}
		out = append(out, File{Kind: KindFirmware, Name: e.InstallPath(), Mode: e.Mode, Src: s.path, Size: s.size})
		nfw++
	}
	if nfw == 0 {
		return nil, fmt.Errorf("%w: the .manifest lists no GSP firmware (firmware/gsp_*.bin): the open kernel modules cannot start the GPU without it", ErrMissing)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// lineOffsets finds the byte offsets where the given 1-based lines start; -1 for
// a line past the end. It also returns how many lines it saw.
func lineOffsets(r io.Reader, want ...int) (map[int]int64, int, error) {
	offs := map[int]int64{}
	last := 0
	for _, n := range want {
		offs[n] = -1
		last = max(last, n)
	}
	offs[1], offs[0] = 0, -1
	br := bufio.NewReaderSize(r, 64<<10)
	var pos int64
	line := 1
	for line < last {
		chunk, err := br.ReadSlice('\n')
		pos += int64(len(chunk))
		if err == nil {
			line++
			if _, ok := offs[line]; ok {
				offs[line] = pos
			}
			continue
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			break
		}
		return nil, 0, err
	}
	delete(offs, 0)
	return offs, line, nil
}

// eofReader remembers whether the file ran out under the decompressor: a
// payload that fails there is truncated, one that fails earlier is corrupt.
type eofReader struct {
	r   io.Reader
	eof bool
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		e.eof = true
	}
	return n, err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
