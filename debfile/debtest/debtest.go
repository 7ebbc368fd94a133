// Package debtest builds small .deb files in memory for tests of the stages that
// unpack packages. The layout is what dpkg-deb writes: an ar archive holding
// debian-binary, control.tar.gz and data.tar.gz.
package debtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
)

// Entry is one data.tar entry: a file (Body), a directory (Dir), a symlink
// (Symlink) or a hardlink (Hardlink, to an earlier entry's name).
type Entry struct {
	Name     string
	Body     string
	Mode     int64
	Dir      bool
	Symlink  string
	Hardlink string
}

// Build returns the bytes of a .deb for package name with the given data entries.
func Build(name string, entries []Entry) []byte {
	control := tarGz([]Entry{{Name: "./control", Body: "Package: " + name + "\n", Mode: 0o644}})
	data := tarGz(entries)
	var ar bytes.Buffer
	ar.WriteString("!<arch>\n")
	add := func(member string, b []byte) {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", member, 1700000000, 0, 0, "100644", len(b))
		ar.Write(b)
		if len(b)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	add("debian-binary", []byte("2.0\n"))
	add("control.tar.gz", control)
	add("data.tar.gz", data)
	return ar.Bytes()
}

func tarGz(entries []Entry) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Mode: e.Mode, Typeflag: tar.TypeReg, Size: int64(len(e.Body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		switch {
		case e.Dir:
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		case e.Symlink != "":
			h.Typeflag, h.Linkname, h.Size, h.Mode = tar.TypeSymlink, e.Symlink, 0, 0o777
		case e.Hardlink != "":
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, e.Hardlink, 0
		}
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.Body))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}
