package apt

import (
	"bytes"
	"strings"
	"testing"
)

const sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func stanza(fields ...string) string {
	return strings.Join(fields, "\n") + "\n"
}

func TestParsePackages(t *testing.T) {
	full := stanza(
		"Package: nvidia-open-kernel-source",
		"Source: nvidia-open-gpu-kernel-modules (535.247.01-1)",
		"Version: 535.247.01-1",
		"Architecture: amd64",
		"Pre-Depends: dpkg (>= 1.17)",
		"Depends: debhelper,",
		" dkms | module-assistant",
		"Provides: nvidia-kernel-source (= 535)",
		"Multi-Arch: foreign",
		"Description: NVIDIA open kernel module source",
		" a long description",
		" .",
		" more",
		"Filename: pool/contrib/n/nvidia/nvidia-open-kernel-source_535.247.01-1_amd64.deb",
		"Size: 1234",
		"SHA256: "+strings.ToUpper(sumA),
	)
	minimal := stanza("Package: tiny", "Version: 1.0", "Architecture: all",
		"Filename: pool/main/t/tiny/tiny_1.0_all.deb", "Size: 0", "SHA256: "+sumA)
	tests := []struct {
		name    string
		in      string
		want    []Package
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "blank lines only", in: "\n\n  \n", want: nil},
		{name: "full stanza", in: full, want: []Package{{
			Name: "nvidia-open-kernel-source", Version: "535.247.01-1", Architecture: "amd64",
			Source: "nvidia-open-gpu-kernel-modules", Component: "contrib", Repo: "bookworm",
			Filename: "pool/contrib/n/nvidia/nvidia-open-kernel-source_535.247.01-1_amd64.deb",
			Size:     1234, SHA256: sumA, PreDepends: "dpkg (>= 1.17)", Depends: "debhelper,\ndkms | module-assistant",
			Provides: "nvidia-kernel-source (= 535)", MultiArch: "foreign",
		}}},
		{name: "two stanzas, CRLF, extra blank lines", in: strings.ReplaceAll(minimal+"\n\n"+minimal, "\n", "\r\n"),
			want: []Package{
				{Name: "tiny", Version: "1.0", Architecture: "all", Source: "tiny", Component: "contrib", Repo: "bookworm",
					Filename: "pool/main/t/tiny/tiny_1.0_all.deb", SHA256: sumA},
				{Name: "tiny", Version: "1.0", Architecture: "all", Source: "tiny", Component: "contrib", Repo: "bookworm",
					Filename: "pool/main/t/tiny/tiny_1.0_all.deb", SHA256: sumA},
			}},
		{name: "case-insensitive keys", in: strings.Replace(minimal, "Package:", "package:", 1),
			want: []Package{{Name: "tiny", Version: "1.0", Architecture: "all", Source: "tiny", Component: "contrib",
				Repo: "bookworm", Filename: "pool/main/t/tiny/tiny_1.0_all.deb", SHA256: sumA}}},
		{name: "missing sha256", in: strings.Replace(minimal, "SHA256: "+sumA+"\n", "", 1), wantErr: `package "tiny" (line 1): missing or invalid SHA256`},
		{name: "bad size", in: strings.Replace(minimal, "Size: 0", "Size: -3", 1), wantErr: "invalid Size"},
		{name: "bad version", in: strings.Replace(minimal, "Version: 1.0", "Version: a b", 1), wantErr: "invalid Version"},
		{name: "escaping filename", in: strings.Replace(minimal, "pool/main", "../etc", 1), wantErr: "not a plain path"},
		{name: "absolute filename", in: strings.Replace(minimal, "pool/main", "/pool/main", 1), wantErr: "not a plain path"},
		{name: "missing package", in: strings.Replace(minimal, "Package: tiny\n", "", 1), wantErr: "stanza at line 1: missing or invalid Package"},
		{name: "garbage line", in: "Package: a\nthis is not a field\n", wantErr: "line 2: expected"},
		{name: "leading continuation", in: " orphan\n", wantErr: "continuation line outside any field"},
		{name: "second stanza bad", in: minimal + "\n" + strings.Replace(minimal, "Size: 0", "Size: x", 1), wantErr: "line 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePackages(strings.NewReader(tt.in), "bookworm", "contrib")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d packages, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("package %d:\n got %+v\nwant %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParsePackagesLongLine(t *testing.T) {
	in := "Package: a\nDescription: " + strings.Repeat("x", 2*maxLine) + "\n"
	if _, err := ParsePackages(strings.NewReader(in), "r", "c"); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("error = %v, want line too long", err)
	}
}

func FuzzParsePackages(f *testing.F) {
	f.Add([]byte(stanza("Package: tiny", "Version: 1:1.0-1", "Architecture: all",
		"Filename: pool/main/t/tiny/tiny_1.0_all.deb", "Size: 10", "SHA256: "+sumA, "Depends: a (>= 1) | b, c [i386]")))
	f.Add([]byte("Package: a\n b\n\n\nc: d\n"))
	f.Add([]byte(" x\n"))
	f.Add([]byte("#comment\nPackage: a\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pkgs, err := ParsePackages(bytes.NewReader(data), "r", "c")
		if err != nil {
			return
		}
		// Whatever parses must be safe to hand to the resolver and the fetcher.
		for _, p := range pkgs {
			if checkPoolPath(p.Filename) != nil || !isSHA256(p.SHA256) || p.Size < 0 || !validName(p.Name) {
				t.Fatalf("accepted invalid package %+v", p)
			}
		}
		idx := &Index{Repo: Repo{Name: "r"}, Packages: pkgs}
		var reqs []Request
		for _, p := range pkgs {
			reqs = append(reqs, Request{Name: p.Name})
		}
		_, _ = Resolve([]*Index{idx}, reqs, nil, "amd64")
	})
}
