package apt

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ulikunitz/xz"
)

func newKey(t *testing.T, name string) *openpgp.Entity {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", name+"@example.invalid", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// writeKeyring writes e's public key to a file, armored or binary.
func writeKeyring(t *testing.T, e *openpgp.Entity, armored bool) string {
	t.Helper()
	var buf bytes.Buffer
	w := io.Writer(&buf)
	var aw io.WriteCloser
	if armored {
		var err error
		if aw, err = armor.Encode(&buf, openpgp.PublicKeyType, nil); err != nil {
			t.Fatal(err)
		}
		w = aw
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if aw != nil {
		aw.Close()
	}
	path := filepath.Join(t.TempDir(), "keyring.gpg")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func clearsignText(t *testing.T, e *openpgp.Entity, text string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := clearsign.Encode(&buf, e.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, text); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func keyID(e *openpgp.Entity) string { return fmt.Sprintf("%X", e.PrimaryKey.Fingerprint) }

func TestVerifyClearsigned(t *testing.T) {
	good, other := newKey(t, "archive"), newKey(t, "stranger")
	ring := openpgp.EntityList{good}
	text := "Suite: bookworm\nDate: Sat, 10 May 2025 08:58:14 UTC\n"
	signed := clearsignText(t, good, text)
	tests := []struct {
		name    string
		raw     []byte
		wantErr string
	}{
		{name: "good signature", raw: signed},
		{name: "tampered body", raw: bytes.Replace(signed, []byte("bookworm"), []byte("bookwurm"), 1),
			wantErr: "bad signature from key " + keyID(good)},
		{name: "wrong key", raw: clearsignText(t, other, text),
			wantErr: "signed by key " + keyID(other) + ", which the keyring does not hold"},
		{name: "not signed", raw: []byte(text), wantErr: "not a clearsigned file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain, err := verifyClearsigned(tt.raw, ring, time.Now())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(plain) != strings.TrimSuffix(text, "\n") && string(plain) != text {
				t.Fatalf("plaintext = %q, want %q", plain, text)
			}
		})
	}
}

// fakeRepo serves a signed repository and logs the paths it is asked for.
type fakeRepo struct {
	t     *testing.T
	key   *openpgp.Entity
	files map[string][]byte // by URL path
	mu    sync.Mutex
	log   []string
	srv   *httptest.Server
}

func newFakeRepo(t *testing.T, key *openpgp.Entity) *fakeRepo {
	f := &fakeRepo{t: t, key: key, files: map[string][]byte{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.log = append(f.log, r.URL.Path)
		f.mu.Unlock()
		data, ok := f.files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeRepo) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := append([]string(nil), f.log...)
	f.log = nil
	return out
}

type repoFile struct {
	path   string // relative to dists/<suite>/
	data   []byte // what InRelease lists
	served []byte // what the server sends; nil = data; "-" = not served
}

// publish writes InRelease (with extra header lines) and the files.
func (f *fakeRepo) publish(suite, header string, files ...repoFile) {
	var sums strings.Builder
	for _, rf := range files {
		s := sha256.Sum256(rf.data)
		fmt.Fprintf(&sums, " %x %d %s\n", s, len(rf.data), rf.path)
		served := rf.served
		if served == nil {
			served = rf.data
		}
		if string(served) != "-" {
			f.files["/debian/dists/"+suite+"/"+rf.path] = served
			f.files["/debian/dists/"+suite+"/"+filepath.Dir(rf.path)+"/by-hash/SHA256/"+hex.EncodeToString(s[:])] = served
		}
	}
	text := "Origin: Test\nSuite: " + suite + "\nCodename: " + suite +
		"\nDate: Sat, 10 May 2025 08:58:14 UTC\nComponents: main contrib\n" + header + "SHA256:\n" + sums.String()
	f.files["/debian/dists/"+suite+"/InRelease"] = clearsignText(f.t, f.key, text)
}

func xzData(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func flipByte(b []byte) []byte {
	b = append([]byte(nil), b...)
	b[len(b)/2] ^= 0xff
	return b
}

func gzData(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// memCache is an in-memory Cache that counts Puts.
type memCache struct {
	mu   sync.Mutex
	m    map[string][]byte
	puts int
}

func (c *memCache) Open(sum string) (io.ReadCloser, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[sum]
	if !ok {
		return nil, fmt.Errorf("cache entry %s: %w", sum, fs.ErrNotExist)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (c *memCache) Put(_ context.Context, r io.Reader, want string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != want {
		return fmt.Errorf("cache: sha256 mismatch")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	c.m[want] = b
	c.puts++
	return nil
}

func TestLoadIndex(t *testing.T) {
	key, stranger := newKey(t, "archive"), newKey(t, "stranger")
	keyring := writeKeyring(t, key, false)
	armoredRing := writeKeyring(t, key, true)
	mainPkgs := []byte(stanza("Package: tiny", "Version: 1.0", "Architecture: all",
		"Filename: pool/main/t/tiny/tiny_1.0_all.deb", "Size: 3", "SHA256: "+sumA))
	contribPkgs := []byte(stanza("Package: blob", "Version: 2.0", "Architecture: amd64",
		"Filename: pool/contrib/b/blob/blob_2.0_amd64.deb", "Size: 4", "SHA256: "+sumA, "Depends: tiny"))
	standard := []repoFile{
		{path: "main/binary-amd64/Packages", data: mainPkgs, served: []byte("-")},
		{path: "main/binary-amd64/Packages.xz", data: xzData(t, mainPkgs)},
		{path: "main/binary-amd64/Packages.gz", data: gzData(t, mainPkgs)},
		{path: "contrib/binary-amd64/Packages.xz", data: xzData(t, contribPkgs)},
		{path: "contrib/binary-amd64/Packages.gz", data: gzData(t, contribPkgs)},
	}
	tests := []struct {
		name      string
		header    string
		files     []repoFile
		signer    *openpgp.Entity
		mutate    func(*Repo)
		client    Client
		wantErr   []string
		wantFetch []string // paths fetched on the first load, relative to dists/test
		copyTo    string   // also serve InRelease under this suite
		tamper    bool     // change one byte of the signed text after signing
		expired   bool     // the loaded index must say it was expired
	}{
		{name: "xz preferred", files: standard,
			wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "contrib/binary-amd64/Packages.xz"}},
		{name: "armored keyring", files: standard, mutate: func(r *Repo) { r.Keyring = armoredRing },
			wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "contrib/binary-amd64/Packages.xz"}},
		{name: "gz when xz is listed but missing", files: []repoFile{
			{path: "main/binary-amd64/Packages.xz", data: xzData(t, mainPkgs), served: []byte("-")},
			{path: "main/binary-amd64/Packages.gz", data: gzData(t, mainPkgs)},
		}, wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "main/binary-amd64/Packages.gz"}},
		{name: "by-hash", header: "Acquire-By-Hash: yes\n", files: standard,
			wantFetch: []string{"InRelease", "main/binary-amd64/by-hash/SHA256/", "contrib/binary-amd64/by-hash/SHA256/"}},
		{name: "wrong hash", files: []repoFile{
			{path: "main/binary-amd64/Packages.xz", data: xzData(t, mainPkgs), served: flipByte(xzData(t, mainPkgs))},
		}, wantErr: []string{"/dists/test/main/binary-amd64/Packages.xz does not match InRelease: expected sha256 ", ", got "}},
		{name: "uncompressed hash mismatch", files: []repoFile{
			{path: "main/binary-amd64/Packages", data: contribPkgs, served: []byte("-")},
			{path: "main/binary-amd64/Packages.gz", data: gzData(t, mainPkgs)},
		}, wantErr: []string{"uncompressed index does not match InRelease"}},
		{name: "wrong signing key", files: standard, signer: stranger,
			wantErr: []string{"keyring " + keyring, "signed by key " + keyID(stranger), "does not hold"}},
		{name: "component not in InRelease", files: standard, mutate: func(r *Repo) { r.Components = []string{"main", "non-free"} },
			wantErr: []string{`component "non-free" is not in`, "it has: main, contrib"}},
		{name: "arch not in InRelease", files: standard, mutate: func(r *Repo) { r.Arch = "arm64" },
			wantErr: []string{`InRelease lists no Packages index for architecture "arm64"`}},
		{name: "expired", header: "Valid-Until: Sat, 17 May 2025 08:58:14 UTC\n", files: standard,
			wantErr: []string{"expired at Sat, 17 May 2025 08:58:14 UTC"}},
		{name: "expired but ignored", header: "Valid-Until: Sat, 17 May 2025 08:58:14 UTC\n", files: standard,
			client:    Client{IgnoreValidUntil: true},
			wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "contrib/binary-amd64/Packages.xz"}, expired: true},
		{name: "expired, this repository ignores Valid-Until", header: "Valid-Until: Sat, 17 May 2025 08:58:14 UTC\n", files: standard,
			mutate: func(r *Repo) { r.IgnoreValidUntil = true }, expired: true,
			wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "contrib/binary-amd64/Packages.xz"}},
		{name: "not expired, Valid-Until ahead", header: "Valid-Until: Fri, 01 Jan 2100 00:00:00 UTC\n", files: standard,
			wantFetch: []string{"InRelease", "main/binary-amd64/Packages.xz", "contrib/binary-amd64/Packages.xz"}},
		// A broken signature is refused whatever the validity setting: ignoring
		// Valid-Until never means trusting an unsigned index.
		{name: "broken signature", files: standard, tamper: true,
			wantErr: []string{"bad signature from key " + keyID(key)}},
		{name: "broken signature, expired, repository ignores Valid-Until", header: "Valid-Until: Sat, 17 May 2025 08:58:14 UTC\n",
			files: standard, tamper: true, mutate: func(r *Repo) { r.IgnoreValidUntil = true },
			wantErr: []string{"bad signature from key " + keyID(key)}},
		{name: "broken signature, expired, client ignores Valid-Until", header: "Valid-Until: Sat, 17 May 2025 08:58:14 UTC\n",
			files: standard, tamper: true, client: Client{IgnoreValidUntil: true},
			wantErr: []string{"bad signature from key " + keyID(key)}},
		{name: "wrong signing key, repository ignores Valid-Until", files: standard, signer: stranger,
			mutate: func(r *Repo) { r.IgnoreValidUntil = true }, wantErr: []string{"signed by key " + keyID(stranger), "does not hold"}},
		{name: "larger file", files: []repoFile{
			{path: "main/binary-amd64/Packages.xz", data: xzData(t, mainPkgs), served: append(xzData(t, mainPkgs), 0)},
		}, wantErr: []string{"/dists/test/main/binary-amd64/Packages.xz does not match InRelease", "got a larger file"}},
		{name: "other suite's InRelease", files: standard, copyTo: "other", mutate: func(r *Repo) { r.Suite = "other" },
			wantErr: []string{`describes suite "test"`}},
		{name: "missing keyring", files: standard, mutate: func(r *Repo) { r.Keyring = "/nonexistent/ring.gpg" },
			wantErr: []string{"reading keyring", "/nonexistent/ring.gpg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := key
			if tt.signer != nil {
				signer = tt.signer
			}
			fr := newFakeRepo(t, signer)
			fr.publish("test", tt.header, tt.files...)
			r := Repo{Name: "fake", BaseURL: fr.srv.URL + "/debian/", Suite: "test", Components: []string{"main", "contrib"},
				Arch: "amd64", Keyring: keyring}
			if tt.tamper {
				ir := fr.files["/debian/dists/test/InRelease"]
				fr.files["/debian/dists/test/InRelease"] = bytes.Replace(ir, []byte("Origin: Test"), []byte("Origin: Tesu"), 1)
			}
			if tt.copyTo != "" {
				fr.files["/debian/dists/"+tt.copyTo+"/InRelease"] = fr.files["/debian/dists/test/InRelease"]
			}
			if len(tt.files) < 3 {
				r.Components = []string{"main"}
			}
			if tt.mutate != nil {
				tt.mutate(&r)
			}
			cache := &memCache{}
			c := tt.client
			c.Cache = cache
			ctx := context.Background()
			got, err := c.LoadIndex(ctx, r)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("LoadIndex succeeded, want an error")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var fetched []string
			for _, p := range fr.requests() {
				fetched = append(fetched, strings.TrimPrefix(p, "/debian/dists/test/"))
			}
			if len(fetched) != len(tt.wantFetch) {
				t.Fatalf("fetched %q, want %q", fetched, tt.wantFetch)
			}
			for i := range fetched {
				if !strings.HasPrefix(fetched[i], tt.wantFetch[i]) {
					t.Fatalf("fetched %q, want %q", fetched, tt.wantFetch)
				}
			}
			if got.Expired != tt.expired {
				t.Errorf("Expired = %v, want %v", got.Expired, tt.expired)
			}
			irSum := sha256.Sum256(fr.files["/debian/dists/test/InRelease"])
			if got.InReleaseSHA256 != hex.EncodeToString(irSum[:]) {
				t.Errorf("InReleaseSHA256 = %s, want %x", got.InReleaseSHA256, irSum)
			}
			if want := time.Date(2025, 5, 10, 8, 58, 14, 0, time.UTC); !got.Date.Equal(want) {
				t.Errorf("Date = %v, want %v", got.Date, want)
			}
			var names []string
			for _, p := range got.Packages {
				names = append(names, p.Component+"/"+p.Name+"@"+p.Repo)
			}
			sort.Strings(names)
			want := "contrib/blob@fake main/tiny@fake"
			if len(r.Components) == 1 {
				want = "main/tiny@fake"
			}
			if s := strings.Join(names, " "); s != want {
				t.Errorf("packages = %s, want %s", s, want)
			}
			if cache.puts != len(r.Components) {
				t.Errorf("cache got %d puts, want %d", cache.puts, len(r.Components))
			}
			// Unchanged InRelease: everything else comes from the cache.
			if _, err := c.LoadIndex(ctx, r); err != nil {
				t.Fatal(err)
			}
			if reqs := fr.requests(); len(reqs) != 1 || !strings.HasSuffix(reqs[0], "/InRelease") {
				t.Errorf("second load fetched %q, want only InRelease", reqs)
			}
		})
	}
}

func TestLoadIndexCorruptCacheEntry(t *testing.T) {
	key := newKey(t, "archive")
	pkgs := []byte(stanza("Package: tiny", "Version: 1.0", "Architecture: all",
		"Filename: pool/main/t/tiny/tiny_1.0_all.deb", "Size: 3", "SHA256: "+sumA))
	fr := newFakeRepo(t, key)
	xzd := xzData(t, pkgs)
	fr.publish("test", "", repoFile{path: "main/binary-amd64/Packages.xz", data: xzd})
	s := sha256.Sum256(xzd)
	cache := &memCache{m: map[string][]byte{hex.EncodeToString(s[:]): []byte("garbage")}}
	c := Client{Cache: cache}
	_, err := c.LoadIndex(context.Background(), Repo{Name: "fake", BaseURL: fr.srv.URL + "/debian", Suite: "test",
		Components: []string{"main"}, Arch: "amd64", Keyring: writeKeyring(t, key, false)})
	if err == nil || !strings.Contains(err.Error(), "is corrupt") {
		t.Fatalf("error = %v, want corrupt cache entry", err)
	}
}

func TestLoadIndexContextCanceled(t *testing.T) {
	key := newKey(t, "archive")
	fr := newFakeRepo(t, key)
	fr.publish("test", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var c Client
	_, err := c.LoadIndex(ctx, Repo{Name: "fake", BaseURL: fr.srv.URL + "/debian", Suite: "test",
		Components: []string{"main"}, Arch: "amd64", Keyring: writeKeyring(t, key, false)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error = %v, want context.Canceled", err)
	}
}

// A flat repository (apt's "deb URI /", as NVIDIA's CUDA repository is laid out):
// InRelease and Packages beside each other, no suite directory, no components, and
// Filename written "./name.deb".
func TestLoadIndexFlat(t *testing.T) {
	key := newKey(t, "flat")
	keyring := writeKeyring(t, key, false)
	pkgs := []byte(stanza("Package: libnccl2", "Version: 2.27.7-1+cuda12.9", "Architecture: amd64",
		"Filename: ./libnccl2_2.27.7-1+cuda12.9_amd64.deb", "Size: 3", "SHA256: "+sumA))
	fr := newFakeRepo(t, key)
	gz := gzData(t, pkgs)
	var sums strings.Builder
	for name, data := range map[string][]byte{"Packages": pkgs, "Packages.gz": gz} {
		fmt.Fprintf(&sums, " %x %d %s\n", sha256.Sum256(data), len(data), name)
	}
	// No Suite, no Codename, no Components: what a flat Release may omit.
	text := "Origin: NVIDIA\nLabel: NVIDIA CUDA\nArchitecture: x86_64\nDate: Sat, 10 May 2025 08:58:14 UTC\nAcquire-By-Hash: yes\nSHA256:\n" + sums.String()
	fr.files["/cuda/x86_64/InRelease"] = clearsignText(t, key, text)
	fr.files["/cuda/x86_64/Packages.gz"] = gz
	r := Repo{Name: "cuda", BaseURL: fr.srv.URL + "/cuda/x86_64", Suite: "/", Arch: "amd64", Keyring: keyring}
	c := &Client{Cache: &memCache{}}
	idx, err := c.LoadIndex(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Packages) != 1 || idx.Packages[0].Filename != "libnccl2_2.27.7-1+cuda12.9_amd64.deb" || idx.Packages[0].Repo != "cuda" {
		t.Fatalf("packages %+v", idx.Packages)
	}
	if got := fr.requests(); len(got) != 2 || got[0] != "/cuda/x86_64/InRelease" || got[1] != "/cuda/x86_64/Packages.gz" {
		t.Errorf("fetched %q", got)
	}
	// Components make no sense there; the signature is checked as anywhere.
	r.Components = []string{"main"}
	if _, err := c.LoadIndex(context.Background(), r); err == nil || !strings.Contains(err.Error(), "has no components") {
		t.Errorf("flat with components: %v", err)
	}
	r.Components = nil
	fr.files["/cuda/x86_64/InRelease"] = bytes.Replace(fr.files["/cuda/x86_64/InRelease"], []byte("Origin: NVIDIA"), []byte("Origin: NVIDIB"), 1)
	if _, err := c.LoadIndex(context.Background(), r); err == nil || !strings.Contains(err.Error(), "bad signature") {
		t.Errorf("tampered flat InRelease: %v", err)
	}
}
