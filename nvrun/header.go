// Package nvrun unpacks NVIDIA's driver installer (NVIDIA-Linux-x86_64-VER.run) in Go,
// never running it: it reads the makeself header for the payload's line, checks the
// header's CRC and MD5, decompresses the payload's tar, reads its .manifest and takes
// exactly the files a GPU node image needs (libcuda, libnvidia-ml, the PTX JIT
// compiler, nvidia-smi, the GSP firmware) with their soname links.
//
// The header form is NVIDIA's own makeself (1.6.0-nv2 .. -nv4, the script NVIDIA
// ships inside the driver tree): line 1 "#! /bin/sh", line 2 CRCsum=<POSIX cksum>,
// line 3 MD5=<md5> (both over the file from line 4 on, as `tail -n +4 | cksum`),
// line 4 skip=<line the payload starts at>, then skip_decompress and size_decompress
// (an embedded decompressor between the stub and the payload), label, version_string
// and the rest of the stub. The payload is a tar compressed with xz (-C none), zstd,
// gzip or bzip2.
package nvrun

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Header is what the makeself header says about the archive.
type Header struct {
	Skip           int    // 1-based line the compressed payload starts at (`tail -n +Skip`)
	SkipDecompress int    // line the embedded decompressor starts at; 0 when absent
	SizeDecompress int    // its length in lines
	Label          string // e.g. "NVIDIA Accelerated Graphics Driver for Linux-x86_64 580.142"
	VersionString  string // e.g. "580.142"; "" when the header has none
	TargetDir      string
	CRC            uint32 // POSIX cksum of the file from line CheckFrom on
	HasCRC         bool
	MD5            string // hex; "" when absent or all zeros (makeself's "none")
	// CheckFrom is the first line CRC and MD5 cover: the line after the
	// CRCsum= and MD5= lines (4 in NVIDIA's makeself).
	CheckFrom int
	Lines     int // assignment lines read (the header block)
}

// HeaderLimit is how many bytes of the file the header must fit in.
const HeaderLimit = 64 << 10

// maxSkip bounds skip=: NVIDIA's stub plus decompressor are a few thousand lines.
const maxSkip = 1 << 20

var (
	assignRe = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)
	md5Re    = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// HeaderError is a header that is not NVIDIA's makeself form.
type HeaderError struct {
	Line int
	Msg  string
}

func (e *HeaderError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("bad makeself header: line %d: %s", e.Line, e.Msg)
	}
	return "bad makeself header: " + e.Msg
}

// ParseHeader reads the header block at the start of b (the file's first bytes, at
// most HeaderLimit): the shebang, then key=value lines up to the first line that is
// not one.
func ParseHeader(b []byte) (*Header, error) {
	if len(b) > HeaderLimit {
		b = b[:HeaderLimit]
	}
	bad := func(line int, format string, args ...any) error {
		return &HeaderError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, bad(1, "no complete first line in the first %d bytes: not a makeself archive", len(b))
	}
	if first := string(b[:nl]); !strings.HasPrefix(first, "#!") || !strings.Contains(first, "sh") {
		return nil, bad(1, "want a shell script's \"#! /bin/sh\", got %q: not a makeself archive", clip(first))
	}
	h := &Header{}
	rest := b[nl+1:]
	seen := map[string]int{}
	crcLine, md5Line := 0, 0
	for line := 2; ; line++ {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			break // the block ran to the end of what we read
		}
		text := string(rest[:nl])
		rest = rest[nl+1:]
		m := assignRe.FindStringSubmatch(text)
		if m == nil {
			break
		}
		h.Lines = line
		key, val := m[1], unquote(m[2])
		if prev, dup := seen[key]; dup {
			return nil, bad(line, "%s= given twice (also line %d)", key, prev)
		}
		seen[key] = line
		var err error
		switch key {
		case "CRCsum":
			var v uint64
			v, err = strconv.ParseUint(val, 10, 32)
			h.CRC, h.HasCRC, crcLine = uint32(v), true, line
			if err != nil {
				return nil, bad(line, "CRCsum: want a decimal cksum, got %q", clip(val))
			}
		case "MD5":
			if !md5Re.MatchString(val) {
				return nil, bad(line, "MD5: want 32 lower-case hex digits, got %q", clip(val))
			}
			md5Line = line
			if val != strings.Repeat("0", 32) {
				h.MD5 = val
			}
		case "skip":
			h.Skip, err = lineNumber(val)
		case "skip_decompress":
			h.SkipDecompress, err = lineNumber(val)
		case "size_decompress":
			h.SizeDecompress, err = strconv.Atoi(val)
			if err == nil && (h.SizeDecompress < 0 || h.SizeDecompress > maxSkip) {
				err = fmt.Errorf("out of range")
			}
		case "label":
			h.Label = val
		case "version_string":
			h.VersionString = val
		case "targetdir":
			h.TargetDir = val
		}
		if err != nil {
			return nil, bad(line, "%s: want a line number (1..%d), got %q", key, maxSkip, clip(val))
		}
	}
	if _, ok := seen["skip"]; !ok {
		return nil, bad(0, "no skip= line in the header block (lines 2..%d): not NVIDIA's makeself form, which says where the payload starts", max(h.Lines, 2))
	}
	if h.Skip <= h.Lines {
		return nil, bad(seen["skip"], "skip=%d points into the header block itself (%d lines)", h.Skip, h.Lines)
	}
	if _, ok := seen["skip_decompress"]; ok {
		if h.SkipDecompress <= h.Lines || h.SkipDecompress+h.SizeDecompress != h.Skip {
			return nil, bad(seen["skip_decompress"], "skip_decompress=%d + size_decompress=%d must equal skip=%d, after the header block", h.SkipDecompress, h.SizeDecompress, h.Skip)
		}
	}
	if (crcLine > 0 || md5Line > 0) && (crcLine == 0 || md5Line == 0) {
		return nil, bad(max(crcLine, md5Line), "CRCsum= and MD5= come together in NVIDIA's makeself; one is missing")
	}
	if crcLine > 0 {
		h.CheckFrom = max(crcLine, md5Line) + 1
	}
	return h, nil
}

func lineNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSkip {
		return 0, fmt.Errorf("bad line number %q", s)
	}
	return n, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
