package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/sign"
)

// PullOptions controls Pull.
type PullOptions struct {
	Remote
	// Key is the artifact public key (a path, file:PATH or env:VAR). With it
	// the pulled output must carry a signature that sign.Verify accepts;
	// without it only digests are checked.
	Key    string
	DBCert string // also check the UKIs' Secure Boot signatures
	Log    io.Writer
}

// PullResult describes what was pulled.
type PullResult struct {
	Image       ocispec.Descriptor
	Annotations map[string]string
	Files       int
	Bytes       int64
	Signed      bool // a signature referrer was found and pulled
	Verified    bool // sign.Verify passed with the given key
}

// maxManifest bounds a manifest read from the registry.
const maxManifest = 4 << 20

// Pull fetches ref into dir. Everything goes to a temporary directory beside
// dir first: each blob's sha256 and size are checked against its descriptor,
// SHA256SUMS must list exactly the image's other layers with the same digests,
// the provenance must be the one the manifest names, and with a key the
// signature and provenance must verify (sign.Verify). Only then is the
// directory renamed into place; on any failure dir is untouched.
// An existing dir is replaced only when it is itself an output (has SHA256SUMS).
func Pull(ctx context.Context, ref, dir string, opt PullOptions) (*PullResult, error) {
	log := opt.Log
	if log == nil {
		log = io.Discard
	}
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if err := CheckTarget(dir); err != nil {
		return nil, err
	}
	repo, err := opt.repository(r)
	if err != nil {
		return nil, err
	}

	// 1. The image manifest.
	img, err := repo.Resolve(ctx, r.Reference.Reference)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", ref, err)
	}
	var man ocispec.Manifest
	if err := fetchJSON(ctx, repo, img, &man); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if man.ArtifactType != ArtifactImage {
		return nil, fmt.Errorf("%s is a %q artifact, not a peerboot image (%s)", ref, man.ArtifactType, ArtifactImage)
	}
	res := &PullResult{Image: img, Annotations: man.Annotations}

	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".pull-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, err
	}

	// 2. Every layer, digest-checked, into the temporary directory.
	got := map[string]string{} // path -> sha256 hex
	fetchLayers := func(layers []ocispec.Descriptor) error {
		for _, l := range layers {
			title := l.Annotations[ocispec.AnnotationTitle]
			if err := safeRel(title); err != nil {
				return integrity("%s: %w", ref, err)
			}
			if _, dup := got[title]; dup {
				return integrity("%s: two layers are titled %s", ref, title)
			}
			if l.Digest.Algorithm() != "sha256" {
				return integrity("%s: layer %s uses %s, want sha256", ref, title, l.Digest.Algorithm())
			}
			if err := fetchBlob(ctx, repo, l, filepath.Join(tmp, filepath.FromSlash(title)), title, log); err != nil {
				return err
			}
			got[title] = l.Digest.Encoded()
			res.Files++
			res.Bytes += l.Size
		}
		return nil
	}
	// SHA256SUMS first (it is small), checked against the manifest's other
	// layers, and with a key its signature: the large layers are fetched only
	// once they are known to be the listed (and, with a key, signed) ones, so
	// a registry cannot make a verified pull download what the signer did not list.
	var sumsLayers, rest []ocispec.Descriptor
	titles := map[string]bool{}
	for _, l := range man.Layers {
		title := l.Annotations[ocispec.AnnotationTitle]
		if err := safeRel(title); err != nil {
			return nil, integrity("%s: %w", ref, err)
		}
		if titles[title] {
			return nil, integrity("%s: two layers are titled %s", ref, title)
		}
		titles[title] = true
		if title == output.SumsFile {
			sumsLayers = append(sumsLayers, l)
		} else {
			rest = append(rest, l)
		}
	}
	if len(sumsLayers) == 0 {
		return nil, integrity("%s has no %s layer", ref, output.SumsFile)
	}
	if sumsLayers[0].Size > maxManifest {
		return nil, integrity("%s: its %s is %d bytes, more than %d", ref, output.SumsFile, sumsLayers[0].Size, maxManifest)
	}
	if err := fetchLayers(sumsLayers); err != nil {
		return nil, err
	}
	if err := listedLayers(ref, filepath.Join(tmp, output.SumsFile), rest); err != nil {
		return nil, err
	}
	if opt.Key != "" {
		if err := checkSumsSignature(ctx, repo, img, ref, filepath.Join(tmp, output.SumsFile), opt.Key); err != nil {
			return nil, err
		}
	}
	if err := fetchLayers(rest); err != nil {
		return nil, err
	}

	// 3. SHA256SUMS names exactly the other layers, with the same digests
	// (checked again on what was fetched).
	sb, err := os.ReadFile(filepath.Join(tmp, output.SumsFile))
	if err != nil {
		return nil, integrity("%s has no %s layer", ref, output.SumsFile)
	}
	sums, err := output.ParseSums(sb)
	if err != nil {
		return nil, integrity("%s: %s: %w", ref, output.SumsFile, err)
	}
	listed := map[string]bool{output.SumsFile: true}
	for _, s := range sums {
		listed[s.Path] = true
		if got[s.Path] != s.SHA256 {
			return nil, integrity("%s: %s lists %s with sha256 %s, the artifact has %q", ref, output.SumsFile, s.Path, s.SHA256, got[s.Path])
		}
	}
	for p := range got {
		if !listed[p] {
			return nil, integrity("%s: layer %s is not listed in %s", ref, p, output.SumsFile)
		}
	}

	// 4. The referrers: newest signature and provenance.
	for _, typ := range []string{ArtifactSignature, ArtifactProvenance} {
		d, ok, err := newestReferrer(ctx, repo, img, typ)
		if err != nil {
			return nil, fmt.Errorf("%s: listing referrers: %w", ref, err)
		}
		if !ok {
			continue
		}
		var rm ocispec.Manifest
		if err := fetchJSON(ctx, repo, d, &rm); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		if rm.Subject == nil || rm.Subject.Digest != img.Digest {
			return nil, integrity("%s: referrer %s does not have the image as its subject", ref, d.Digest)
		}
		for _, l := range rm.Layers {
			switch l.Annotations[ocispec.AnnotationTitle] {
			case output.SumsSigFile, sign.ArtifactPubFile, output.ProvenanceFile:
			default:
				return nil, integrity("%s: referrer %s carries an unexpected file %q", ref, d.Digest, l.Annotations[ocispec.AnnotationTitle])
			}
		}
		if err := fetchLayers(rm.Layers); err != nil {
			return nil, err
		}
		if typ == ArtifactSignature {
			res.Signed = true
		}
	}
	if want := man.Annotations[AnnotationProvenanceDigest]; want != "" {
		if h, ok := got[output.ProvenanceFile]; !ok || "sha256:"+h != want {
			return nil, integrity("%s: the manifest names provenance %s, the attached one is %q", ref, want, h)
		}
	}

	// 5. Signatures, when a key is given.
	if opt.Key != "" {
		if !res.Signed {
			return nil, integrity("%s has no signature attached (%s), and a key was given", ref, ArtifactSignature)
		}
		if err := sign.Verify(ctx, tmp, sign.VerifyOptions{Key: opt.Key, DBCert: opt.DBCert, Log: log}); err != nil {
			var verr *sign.VerifyError
			if errors.As(err, &verr) {
				return nil, &IntegrityError{fmt.Errorf("%s: %w", ref, err)}
			}
			return nil, err
		}
		res.Verified = true
	}

	// 6. Into place.
	if err := install(tmp, dir); err != nil {
		return nil, err
	}
	return res, nil
}

// CheckTarget refuses to replace a directory that is not an earlier output.
func CheckTarget(dir string) error {
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s exists and is not a directory, so not a peerboot output: refusing to replace it", dir)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(ents) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, output.SumsFile)); err != nil {
		return fmt.Errorf("%s exists and is not a peerboot output (no %s in it): refusing to replace it", dir, output.SumsFile)
	}
	return nil
}

// install moves the verified temporary directory to dir, atomically swapping
// out an earlier output (renameat2 RENAME_EXCHANGE) when there is one.
func install(tmp, dir string) error {
	if err := fsutil.SyncTree(tmp); err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("swapping in %s: %w", dir, err)
		}
		return nil // tmp now holds the old output; the caller removes it
	} else if err == nil {
		if err := os.Remove(dir); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("moving the pulled output to %s: %w", dir, err)
	}
	return nil
}

// listedLayers checks the manifest's layers (other than SHA256SUMS) against
// SHA256SUMS before they are fetched: the same paths, the same digests.
func listedLayers(ref, sumsPath string, layers []ocispec.Descriptor) error {
	sb, err := os.ReadFile(sumsPath)
	if err != nil {
		return err
	}
	sums, err := output.ParseSums(sb)
	if err != nil {
		return integrity("%s: %s: %w", ref, output.SumsFile, err)
	}
	have := map[string]string{}
	for _, l := range layers {
		have[l.Annotations[ocispec.AnnotationTitle]] = l.Digest.Encoded()
	}
	listed := map[string]bool{}
	for _, s := range sums {
		listed[s.Path] = true
		if have[s.Path] != s.SHA256 {
			return integrity("%s: %s lists %s with sha256 %s, the artifact has %q", ref, output.SumsFile, s.Path, s.SHA256, have[s.Path])
		}
	}
	for _, l := range layers {
		if t := l.Annotations[ocispec.AnnotationTitle]; !listed[t] {
			return integrity("%s: layer %s is not listed in %s", ref, t, output.SumsFile)
		}
	}
	return nil
}

// maxSig bounds a signature file read before the large layers.
const maxSig = 64 << 10

// checkSumsSignature checks, before any large layer is fetched, that the
// newest signature referrer signs these SHA256SUMS bytes with key. sign.Verify
// checks everything again on the whole pulled directory at the end.
func checkSumsSignature(ctx context.Context, repo *remote.Repository, img ocispec.Descriptor, ref, sumsPath, key string) error {
	sums, err := os.ReadFile(sumsPath)
	if err != nil {
		return err
	}
	pub, err := sign.LoadPublicKey(key)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	d, ok, err := newestReferrer(ctx, repo, img, ArtifactSignature)
	if err != nil {
		return fmt.Errorf("%s: listing referrers: %w", ref, err)
	}
	if !ok {
		return integrity("%s has no signature attached (%s), and a key was given", ref, ArtifactSignature)
	}
	var rm ocispec.Manifest
	if err := fetchJSON(ctx, repo, d, &rm); err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if rm.Subject == nil || rm.Subject.Digest != img.Digest {
		return integrity("%s: referrer %s does not have the image as its subject", ref, d.Digest)
	}
	for _, l := range rm.Layers {
		if l.Annotations[ocispec.AnnotationTitle] != output.SumsSigFile {
			continue
		}
		if l.Size > maxSig {
			return integrity("%s: its %s is %d bytes, more than %d", ref, output.SumsSigFile, l.Size, maxSig)
		}
		b, err := content.FetchAll(ctx, repo.Blobs(), l) // checks size and digest
		if err != nil {
			return integrity("%s: %s: %w", ref, output.SumsSigFile, err)
		}
		sig, err := sign.DecodeSig(b)
		if err != nil {
			return integrity("%s: %s: %w", ref, output.SumsSigFile, err)
		}
		if err := sign.VerifyBlob(pub, sums, sig); err != nil {
			return integrity("%s: %s does not verify %s with %s: %w", ref, output.SumsSigFile, output.SumsFile, key, err)
		}
		return nil
	}
	return integrity("%s: the signature referrer %s has no %s", ref, d.Digest, output.SumsSigFile)
}

func fetchJSON(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, v any) error {
	if d.Size > maxManifest {
		return fmt.Errorf("manifest %s is %d bytes, more than %d", d.Digest, d.Size, maxManifest)
	}
	rc, err := repo.Fetch(ctx, d)
	if err != nil {
		return fmt.Errorf("fetching manifest %s: %w", d.Digest, err)
	}
	defer rc.Close()
	b, err := content.ReadAll(rc, d) // checks size and digest
	if err != nil {
		return integrity("manifest %s: %w", d.Digest, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	return nil
}

// fetchBlob streams one blob to path, hashing it on the way, and fails (the
// partial file is in the temporary directory only) on any size or digest mismatch.
func fetchBlob(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, path, title string, log io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	rc, err := repo.Blobs().Fetch(ctx, d)
	if err != nil {
		// oras-go checks the response's Content-Length against the
		// descriptor itself and says so only in words (v2.7): a blob that is
		// not the size the manifest gives is an integrity failure, not a
		// network one. TestHostileRegistryPull notices if the words change.
		if strings.Contains(err.Error(), "mismatch Content-Length") {
			return integrity("%s: the registry sent a blob that is not the %d bytes the manifest says (%v)", title, d.Size, err)
		}
		return fmt.Errorf("fetching %s (%s): %w", title, d.Digest, err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	m := progress.New(log, "pull "+title, "B", d.Size)
	n, err := io.Copy(io.MultiWriter(f, h, meterWriter{m}), io.LimitReader(rc, d.Size+1))
	if err != nil {
		return fmt.Errorf("fetching %s: %w", title, err)
	}
	m.Done()
	if n != d.Size {
		return integrity("%s: the registry sent %d bytes, the manifest says %d", title, n, d.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != d.Digest.Encoded() {
		return integrity("%s: the registry sent content with sha256 %s, the manifest says %s: the stored blob was altered", title, sum, d.Digest.Encoded())
	}
	return f.Close()
}

type meterWriter struct{ m *progress.Meter }

func (w meterWriter) Write(p []byte) (int, error) { w.m.Add(int64(len(p))); return len(p), nil }

// newestReferrer picks, among the image's referrers of one artifact type, the
// one created last (a re-signed image has several).
func newestReferrer(ctx context.Context, repo *remote.Repository, img ocispec.Descriptor, typ string) (ocispec.Descriptor, bool, error) {
	var all []ocispec.Descriptor
	err := repo.Referrers(ctx, img, typ, func(rs []ocispec.Descriptor) error {
		all = append(all, rs...)
		return nil
	})
	if err != nil || len(all) == 0 {
		return ocispec.Descriptor{}, false, err
	}
	sort.SliceStable(all, func(i, j int) bool {
		return all[i].Annotations[ocispec.AnnotationCreated] < all[j].Annotations[ocispec.AnnotationCreated]
	})
	return all[len(all)-1], true, nil
}
