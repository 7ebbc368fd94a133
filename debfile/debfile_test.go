package debfile

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/peerboot/peerboot/debfile/debtest"
)

func buildDeb(t testing.TB, files map[string]string) []byte {
	var entries []debtest.Entry
	for _, name := range []string{"./usr/lib/libcuda.so.1", "./usr/share/doc/x"} {
		if body, ok := files[name]; ok {
			entries = append(entries, debtest.Entry{Name: name, Body: body})
		}
	}
	return debtest.Build("libcuda1", entries)
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

func TestDataFile(t *testing.T) {
	deb := buildDeb(t, map[string]string{"./usr/lib/libcuda.so.1": "ELF", "./usr/share/doc/x": "odd"})
	if b, err := DataFile(bytes.NewReader(deb), "usr/lib/libcuda.so.1"); err != nil || string(b) != "ELF" {
		t.Errorf("got %q, %v", b, err)
	}
	if _, err := DataFile(bytes.NewReader(deb), "usr/lib/absent"); !errors.Is(err, ErrNoFile) {
		t.Errorf("absent file: %v, want ErrNoFile", err)
	}
}
