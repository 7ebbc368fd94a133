package output

import (
	"bytes"
	"strings"
	"testing"
)

var (
	hexA = strings.Repeat("a", 64)
	hexB = strings.Repeat("0123456789abcdef", 4)
)

func TestParseSums(t *testing.T) {
	for _, c := range []struct {
		name, in, err string
		want          []Sum
	}{
		{"two", hexA + "  disk.img\n" + hexB + "  pxe/vmlinuz\n", "", []Sum{{hexA, "disk.img"}, {hexB, "pxe/vmlinuz"}}},
		{"empty", "", "empty or not ending in a newline", nil},
		{"no final newline", hexA + "  disk.img", "empty or not ending in a newline", nil},
		{"binary marker", hexA + " *disk.img\n", `SHA256SUMS:1: want "<64 lowercase hex>  PATH"`, nil},
		{"upper hex", strings.ToUpper(hexA) + "  disk.img\n", "SHA256SUMS:1: want", nil},
		{"short hash", "abc  disk.img\n", "SHA256SUMS:1: want", nil},
		{"not hex", strings.Repeat("g", 64) + "  disk.img\n", `SHA256SUMS:1: sha256 "gggg`, nil},
		{"absolute", hexA + "  /etc/passwd\n", `SHA256SUMS:1: path "/etc/passwd" is not a clean relative path`, nil},
		{"climbs", hexA + "  ../x\n", `path "../x" is not a clean relative path`, nil},
		{"unclean", hexA + "  pxe//vmlinuz\n", `path "pxe//vmlinuz" is not a clean`, nil},
		{"unsorted", hexA + "  pxe/vmlinuz\n" + hexB + "  disk.img\n", `SHA256SUMS:2: path "disk.img" is out of order or repeated`, nil},
		{"repeated", hexA + "  disk.img\n" + hexB + "  disk.img\n", `SHA256SUMS:2: path "disk.img" is out of order`, nil},
		{"blank line", hexA + "  disk.img\n\n", "SHA256SUMS:2: want", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSums([]byte(c.in))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("line %d: got %v, want %v", i+1, got[i], c.want[i])
				}
			}
			if out := FormatSums(got); string(out) != c.in {
				t.Errorf("FormatSums(ParseSums(x)) = %q, want %q", out, c.in)
			}
		})
	}
}

func TestFormatSumsSorts(t *testing.T) {
	got := FormatSums([]Sum{{hexB, "pxe/vmlinuz"}, {hexA, ManifestFile}, {hexA, DiskFile}})
	want := hexA + "  disk.img\n" + hexA + "  manifest.json\n" + hexB + "  pxe/vmlinuz\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	sums, _ := ParseSums(got)
	if h, ok := Lookup(sums, "pxe/vmlinuz"); !ok || h != hexB {
		t.Errorf("Lookup(pxe/vmlinuz) = %q, %v", h, ok)
	}
	if _, ok := Lookup(sums, "vmlinuz"); ok {
		t.Error("Lookup(vmlinuz) found a path SHA256SUMS does not list")
	}
}

// FuzzParseSums: SHA256SUMS comes from outside (a pulled or copied output
// directory). Whatever ParseSums accepts, FormatSums writes back byte for byte.
func FuzzParseSums(f *testing.F) {
	f.Add([]byte(hexA + "  disk.img\n" + hexB + "  pxe/vmlinuz\n"))
	f.Add([]byte(hexA + " *disk.img\n"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sums, err := ParseSums(b)
		if err != nil {
			return
		}
		if out := FormatSums(sums); !bytes.Equal(out, b) {
			t.Fatalf("FormatSums(ParseSums(%q)) = %q", b, out)
		}
	})
}
