package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	godigest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/peerboot/peerboot/internal/registrytest"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/sign"
)

// registryServer is the test's registry (internal/registrytest).
type registryServer struct{ *registrytest.Server }

func startRegistry(t *testing.T) registryServer { return registryServer{registrytest.Start(t)} }

func (r registryServer) blobPath(sha string) string { return r.BlobPath(sha) }

// fakeBzImage has the setup header fields KernelRelease reads.
func fakeBzImage(release string) []byte {
	b := make([]byte, 8192)
	copy(b[0x202:], "HdrS")
	b[0x20E], b[0x20F] = 0x00, 0x10 // version string at 0x200 + 0x1000
	copy(b[0x1200:], release+" (builder@peerboot) #1 SMP\x00")
	return b
}

// writeOutput lays out a small build output as build.Publish would, signed
// with a fresh test key set (no Secure Boot key: the UKI is a stand-in).
func writeOutput(t *testing.T, signed bool) (dir, pub string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "default")
	files := map[string][]byte{
		"peerboot.efi":   bytes.Repeat([]byte("MZ peerboot uki "), 40000),
		"disk.img":       bytes.Repeat([]byte("disk sector data"), 300000),
		"pxe/vmlinuz":    fakeBzImage("6.1.192-peerboot"),
		"pxe/initrd.img": bytes.Repeat([]byte{0x28, 0xb5, 0x2f, 0xfd}, 10000),
		"pxe/boot.ipxe":  []byte("#!ipxe\nkernel vmlinuz\ninitrd initrd.img\nboot\n"),
	}
	m := output.Manifest{Recipe: "default", RecipeDigest: "sha256:" + strings.Repeat("ab", 32), SourceDateEpoch: 1700000000,
		Inputs: []output.ManifestInput{
			{Role: "kernel-source", Name: "linux-source-6.1_6.1.192-3", Digest: "sha256:" + strings.Repeat("01", 32)},
			{Role: "driver-source", Name: "nvidia-open-kernel-source_535.261.03-1", Digest: "sha256:" + strings.Repeat("02", 32)}},
		Stages: []output.ManifestStage{{Name: "image", Key: "image-" + strings.Repeat("2", 64)}}}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var sums []output.Sum
	for _, n := range names {
		h := sha256.Sum256(files[n])
		m.Outputs = append(m.Outputs, output.ManifestOutput{Path: n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(h[:])})
		sums = append(sums, output.Sum{Path: n, SHA256: hex.EncodeToString(h[:])})
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	files["manifest.json"] = append(mj, '\n')
	h := sha256.Sum256(files["manifest.json"])
	sums = append(sums, output.Sum{Path: "manifest.json", SHA256: hex.EncodeToString(h[:])})
	files["SHA256SUMS"] = output.FormatSums(sums)
	for n, b := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !signed {
		return dir, ""
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if _, err := sign.InitTestKeys(keys); err != nil {
		t.Fatal(err)
	}
	if err := sign.SignOutput(context.Background(), dir, sign.Options{ArtifactKey: "file:" + filepath.Join(keys, sign.ArtifactKeyFile), Version: "test"}); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(keys, sign.ArtifactPubFile)
}

// tree maps every file under dir to its sha256.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(h[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPushPullRoundTrip(t *testing.T) {
	reg := startRegistry(t)
	ctx := context.Background()
	out, pub := writeOutput(t, true)
	ref := "oci://" + reg.Host + "/peerboot/images:default-535.261.03-0123abcd"
	var log bytes.Buffer
	res, err := Push(ctx, out, ref, PushOptions{Tags: []string{"default-535.261.03"}, Log: &log})
	if err != nil {
		t.Fatalf("Push: %v\n%s", err, log.String())
	}
	if res.Signature == nil || res.Provenance == nil {
		t.Fatalf("no referrers pushed: %+v", res)
	}
	// distribution 2.8 has no referrers API: the referrers are indexed under
	// the fallback tag sha256-<digest>.
	tags := registryTags(t, reg, "peerboot/images")
	if want := "sha256-" + res.Image.Digest.Encoded(); !strings.Contains(tags, want) {
		t.Errorf("tags %s lack the referrers fallback tag %s", tags, want)
	}
	// Pushing the same output again uploads nothing and gives the same digest.
	again, err := Push(ctx, out, ref, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Image.Digest != res.Image.Digest || again.Uploaded != 0 || again.Signature.Digest != res.Signature.Digest {
		t.Errorf("second push: %+v, first %+v", again, res)
	}

	// Pull by the moving tag, verified with the key, and compare every file.
	dst := filepath.Join(t.TempDir(), "pulled")
	got, err := Pull(ctx, "oci://"+reg.Host+"/peerboot/images:default-535.261.03", dst, PullOptions{Key: pub})
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if !got.Verified || !got.Signed || got.Image.Digest != res.Image.Digest {
		t.Errorf("pull result: %+v", got)
	}
	want, have := tree(t, out), tree(t, dst)
	if len(want) != len(have) {
		t.Errorf("pulled %d files, pushed %d: %v vs %v", len(have), len(want), have, want)
	}
	for p, h := range want {
		if have[p] != h {
			t.Errorf("%s: pulled sha256 %q, pushed %s", p, have[p], h)
		}
	}
	for k, v := range map[string]string{
		AnnotationRecipe: "default", AnnotationDriverVersion: "535.261.03", AnnotationKernelRelease: "6.1.192-peerboot",
		AnnotationProvenanceDigest: "sha256:" + want[output.ProvenanceFile], "org.opencontainers.image.created": "2023-11-14T22:13:20Z",
	} {
		if got.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
	// The pulled directory is an output sign.Verify accepts on its own.
	if err := sign.Verify(ctx, dst, sign.VerifyOptions{Key: pub}); err != nil {
		t.Errorf("verify of the pulled output: %v", err)
	}
	// By digest, without a key.
	byDigest := filepath.Join(t.TempDir(), "by-digest")
	if _, err := Pull(ctx, "oci://"+reg.Host+"/peerboot/images@"+res.Image.Digest.String(), byDigest, PullOptions{}); err != nil {
		t.Errorf("pull by digest: %v", err)
	}
	// Pulling again replaces the earlier pull in place.
	if _, err := Pull(ctx, ref, dst, PullOptions{Key: pub}); err != nil {
		t.Errorf("second pull into the same directory: %v", err)
	}

	// Another key: refused, nothing written.
	_, otherPub := writeOutput(t, true)
	dst2 := filepath.Join(t.TempDir(), "other-key")
	_, err = Pull(ctx, ref, dst2, PullOptions{Key: otherPub})
	checkRefused(t, err, dst2, "SHA256SUMS")

	// A blob altered in the registry's storage: refused before anything lands.
	disk := want["disk.img"]
	b, err := os.ReadFile(reg.blobPath(disk))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xFF
	if err := os.WriteFile(reg.blobPath(disk), b, 0o644); err != nil {
		t.Fatal(err)
	}
	dst3 := filepath.Join(t.TempDir(), "tampered")
	_, err = Pull(ctx, ref, dst3, PullOptions{})
	checkRefused(t, err, dst3, "disk.img")
	// And an earlier good pull is left alone by a failed one.
	before := tree(t, dst)
	if _, err := Pull(ctx, ref, dst, PullOptions{Key: pub}); err == nil {
		t.Error("pull of a tampered artifact over an earlier pull succeeded")
	}
	if after := tree(t, dst); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Error("a failed pull changed the earlier pull's files")
	}
}

func registryTags(t *testing.T, reg registryServer, repo string) string {
	t.Helper()
	resp, err := http.Get("http://" + reg.Host + "/v2/" + repo + "/tags/list")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String()
}

func checkRefused(t *testing.T, err error, dst, mentions string) {
	t.Helper()
	var ie *IntegrityError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), mentions) {
		t.Fatalf("pull: %v, want an integrity error naming %s", err, mentions)
	}
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a refused pull", dst)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".*.pull-*"))
	if len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
}

func TestUnsignedPullWithKey(t *testing.T) {
	reg := startRegistry(t)
	ctx := context.Background()
	out, _ := writeOutput(t, false)
	ref := "oci://" + reg.Host + "/peerboot/unsigned:v1"
	res, err := Push(ctx, out, ref, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Signature != nil {
		t.Error("an unsigned output got a signature referrer")
	}
	_, signedPub := writeOutput(t, true)
	dst := filepath.Join(t.TempDir(), "x")
	_, err = Pull(ctx, ref, dst, PullOptions{Key: signedPub})
	checkRefused(t, err, dst, "no signature")
	// Without a key it pulls (digests checked only).
	if _, err := Pull(ctx, ref, dst, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	// A changed output is not published.
	os.WriteFile(filepath.Join(out, "pxe/boot.ipxe"), []byte("#!ipxe\nshell\n"), 0o644)
	if _, err := Push(ctx, out, ref, PushOptions{}); err == nil || !strings.Contains(err.Error(), "changed output") {
		t.Errorf("push of a changed output: %v", err)
	}
}

func TestRefsAndNames(t *testing.T) {
	for in, ok := range map[string]bool{
		"oci://127.0.0.1:5000/peerboot/images:tag":               true,
		"ghcr.io/org/peerboot@sha256:" + strings.Repeat("a", 64): true,
		"oci://noslash": false,
	} {
		if _, err := ParseRef(in); (err == nil) != ok {
			t.Errorf("ParseRef(%q): %v", in, err)
		}
	}
	for in, want := range map[string]string{
		"nvidia-open-kernel-source_535.261.03-1":   "535.261.03",
		"nvidia-open-kernel-source_1:550.163.01-2": "550.163.01",
		"open-gpu-kernel-modules":                  "",
	} {
		if got := DriverVersion(in); got != want {
			t.Errorf("DriverVersion(%q) = %q, want %q", in, got, want)
		}
	}
	for rel, want := range map[string]string{"disk.img": MediaDisk, "peerboot.iso": MediaISO, "peerboot.efi": MediaUKI, "pxe/initrd.img": MediaInitrd, "pxe/x.iso": MediaFile} {
		if got := MediaTypeFor(rel); got != want {
			t.Errorf("MediaTypeFor(%q) = %s, want %s", rel, got, want)
		}
	}
	for in, ok := range map[string]bool{"disk.img": true, "pxe/vmlinuz": true, "../x": false, "/etc/passwd": false, "a/../b": false, "": false, "a//b": false} {
		if err := safeRel(in); (err == nil) != ok {
			t.Errorf("safeRel(%q): %v", in, err)
		}
	}
}

// Only this machine gets plain HTTP (and the credentials over it) by default:
// a DNS name that merely looks like a loopback address is a remote host.
func TestLoopbackRegistry(t *testing.T) {
	for _, c := range []struct {
		host string
		want bool
	}{
		{"127.0.0.1:5000", true},
		{"127.0.0.1", true},
		{"127.8.9.10:443", true},
		{"localhost:5000", true},
		{"localhost", true},
		{"LOCALHOST:5000", true},
		{"[::1]:5000", true},
		{"[::1]", true},
		{"[::ffff:127.0.0.1]:5000", true},
		{"127.attacker.example", false},
		{"127.attacker.example:5000", false},
		{"127.0.0.1.attacker.example:5000", false},
		{"127.0.0.1.nip.io", false},
		{"localhost.attacker.example:5000", false},
		{"[::2]:5000", false},
		{"128.0.0.1:5000", false},
		{"10.0.0.1:5000", false},
		{"ghcr.io", false},
		{"registry.example:5000", false},
		{"", false},
	} {
		if got := isLoopback(c.host); got != c.want {
			t.Errorf("isLoopback(%q) = %v, want %v", c.host, got, c.want)
		}
	}
	// And the repository a reference turns into speaks HTTPS unless told otherwise.
	for ref, plain := range map[string]bool{
		"oci://127.attacker.example/peerboot/images:t": false,
		"oci://127.0.0.1:5000/peerboot/images:t":       true,
		"oci://[::1]:5000/peerboot/images:t":           true,
	} {
		r, err := ParseRef(ref)
		if err != nil {
			t.Fatal(err)
		}
		repo, err := Remote{}.repository(r)
		if err != nil {
			t.Fatal(err)
		}
		if repo.PlainHTTP != plain {
			t.Errorf("%s: PlainHTTP = %v, want %v", ref, repo.PlainHTTP, plain)
		}
	}
}

// A registry is outside input: manifests that name files outside the target,
// twice, with a size that is not the blob's, or beside SHA256SUMS' list, are
// refused, and nothing lands in the target or beside it.
func TestHostileRegistryPull(t *testing.T) {
	reg := startRegistry(t)
	ctx := context.Background()
	r, err := ParseRef("oci://" + reg.Host + "/peerboot/hostile:x")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := Remote{}.repository(r)
	if err != nil {
		t.Fatal(err)
	}
	blob := func(title string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: MediaFile, Digest: godigest.FromBytes(b), Size: int64(len(b)),
			Annotations: map[string]string{ocispec.AnnotationTitle: title}}
		if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
		return d
	}
	payload := []byte("written by a hostile registry\n")
	h := sha256.Sum256(payload)
	sums := output.FormatSums([]output.Sum{{Path: "disk.img", SHA256: hex.EncodeToString(h[:])}})
	good := blob("disk.img", payload)
	sumsLayer := blob("SHA256SUMS", sums)
	retitled := func(title string) ocispec.Descriptor {
		d := good
		d.Annotations = map[string]string{ocispec.AnnotationTitle: title}
		return d
	}
	short := good
	short.Size--
	for _, c := range []struct {
		name     string
		layers   []ocispec.Descriptor
		mentions string
	}{
		{"dot-dot title", []ocispec.Descriptor{retitled("../escape"), sumsLayer}, "not a clean relative path"},
		{"deep dot-dot title", []ocispec.Descriptor{retitled("pxe/../../escape"), sumsLayer}, "not a clean relative path"},
		{"absolute title", []ocispec.Descriptor{retitled("/tmp/escape"), sumsLayer}, "not a clean relative path"},
		{"two layers one title", []ocispec.Descriptor{good, good, sumsLayer}, "two layers are titled disk.img"},
		{"size that is not the blob's", []ocispec.Descriptor{short, sumsLayer}, "the registry sent a blob that is not the 29 bytes"},
		{"a layer SHA256SUMS does not list", []ocispec.Descriptor{good, retitled("extra.efi"), sumsLayer}, "is not listed in SHA256SUMS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactImage, oras.PackManifestOptions{Layers: c.layers})
			if err != nil {
				t.Fatalf("pushing the hostile manifest: %v", err)
			}
			parent := t.TempDir()
			dst := filepath.Join(parent, "out", "default")
			_, err = Pull(ctx, "oci://"+reg.Host+"/peerboot/hostile@"+img.Digest.String(), dst, PullOptions{})
			checkRefused(t, err, dst, c.mentions)
			for _, p := range []string{filepath.Join(parent, "escape"), filepath.Join(parent, "out", "escape"), "/tmp/escape"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after the pull", p)
				}
			}
		})
	}
}

// A registry that serves a changed SHA256SUMS (listing a changed disk.img)
// beside the real signature: a pull with the key refuses it before any large
// layer is fetched, so the registry cannot make it download what the signer
// did not list.
func TestSignedPullChecksSumsBeforeLayers(t *testing.T) {
	reg := startRegistry(t)
	ctx := context.Background()
	out, pub := writeOutput(t, true)
	res, err := Push(ctx, out, "oci://"+reg.Host+"/peerboot/forged:v1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := ParseRef("oci://" + reg.Host + "/peerboot/forged:v1")
	repo, err := Remote{}.repository(r)
	if err != nil {
		t.Fatal(err)
	}
	var man, sig ocispec.Manifest
	if err := fetchJSON(ctx, repo, res.Image, &man); err != nil {
		t.Fatal(err)
	}
	if err := fetchJSON(ctx, repo, *res.Signature, &sig); err != nil {
		t.Fatal(err)
	}
	push := func(title string, b []byte) ocispec.Descriptor {
		d := ocispec.Descriptor{MediaType: MediaTypeFor(title), Digest: godigest.FromBytes(b), Size: int64(len(b)),
			Annotations: map[string]string{ocispec.AnnotationTitle: title}}
		if err := repo.Push(ctx, d, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The forged output: another disk.img, and SHA256SUMS rewritten to list it.
	disk := bytes.Repeat([]byte("not what was signed "), 100000)
	sums, err := output.ParseSums(mustRead(t, filepath.Join(out, "SHA256SUMS")))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(disk)
	for i := range sums {
		if sums[i].Path == "disk.img" {
			sums[i].SHA256 = hex.EncodeToString(h[:])
		}
	}
	var layers []ocispec.Descriptor
	for _, l := range man.Layers {
		switch l.Annotations[ocispec.AnnotationTitle] {
		case "disk.img":
			l = push("disk.img", disk)
		case "SHA256SUMS":
			l = push("SHA256SUMS", output.FormatSums(sums))
		}
		layers = append(layers, l)
	}
	forged, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactImage, oras.PackManifestOptions{Layers: layers, ManifestAnnotations: man.Annotations})
	if err != nil {
		t.Fatal(err)
	}
	// The real signature files, attached to the forged manifest.
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactSignature, oras.PackManifestOptions{
		Subject: &forged, Layers: sig.Layers, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2099-01-01T00:00:00Z"}}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "pulled")
	var log bytes.Buffer
	_, err = Pull(ctx, "oci://"+reg.Host+"/peerboot/forged@"+forged.Digest.String(), dst, PullOptions{Key: pub, Log: &log})
	for _, name := range []string{"disk.img", "peerboot.efi", "pxe/initrd.img"} {
		if strings.Contains(log.String(), "pull "+name+":") {
			t.Errorf("%s was fetched before the signature over SHA256SUMS was checked:\n%s", name, log.String())
		}
	}
	checkRefused(t, err, dst, "SHA256SUMS.sig does not verify SHA256SUMS")
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
