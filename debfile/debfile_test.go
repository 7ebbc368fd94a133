package debfile

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"testing"
)

// buildDeb writes a minimal .deb in memory: the ar layout dpkg-deb produces.
func buildDeb(t testing.TB, files map[string]string) []byte {
	tarGz := func(fs map[string]string) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, name := range []string{"./control", "./usr/lib/libcuda.so.1", "./usr/share/doc/x"} {
			body, ok := fs[name]
			if !ok {
				continue
			}
			tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
			tw.Write([]byte(body))
		}
		tw.Close()
		gz.Close()
		return buf.Bytes()
	}
	var ar bytes.Buffer
	ar.WriteString(arMagic)
	add := func(name string, data []byte) {
		fmt.Fprintf(&ar, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", name, 0, 0, 0, "100644", len(data))
		ar.Write(data)
		if len(data)%2 == 1 {
			ar.WriteByte('\n')
		}
	}
	add("debian-binary", []byte("2.0\n"))
	add("control.tar.gz", tarGz(map[string]string{"./control": "Package: libcuda1\n"}))
	add("data.tar.gz", tarGz(files))
	return ar.Bytes()
}

func TestDataAndControl(t *testing.T) {
	deb := buildDeb(t, map[string]string{"./usr/lib/libcuda.so.1": "ELF", "./usr/share/doc/x": "odd"})
	var names []string
	err := Data(bytes.NewReader(deb), func(h *tar.Header, body io.Reader) error {
		b, _ := io.ReadAll(body)
		names = append(names, h.Name+"="+string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[./usr/lib/libcuda.so.1=ELF ./usr/share/doc/x=odd]" {
		t.Fatalf("got %v", names)
	}
	ctl, err := Control(bytes.NewReader(deb))
	if err != nil || string(ctl) != "Package: libcuda1\n" {
		t.Fatalf("control %q %v", ctl, err)
	}
}

func TestRejects(t *testing.T) {
	for name, data := range map[string][]byte{
		"empty":     nil,
		"not ar":    []byte("PK\x03\x04 a zip file"),
		"truncated": buildDeb(t, map[string]string{"./usr/lib/libcuda.so.1": "ELF"})[:100],
		"no data":   []byte(arMagic),
	} {
		if err := Data(bytes.NewReader(data), func(*tar.Header, io.Reader) error { return nil }); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzData(f *testing.F) {
	f.Add(buildDeb(f, map[string]string{"./usr/lib/libcuda.so.1": "ELF"}))
	f.Add([]byte(arMagic + "data.tar.gz/    0           0     0     100644  5         `\nhello"))
	f.Fuzz(func(t *testing.T, data []byte) {
		Data(bytes.NewReader(data), func(h *tar.Header, body io.Reader) error {
			_, err := io.Copy(io.Discard, io.LimitReader(body, 1<<20))
			return err
		})
	})
}
