package stagecache

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/peerboot/peerboot/internal/registrytest"
	"github.com/peerboot/peerboot/sign"
	"github.com/peerboot/peerboot/store"
)

const testKey = "kernel-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// smallStage commits a small output to a new store under key: nested
// directories, an executable, an empty file, an empty directory and a symlink,
// the kinds of entry the real stages write.
func smallStage(t *testing.T, key string, salt string) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"bzImage":                     strings.Repeat("kernel image "+salt, 5000),
		"build/scripts/basic/fixdep":  "#!/bin/sh\necho fixdep\n",
		"build/include/linux/types.h": "typedef int peer_t;\n",
		"build/empty":                 "",
		"release":                     "6.1.0-peerboot\n",
		"disk.img":                    strings.Repeat("\x00", 2<<20) + "partition table" + strings.Repeat("\x00", 1<<20), // holes
		"zeros.img":                   strings.Repeat("\x00", 1<<20),                                                     // all hole
	}
	for p, body := range files {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "build/scripts/basic/fixdep"), 0o755)
	os.MkdirAll(filepath.Join(dir, "build/arch/x86/include/generated"), 0o755)
	if err := os.Symlink("../../include", filepath.Join(dir, "build/scripts/include")); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitOutput(key, dir); err != nil {
		t.Fatal(err)
	}
	return st
}

// entries describes a tree for comparison: each path with its type, mode,
// and content or link target.
func entries(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link " + l
		case d.IsDir():
			out[rel] = fmt.Sprintf("dir %v", info.Mode().Perm())
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("file %v %x", info.Mode().Perm(), b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func newKey(t *testing.T) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func openCache(t *testing.T, reg *registrytest.Server, repo string, signer crypto.Signer, trust ...crypto.PublicKey) *Cache {
	t.Helper()
	c, err := Open("oci://"+reg.Host+"/"+repo, Options{Signer: signer, Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	reg := registrytest.Start(t)
	ctx := context.Background()
	key := newKey(t)
	a := smallStage(t, testKey, "a")
	c := openCache(t, reg, "peerboot/cache", key, key.Public())
	plan := []byte(`{"name":"kernel","key":"` + testKey + `","items":[]}`)
	dates := map[string]int64{"sha256:" + strings.Repeat("1", 64): 1700000000}

	if ok, err := c.Has(ctx, testKey); err != nil || ok {
		t.Fatalf("Has before the push: %v, %v", ok, err)
	}
	res, err := c.Push(ctx, a, Entry{Key: testKey, Plan: plan, Dates: dates})
	if err != nil {
		t.Fatal(err)
	}
	if res.Present || res.Uploaded == 0 {
		t.Fatalf("first push: %+v", res)
	}
	if ok, err := c.Has(ctx, testKey); err != nil || !ok {
		t.Fatalf("Has after the push: %v, %v", ok, err)
	}
	// The same key again: a no-op.
	again, err := c.Push(ctx, a, Entry{Key: testKey, Plan: plan, Dates: dates})
	if err != nil || !again.Present || again.Uploaded != 0 {
		t.Fatalf("second push: %+v, %v", again, err)
	}

	b, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Pull(ctx, b, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Manifest.Digest != res.Manifest.Digest || !bytes.Equal(got.Plan, plan) || len(got.Dates) != 1 ||
		got.Dates["sha256:"+strings.Repeat("1", 64)] != 1700000000 {
		t.Fatalf("pulled %+v", got)
	}
	if !b.HasOutput(testKey) {
		t.Fatal("the pulled stage is not committed in the store")
	}
	// The output as stored, record for record and entry for entry.
	want, have := entries(t, a.OutputDir(testKey)), entries(t, b.OutputDir(testKey))
	if fmt.Sprint(want) != fmt.Sprint(have) {
		t.Errorf("pulled tree differs:\npushed %v\npulled %v", want, have)
	}
	if problems, err := b.Verify(ctx, nil); err != nil || len(problems) > 0 {
		t.Errorf("store verify after the pull: %v %v", problems, err)
	}
	// A key the cache lacks is a miss, not an error.
	if got, err := c.Pull(ctx, b, "driver-"+strings.Repeat("f", 64)); got != nil || err != nil {
		t.Errorf("pull of a missing key: %+v, %v", got, err)
	}
	// Reproducible: another store with the same output pushes the same manifest.
	other := openCache(t, reg, "peerboot/other", key, key.Public())
	res2, err := other.Push(ctx, smallStage(t, testKey, "a"), Entry{Key: testKey, Plan: plan, Dates: dates})
	if err != nil || res2.Manifest.Digest != res.Manifest.Digest {
		t.Errorf("the same output pushed from another store: %v, %v, first %v", res2.Manifest.Digest, err, res.Manifest.Digest)
	}
}

// Each altered artifact is refused with a *RefusedError naming why, and
// nothing of it is left in the store: no output, no scratch directory.
func TestRefused(t *testing.T) {
	reg := registrytest.Start(t)
	ctx := context.Background()
	trusted, other := newKey(t), newKey(t)
	plan := []byte(`{}`)

	// (a) One byte of the stored tree blob flipped in the registry's storage.
	flipped := openCache(t, reg, "peerboot/flipped", trusted, trusted.Public())
	res, err := flipped.Push(ctx, smallStage(t, testKey, "flipped"), Entry{Key: testKey, Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	var man ocispec.Manifest
	if err := flipped.fetchJSON(ctx, res.Manifest, &man, testKey); err != nil {
		t.Fatal(err)
	}
	blob := reg.BlobPath(man.Layers[2].Digest.Encoded())
	bb, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	bb[len(bb)/3] ^= 0x01
	if err := os.WriteFile(blob, bb, 0o644); err != nil {
		t.Fatal(err)
	}

	// (b) The same stage re-signed with another key: an ordinary push by a
	// builder whose key is not trusted.
	resigned := openCache(t, reg, "peerboot/resigned", other, trusted.Public())
	if _, err := resigned.Push(ctx, smallStage(t, testKey, "evil"), Entry{Key: testKey, Plan: plan}); err != nil {
		t.Fatal(err)
	}

	// (c) Unsigned: the stage's manifest and blobs copied without their
	// signature, and tagged.
	signedSrc := openCache(t, reg, "peerboot/signed-src", trusted, trusted.Public())
	if _, err := signedSrc.Push(ctx, smallStage(t, testKey, "a"), Entry{Key: testKey, Plan: plan}); err != nil {
		t.Fatal(err)
	}
	unsigned := openCache(t, reg, "peerboot/unsigned", nil, trusted.Public())
	if _, err := oras.Copy(ctx, signedSrc.repo, testKey, unsigned.repo, testKey, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}

	// (d) A trusted signature of another manifest, attached to this one (a
	// statement moved from stage to stage).
	moved := openCache(t, reg, "peerboot/moved", trusted, trusted.Public())
	if _, err := oras.Copy(ctx, signedSrc.repo, testKey, moved.repo, testKey, oras.DefaultCopyOptions); err != nil {
		t.Fatal(err)
	}
	img, err := moved.repo.Resolve(ctx, testKey)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(Statement{Type: statementType, Key: testKey, Manifest: "sha256:" + strings.Repeat("0", 64)})
	env, _ := sign.SignEnvelope(trusted, PayloadType, payload)
	envBytes, _ := sign.MarshalEnvelope(env)
	layer := blobDesc(MediaStatement, "statement", envBytes)
	if err := moved.repo.Push(ctx, layer, bytes.NewReader(envBytes)); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, moved.repo, oras.PackManifestVersion1_1, ArtifactSignature, oras.PackManifestOptions{
		Subject: &img, Layers: []ocispec.Descriptor{layer}}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name     string
		cache    *Cache
		mentions string
	}{
		{"flipped byte", flipped, "the stored blob was altered"},
		{"signed by another key", resigned, "no signature by a trusted key"},
		{"unsigned", unsigned, "unsigned: no signature"},
		{"signature of another manifest", moved, "not " + testKey + " at " + img.Digest.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, err := store.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.cache.Pull(ctx, st, testKey)
			var ref *RefusedError
			if !errors.As(err, &ref) || !strings.Contains(err.Error(), c.mentions) {
				t.Fatalf("pull: %+v, %v; want a refusal naming %q", got, err, c.mentions)
			}
			t.Logf("%v", err)
			if st.HasOutput(testKey) {
				t.Error("a refused stage is in the store")
			}
			if left, _ := os.ReadDir(filepath.Join(st.Root, "tmp")); len(left) > 0 {
				t.Errorf("scratch left behind: %v", left)
			}
			if _, err := os.Stat(st.OutputDir(testKey)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s exists after a refused pull", st.OutputDir(testKey))
			}
		})
	}

	// Nothing is taken without a key to check it with.
	if _, err := openCache(t, reg, "peerboot/flipped", nil).Pull(ctx, smallStage(t, "x-"+strings.Repeat("0", 64), ""), testKey); err == nil || !strings.Contains(err.Error(), "needs a key") {
		t.Errorf("pull without a trusted key: %v", err)
	}
}

// Two builders pushing one stage at once both succeed, and the repository
// holds one stage manifest for the key: the manifest carries no time and no
// signature, so the same output is the same manifest. Their signatures (ECDSA
// signatures differ) are referrers of it; a pull accepts it.
func TestRacingPushes(t *testing.T) {
	reg := registrytest.Start(t)
	ctx := context.Background()
	keyA := newKey(t)
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keys := []crypto.Signer{keyA, edPriv}
	const builders = 2
	stores := make([]*store.Store, builders)
	for i := range stores {
		stores[i] = smallStage(t, testKey, "same")
	}
	var wg sync.WaitGroup
	errs := make([]error, builders)
	digests := make([]string, builders)
	start := make(chan struct{})
	for i := 0; i < builders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := openCache(t, reg, "peerboot/race", keys[i], keys[i].Public())
			<-start
			res, err := c.Push(ctx, stores[i], Entry{Key: testKey, Plan: []byte(`{}`)})
			errs[i] = err
			if err == nil && !res.Present {
				digests[i] = res.Manifest.Digest.String()
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("builder %d: %v", i, err)
		}
	}
	// One stage manifest in the repository (the rest are signatures, the
	// empty config's manifests' referrers index): count them by artifactType.
	stageManifests := 0
	for _, d := range reg.ManifestRevisions(t, "peerboot/race") {
		b, err := os.ReadFile(reg.BlobPath(d))
		if err != nil {
			t.Fatal(err)
		}
		var m ocispec.Manifest
		json.Unmarshal(b, &m)
		if m.ArtifactType == ArtifactStage {
			stageManifests++
		}
	}
	if stageManifests != 1 {
		t.Errorf("%d stage manifests for one key, want 1 (pushed %v)", stageManifests, digests)
	}
	var pushed []string
	for _, d := range digests {
		if d != "" {
			pushed = append(pushed, d)
		}
	}
	sort.Strings(pushed)
	if len(pushed) == 2 && pushed[0] != pushed[1] {
		t.Errorf("the builders pushed different manifests: %v", pushed)
	}
	// A builder's key verifies what the cache now holds.
	verified := 0
	for i, k := range keys {
		st, _ := store.Open(t.TempDir())
		got, err := openCache(t, reg, "peerboot/race", nil, k.Public()).Pull(ctx, st, testKey)
		if err == nil && got != nil {
			verified++
		} else {
			// Only one signature may have survived the fallback index's
			// read-modify-write race: the other builder's key then fails,
			// which is a refusal, never a partial stage.
			var ref *RefusedError
			if !errors.As(err, &ref) {
				t.Errorf("pull verified by builder %d's key: %+v, %v", i, got, err)
			}
		}
	}
	if verified == 0 {
		t.Error("no builder's key verifies the raced stage")
	}
}

// TestManifestBlobUnknownRetried: a registry that refuses a manifest for an
// unknown blob while another push links it (CI saw this in TestRacingPushes)
// costs a retry, not the push; a registry that keeps refusing fails it after
// a bounded number of tries.
func TestManifestBlobUnknownRetried(t *testing.T) {
	reg := registrytest.Start(t)
	target, err := url.Parse("http://" + reg.Host)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		refuse  int // manifest PUTs refused before the registry sees one
		wantErr bool
	}{
		{"refused once", 1, false},
		{"refused always", 1 << 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused atomic.Int64
			proxy := httputil.NewSingleHostReverseProxy(target)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") && refused.Load() < int64(tc.refuse) {
					refused.Add(1)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					io.WriteString(w, `{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN","message":"blob unknown to registry"}]}`)
					return
				}
				proxy.ServeHTTP(w, r)
			}))
			defer srv.Close()
			key := newKey(t)
			c, err := Open("oci://"+strings.TrimPrefix(srv.URL, "http://")+"/peerboot/"+strings.ReplaceAll(tc.name, " ", "-"), Options{Signer: key, Trust: []crypto.PublicKey{key.Public()}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Push(context.Background(), smallStage(t, testKey, "a"), Entry{Key: testKey, Plan: []byte(`{}`)})
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "MANIFEST_BLOB_UNKNOWN") && !strings.Contains(err.Error(), "blob unknown") {
					t.Fatalf("push through a registry that always refuses: %v, want the registry's refusal", err)
				}
				if got := refused.Load(); got != manifestRetries {
					t.Errorf("%d manifest PUTs, want %d (bounded retries)", got, manifestRetries)
				}
				return
			}
			if err != nil {
				t.Fatalf("push after one refused manifest: %v", err)
			}
			if ok, err := c.Has(context.Background(), testKey); err != nil || !ok {
				t.Errorf("Has after the retried push: %v, %v", ok, err)
			}
		})
	}
}
