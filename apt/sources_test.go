package apt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Host names here are placeholders under the reserved .example domain.
const deb822Fixture = `# A comment before the first stanza
Types: deb
# a comment inside a stanza
URIs: http://m1.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://m1.example/debian-security/
Suites: bookworm-security
Components: main

Types: deb
URIs: http://m3.example/debian
Suites: trixie
Enabled: no
`

func TestSystemMirror(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string // relative to aptDir
		suite   string
		want    string
		wantErr string
	}{
		{name: "exact deb822", files: map[string]string{"sources.list.d/debian.sources": deb822Fixture},
			suite: "bookworm-updates", want: "http://m1.example/debian"},
		{name: "exact security, trailing slash trimmed", files: map[string]string{"sources.list.d/debian.sources": deb822Fixture},
			suite: "bookworm-security", want: "http://m1.example/debian-security"},
		{name: "derived plain suite", files: map[string]string{"sources.list.d/debian.sources": deb822Fixture},
			suite: "sid", want: "http://m1.example/debian"},
		{name: "derived security suite", files: map[string]string{"sources.list.d/debian.sources": deb822Fixture},
			suite: "trixie-security", want: "http://m1.example/debian-security"},
		{name: "disabled stanza ignored", files: map[string]string{"sources.list.d/debian.sources": deb822Fixture},
			suite: "trixie", want: "http://m1.example/debian"},
		{name: "one-line format with options", files: map[string]string{"sources.list": "# deb http://old.example/debian bookworm main\n" +
			"deb-src http://src.example/debian bookworm main\n" +
			"deb [ arch=amd64 signed-by=/k.gpg ] http://m2.example/debian bookworm main contrib # trailing\n"},
			suite: "bookworm", want: "http://m2.example/debian"},
		{name: "sources.list before sources.list.d", files: map[string]string{
			"sources.list":                  "deb http://m2.example/debian bookworm main\n",
			"sources.list.d/debian.sources": deb822Fixture},
			suite: "trixie", want: "http://m2.example/debian"},
		{name: "disabled-by-farm and third-party ignored", files: map[string]string{
			"sources.list.d/a-node.list":                       "deb https://node.example/node nodistro main\n",
			"sources.list.d/b.sources.disabled-by-farm":        "Types: deb\nURIs: http://bad.example/debian\nSuites: trixie\n",
			"sources.list.d/debian.sources":                    deb822Fixture,
			"sources.list.d/google-cloud-sdk.list.disabled-by": "deb http://bad.example/x cloud-sdk main\n"},
			suite: "trixie", want: "http://m1.example/debian"},
		{name: "non-http URIs skipped", files: map[string]string{"sources.list": "deb cdrom:[Debian]/ bookworm main\ndeb file:/srv/debian bookworm main\n"},
			suite: "bookworm", wantErr: "sources.list"},
		{name: "security only cannot serve plain suite", files: map[string]string{
			"sources.list": "deb http://m1.example/debian-security bookworm-security main\n"},
			suite: "bookworm", wantErr: `no mirror for suite "bookworm"`},
		{name: "no files", files: map[string]string{}, suite: "bookworm", wantErr: "no apt sources files found"},
		{name: "malformed deb822 named", files: map[string]string{"sources.list.d/x.sources": "Types deb\n"},
			suite: "bookworm", wantErr: "x.sources"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := SystemMirror(dir, tt.suite)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("SystemMirror = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("SystemMirror = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func FuzzSystemMirror(f *testing.F) {
	f.Add([]byte(deb822Fixture), "trixie-security")
	f.Add([]byte("deb [arch=amd64] http://m.example/debian bookworm main\n"), "bookworm")
	f.Add([]byte("Types: deb\n URIs: x\n"), "sid")
	f.Fuzz(func(t *testing.T, data []byte, suite string) {
		a := ParseSourcesList(data)
		b, _ := ParseDeb822Sources(data)
		for _, es := range [][]SourceEntry{a, b} {
			if u, ok := PickMirror(es, suite); ok && !strings.HasPrefix(u, "http") {
				t.Fatalf("picked non-http URI %q", u)
			}
		}
	})
}
