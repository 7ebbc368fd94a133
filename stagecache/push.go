package stagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/sign"
	"github.com/peerboot/peerboot/store"
)

// Entry is one stage to push.
type Entry struct {
	Key   string
	Plan  []byte           // the stage's plan record, JSON
	Dates map[string]int64 // input digest -> date, the inputs of the stage's build clock; nil: none
}

// PushResult says what a push did.
type PushResult struct {
	Present  bool // the cache already had the key: nothing pushed
	Manifest ocispec.Descriptor
	Uploaded int64 // bytes sent
	Reused   int   // blobs the registry already had
}

// created is the manifests' creation time: fixed, so builders pushing one
// stage push one manifest.
const created = "1970-01-01T00:00:00Z"

// Push sends key's committed output from st, signed: blobs first, then the
// manifest and its signature, the tag last. A key already tagged is a no-op.
// The store is only read: the tree is written twice (once to learn its digest,
// once to upload it) and never to disk.
func (c *Cache) Push(ctx context.Context, st *store.Store, e Entry) (*PushResult, error) {
	if c.opt.Signer == nil {
		return nil, errors.New("pushing to the stage cache needs the artifact key (sign.artifact_key) to sign with")
	}
	if ok, err := c.Has(ctx, e.Key); err != nil {
		return nil, err
	} else if ok {
		return &PushResult{Present: true}, nil
	}
	if err := st.CheckOutput(e.Key); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", e.Key, err)
	}
	dir := st.OutputDir(e.Key)
	manifest, err := os.ReadFile(filepath.Join(dir, store.ManifestName))
	if err != nil {
		return nil, err
	}
	sizes, err := os.ReadFile(filepath.Join(dir, store.SizesName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w (an output committed before SIZES existed cannot be pushed)", dir, err)
	}

	// 1. The tree's digest, and the files checked against the records: a
	// damaged output is not spread to every builder.
	h, n := sha256.New(), &counter{}
	files, err := writeTree(ctx, dir, io.MultiWriter(h, n))
	if err != nil {
		return nil, fmt.Errorf("pushing %s: %w", e.Key, err)
	}
	if m, s := store.Records(files); !bytes.Equal(m, manifest) || !bytes.Equal(s, sizes) {
		return nil, fmt.Errorf("pushing %s: the stored output does not match its MANIFEST and SIZES (run `peerboot store verify`)", e.Key)
	}
	tree := ocispec.Descriptor{MediaType: MediaTree, Digest: digest.NewDigest(digest.SHA256, h), Size: n.n,
		Annotations: map[string]string{ocispec.AnnotationTitle: "tree.tar"}}

	// 2. Blobs.
	res := &PushResult{}
	layers := []ocispec.Descriptor{
		blobDesc(MediaManifest, store.ManifestName, manifest),
		blobDesc(MediaSizes, store.SizesName, sizes),
		tree,
	}
	for i, b := range [][]byte{manifest, sizes} {
		if err := c.pushBlob(ctx, layers[i], func() io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }, res, e.Key); err != nil {
			return nil, err
		}
	}
	err = c.pushBlob(ctx, tree, func() io.ReadCloser {
		pr, pw := io.Pipe()
		go func() {
			_, err := writeTree(ctx, dir, pw)
			pw.CloseWithError(err)
		}()
		return pr
	}, res, e.Key)
	if err != nil {
		return nil, err
	}

	// 3. The manifest, by digest only.
	ann := map[string]string{ocispec.AnnotationCreated: created, AnnotationKey: e.Key, AnnotationPlan: string(e.Plan)}
	if len(e.Dates) > 0 {
		b, err := json.Marshal(e.Dates) // sorted keys: the same dates give the same bytes
		if err != nil {
			return nil, err
		}
		ann[AnnotationDates] = string(b)
	}
	img, err := c.packManifest(ctx, ArtifactStage, oras.PackManifestOptions{Layers: layers, ManifestAnnotations: ann})
	if err != nil {
		return nil, fmt.Errorf("pushing the manifest of %s to %s: %w", e.Key, c.Ref, err)
	}
	res.Manifest = img

	// 4. The signature, a referrer of the manifest.
	payload, err := json.Marshal(Statement{Type: statementType, Key: e.Key, Manifest: img.Digest.String()})
	if err != nil {
		return nil, err
	}
	env, err := sign.SignEnvelope(c.opt.Signer, PayloadType, payload)
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", e.Key, err)
	}
	envBytes, err := sign.MarshalEnvelope(env)
	if err != nil {
		return nil, err
	}
	sigLayer := blobDesc(MediaStatement, "statement.intoto.jsonl", envBytes)
	if err := c.pushBlob(ctx, sigLayer, func() io.ReadCloser { return io.NopCloser(bytes.NewReader(envBytes)) }, res, e.Key); err != nil {
		return nil, err
	}
	if _, err := c.packManifest(ctx, ArtifactSignature, oras.PackManifestOptions{
		Subject: &img, Layers: []ocispec.Descriptor{sigLayer}, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: created},
	}); err != nil {
		return nil, fmt.Errorf("attaching the signature of %s: %w", e.Key, err)
	}

	// 5. The tag, last: only now is the stage a hit.
	if err := c.repo.Tag(ctx, img, e.Key); err != nil {
		return nil, fmt.Errorf("tagging %s in %s: %w", e.Key, c.Ref, err)
	}
	return res, nil
}

// manifestRetries bounds the retries of a manifest refused for an unknown blob.
const manifestRetries = 4

// packManifest pushes a manifest, retrying one the registry refused for a
// blob it does not know although this push saw every blob present: builders
// pushing one stage at once upload the same blobs (the empty config above
// all), and a registry can answer while another push is still linking one.
// The distribution registry's filesystem driver rewrites a link in place, and
// CI saw exactly this: MANIFEST_BLOB_UNKNOWN for the empty config.
func (c *Cache) packManifest(ctx context.Context, artifactType string, opts oras.PackManifestOptions) (ocispec.Descriptor, error) {
	for attempt := 1; ; attempt++ {
		d, err := oras.PackManifest(ctx, c.repo, oras.PackManifestVersion1_1, artifactType, opts)
		if err == nil || attempt == manifestRetries || !blobUnknown(err) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// blobUnknown says whether a registry refused a manifest for a blob it
// does not know.
func blobUnknown(err error) bool {
	var resp *errcode.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	for _, e := range resp.Errors {
		if e.Code == errcode.ErrorCodeManifestBlobUnknown || e.Code == errcode.ErrorCodeBlobUnknown {
			return true
		}
	}
	return false
}

func blobDesc(mediaType, title string, b []byte) ocispec.Descriptor {
	return ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b)),
		Annotations: map[string]string{ocispec.AnnotationTitle: title}}
}

// pushBlob uploads one blob unless the registry has it, with a progress line.
func (c *Cache) pushBlob(ctx context.Context, d ocispec.Descriptor, open func() io.ReadCloser, res *PushResult, key string) error {
	ok, err := c.repo.Exists(ctx, d)
	if err != nil {
		return fmt.Errorf("asking %s for a blob of %s: %w", c.Ref, key, err)
	}
	if ok {
		res.Reused++
		return nil
	}
	r := open()
	defer r.Close()
	m := progress.New(c.opt.Log, "push "+key[:min(len(key), len(stageName(key))+13)]+" "+d.Annotations[ocispec.AnnotationTitle], "B", d.Size)
	if err := c.repo.Push(ctx, d, &meterReader{r, m}); err != nil {
		return fmt.Errorf("pushing %s of %s to %s: %w", d.Annotations[ocispec.AnnotationTitle], key, c.Ref, err)
	}
	m.Done()
	res.Uploaded += d.Size
	return nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

type meterReader struct {
	r io.Reader
	m *progress.Meter
}

func (r *meterReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.m.Add(int64(n))
	return n, err
}
