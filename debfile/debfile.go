// Package debfile reads Debian binary packages (.deb): an ar archive holding
// debian-binary, control.tar.* and data.tar.*. Stages use it to unpack pinned inputs
// without dpkg, and without running maintainer scripts.
package debfile

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

const arMagic = "!<arch>\n"

// maxMember bounds an ar member's declared size so corrupt headers fail cleanly.
const maxMember = 64 << 30

// Member is one file of the ar archive.
type Member struct {
	Name    string
	Size    int64
	ModTime int64 // seconds since the epoch, from the ar header
	r       io.Reader
}

// Reader walks a .deb's ar members.
type Reader struct {
	br   *bufio.Reader
	left int64 // unread bytes of the current member
	pad  bool
}

// NewReader checks the ar magic.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(arMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != arMagic {
		return nil, fmt.Errorf("not a .deb: missing ar header")
	}
	return &Reader{br: br}, nil
}

// Next returns the next member; io.EOF after the last.
func (d *Reader) Next() (*Member, error) {
	if _, err := io.CopyN(io.Discard, d.br, d.left); err != nil {
		return nil, fmt.Errorf("ar: truncated member: %w", err)
	}
	if d.pad {
		if _, err := d.br.ReadByte(); err != nil {
			return nil, fmt.Errorf("ar: truncated padding: %w", err)
		}
	}
	hdr := make([]byte, 60)
	if _, err := io.ReadFull(d.br, hdr); err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("ar: truncated header: %w", err)
	}
	if string(hdr[58:60]) != "`\n" {
		return nil, fmt.Errorf("ar: bad header terminator")
	}
	name := strings.TrimRight(strings.TrimSpace(string(hdr[0:16])), "/")
	size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
	if err != nil || size < 0 || size > maxMember {
		return nil, fmt.Errorf("ar: member %q: bad size %q", name, strings.TrimSpace(string(hdr[48:58])))
	}
	mtime, _ := strconv.ParseInt(strings.TrimSpace(string(hdr[16:28])), 10, 64)
	d.left, d.pad = size, size%2 == 1
	return &Member{Name: name, Size: size, ModTime: mtime, r: &memberReader{d}}, nil
}

type memberReader struct{ d *Reader }

func (m *memberReader) Read(p []byte) (int, error) {
	if m.d.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > m.d.left {
		p = p[:m.d.left]
	}
	n, err := m.d.br.Read(p)
	m.d.left -= int64(n)
	if err == io.EOF && m.d.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (m *Member) Read(p []byte) (int, error) { return m.r.Read(p) }

// Decompress wraps r according to a tar member's file name suffix.
func Decompress(name string, r io.Reader) (io.ReadCloser, error) {
	switch {
	case strings.HasSuffix(name, ".xz"):
		x, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return io.NopCloser(x), nil
	case strings.HasSuffix(name, ".zst"):
		z, err := zstd.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return z.IOReadCloser(), nil
	case strings.HasSuffix(name, ".gz"):
		g, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return g, nil
	case strings.HasSuffix(name, ".tar"):
		return io.NopCloser(r), nil
	}
	return nil, fmt.Errorf("%s: unsupported compression", name)
}

// DataTime is the modification time dpkg-deb gave the data.tar member: the
// package's build date (clamped to its SOURCE_DATE_EPOCH), read from headers only.
func DataTime(r io.Reader) (int64, error) {
	d, err := NewReader(r)
	if err != nil {
		return 0, err
	}
	for {
		m, err := d.Next()
		if err != nil {
			if err == io.EOF {
				return 0, fmt.Errorf("no data.tar member in the .deb")
			}
			return 0, err
		}
		if strings.HasPrefix(m.Name, "data.tar") {
			return m.ModTime, nil
		}
	}
}

// Data opens the package's data.tar.* and calls fn for each tar entry.
func Data(r io.Reader, fn func(h *tar.Header, body io.Reader) error) error {
	return member(r, "data.tar", fn)
}

// ErrNoFile is returned by DataFile for a path the package does not ship.
var ErrNoFile = errors.New("no such file in the package")

// DataFile returns the contents of the regular file at path (without the
// leading "./") in the package's data.tar.*.
func DataFile(r io.Reader, path string) ([]byte, error) {
	var data []byte
	err := Data(r, func(h *tar.Header, body io.Reader) error {
		if data == nil && h.Typeflag == tar.TypeReg && strings.TrimPrefix(h.Name, "./") == path {
			b, err := io.ReadAll(body)
			data = b
			return err
		}
		return nil
	})
	if err == nil && data == nil {
		err = fmt.Errorf("/%s: %w", path, ErrNoFile)
	}
	return data, err
}

// Control opens control.tar.* and returns the control file's bytes.
func Control(r io.Reader) ([]byte, error) {
	var out []byte
	err := member(r, "control.tar", func(h *tar.Header, body io.Reader) error {
		if strings.TrimPrefix(h.Name, "./") == "control" {
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, io.LimitReader(body, 1<<20)); err != nil {
				return err
			}
			out = buf.Bytes()
		}
		return nil
	})
	if err == nil && out == nil {
		err = fmt.Errorf("control.tar has no control file")
	}
	return out, err
}

func member(r io.Reader, prefix string, fn func(h *tar.Header, body io.Reader) error) error {
	d, err := NewReader(r)
	if err != nil {
		return err
	}
	for {
		m, err := d.Next()
		if err == io.EOF {
			return fmt.Errorf("no %s.* member in the .deb", prefix)
		}
		if err != nil {
			return err
		}
		if !strings.HasPrefix(m.Name, prefix) {
			continue
		}
		dec, err := Decompress(m.Name, m)
		if err != nil {
			return err
		}
		defer dec.Close()
		tr := tar.NewReader(dec)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if err := fn(h, tr); err != nil {
				return err
			}
		}
	}
}
