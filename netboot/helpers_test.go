package netboot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/output"
)

// fakeBuild writes an output directory shaped like `peerboot build`'s: manifest.json,
// SHA256SUMS, peerboot.efi, peerboot.iso and pxe/{vmlinuz,initrd.img,boot.ipxe}. The initrd has
// initrdSize pseudo-random bytes.
func fakeBuild(t testing.TB, dir, recipe string, initrdSize int64) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "pxe"), 0o755))
	files := map[string][]byte{
		"peerboot.efi":  []byte("MZ fake UKI of " + recipe),
		"peerboot.iso":  []byte("FAKE ISO of " + recipe), // serve hands it out as is
		"pxe/vmlinuz":   []byte("fake kernel of " + recipe),
		"pxe/boot.ipxe": []byte("#!ipxe\n# peerboot PXE bundle\nkernel vmlinuz console=ttyS0,115200 panic=-1\ninitrd initrd.img\nboot\n"),
	}
	sums := map[string]string{}
	for p, b := range files {
		must(os.WriteFile(filepath.Join(dir, p), b, 0o644))
		h := sha256.Sum256(b)
		sums[p] = hex.EncodeToString(h[:])
	}
	f, err := os.Create(filepath.Join(dir, "pxe", "initrd.img"))
	must(err)
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 1<<20)
	for left := initrdSize; left > 0; {
		n := min(left, int64(len(buf)))
		rng.Read(buf[:n])
		f.Write(buf[:n])
		h.Write(buf[:n])
		left -= n
	}
	must(f.Close())
	sums["pxe/initrd.img"] = hex.EncodeToString(h.Sum(nil))
	type out struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	m := struct {
		Recipe       string `json:"recipe"`
		RecipeDigest string `json:"recipe_digest"`
		Outputs      []out  `json:"outputs"`
	}{Recipe: recipe, RecipeDigest: "sha256:" + hexOf(recipe)}
	var list []output.Sum
	for p, s := range sums {
		m.Outputs = append(m.Outputs, out{p, s})
		list = append(list, output.Sum{Path: p, SHA256: s})
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	must(os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644))
	must(os.WriteFile(filepath.Join(dir, "SHA256SUMS"), output.FormatSums(list), 0o644))
}

// syncBuffer is a log sink the handler goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type testEnv struct {
	srv   *Server
	http  *httptest.Server
	store fleetdb.Store
	db    string // the SQLite file of store
	log   *syncBuffer
	out   string // the output root
}

// newEnv serves a "default" build (and the builds named in extra) with opt's other fields.
func newEnv(t testing.TB, opt Options, extra ...string) *testEnv {
	t.Helper()
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "default")}
	fakeBuild(t, dirs[0], "default", 1<<20)
	for _, r := range extra {
		dirs = append(dirs, filepath.Join(root, r))
		fakeBuild(t, dirs[len(dirs)-1], r, 4096)
	}
	bs, err := LoadBuilds(dirs)
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "reports.db")
	st, err := sqldb.OpenSQLite(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logs := &syncBuffer{}
	opt.Builds, opt.Store = bs, st
	opt.Log = slog.New(slog.NewTextHandler(logs, nil))
	s, err := New(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &testEnv{srv: s, http: hs, store: st, db: dbPath, log: logs, out: root}
}

func (e *testEnv) get(t testing.TB, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.http.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *testEnv) post(t testing.TB, path, token string, body []byte) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.http.URL+path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (e *testEnv) build(t testing.TB, recipe string) *Build {
	t.Helper()
	b, err := e.srv.opt.Builds.Get(recipe)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
