package stagecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/sign"
	"github.com/peerboot/peerboot/store"
)

// Bounds on what is read whole from a registry.
const (
	maxManifest   = 4 << 20  // a manifest
	maxRecords    = 64 << 20 // MANIFEST or SIZES
	maxStatement  = 64 << 10 // the signed statement
	maxSignatures = 32       // signature referrers tried
)

// Pulled is a stage fetched into the store.
type Pulled struct {
	Manifest ocispec.Descriptor
	Bytes    int64            // the tree's size
	Dates    map[string]int64 // input digest -> date, as the signer's build clock read them
	Plan     []byte           // the stage's plan record
	SignedBy string           // the key id that verified it
}

// Pull fetches key into st when the cache has it: (nil, nil) when it does
// not. Every check comes before the store's commit: the manifest signed by a
// trusted key over its exact digest, its stage key, each blob's digest and
// size, and the unpacked files equal to the signed MANIFEST and SIZES. A
// failed check is a *RefusedError and leaves the store as it was.
func (c *Cache) Pull(ctx context.Context, st *store.Store, key string) (*Pulled, error) {
	if len(c.opt.Trust) == 0 {
		return nil, errors.New("pulling from the stage cache needs a key to verify with (sign.artifact_key, cache.keys or --cache-key)")
	}
	img, err := c.repo.Resolve(ctx, key)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("asking %s for %s: %w", c.Ref, key, err)
	}

	// 1. The manifest, and a signature by a trusted key over its digest.
	var man ocispec.Manifest
	if err := c.fetchJSON(ctx, img, &man, key); err != nil {
		return nil, err
	}
	if man.ArtifactType != ArtifactStage {
		return nil, refused(key, "the tag names a %q artifact, not a stage (%s)", man.ArtifactType, ArtifactStage)
	}
	if got := man.Annotations[AnnotationKey]; got != key {
		return nil, refused(key, "the manifest is for stage %q", got)
	}
	signer, err := c.checkSignature(ctx, img, key)
	if err != nil {
		return nil, err
	}
	res := &Pulled{Manifest: img, Plan: []byte(man.Annotations[AnnotationPlan]), SignedBy: signer}
	if d := man.Annotations[AnnotationDates]; d != "" {
		if err := json.Unmarshal([]byte(d), &res.Dates); err != nil {
			return nil, refused(key, "the manifest's %s: %v", AnnotationDates, err)
		}
	}

	// 2. The layers: MANIFEST, SIZES, tree, as Push writes them.
	if len(man.Layers) != 3 || man.Layers[0].MediaType != MediaManifest || man.Layers[1].MediaType != MediaSizes || man.Layers[2].MediaType != MediaTree {
		return nil, refused(key, "the manifest's layers are not %s, %s, %s", MediaManifest, MediaSizes, MediaTree)
	}
	for _, l := range man.Layers {
		if l.Digest.Validate() != nil || l.Digest.Algorithm() != "sha256" || l.Size < 0 {
			return nil, refused(key, "layer %s: digest %q is not a sha256", l.MediaType, l.Digest)
		}
	}
	records := make([][]byte, 2)
	for i, l := range man.Layers[:2] {
		if l.Size > maxRecords {
			return nil, refused(key, "its %s is %d bytes, more than %d", l.MediaType, l.Size, maxRecords)
		}
		if records[i], err = content.FetchAll(ctx, c.repo.Blobs(), l); err != nil { // checks size and digest
			return nil, c.blobError(key, l, err)
		}
	}

	// 3. The tree, into a locked scratch directory, then the store's commit.
	sc, err := st.OpenScratch("pull-" + stageName(key))
	if err != nil {
		return nil, err
	}
	defer sc.Remove()
	out := filepath.Join(sc.Dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	files, err := c.fetchTree(ctx, man.Layers[2], out, key)
	if err != nil {
		return nil, err
	}
	if m, s := store.Records(files); !bytes.Equal(m, records[0]) || !bytes.Equal(s, records[1]) {
		return nil, refused(key, "the tree's files are not the ones its signed MANIFEST and SIZES list")
	}
	if err := st.CommitOutput(key, out); err != nil {
		return nil, fmt.Errorf("committing %s: %w", key, err)
	}
	res.Bytes = man.Layers[2].Size
	return res, nil
}

// checkSignature finds, among the manifest's signature referrers, one whose
// statement a trusted key signed and that names this key and this manifest
// digest, and returns that key's id.
func (c *Cache) checkSignature(ctx context.Context, img ocispec.Descriptor, key string) (string, error) {
	var sigs []ocispec.Descriptor
	err := c.repo.Referrers(ctx, img, ArtifactSignature, func(rs []ocispec.Descriptor) error {
		sigs = append(sigs, rs...)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("listing the signatures of %s in %s: %w", key, c.Ref, err)
	}
	if len(sigs) == 0 {
		return "", refused(key, "unsigned: no signature (%s) is attached to %s", ArtifactSignature, img.Digest)
	}
	var why []string
	for i, d := range sigs {
		if i == maxSignatures {
			why = append(why, fmt.Sprintf("and %d more not tried", len(sigs)-i))
			break
		}
		id, err := c.checkOne(ctx, img, d, key)
		if err == nil {
			return id, nil
		}
		why = append(why, err.Error())
	}
	return "", refused(key, "no signature by a trusted key (%s): %s", keyIDs(c.opt.Trust), strings.Join(why, "; "))
}

func (c *Cache) checkOne(ctx context.Context, img, d ocispec.Descriptor, key string) (string, error) {
	var sm ocispec.Manifest
	if err := c.fetchJSON(ctx, d, &sm, key); err != nil {
		return "", err
	}
	if sm.Subject == nil || sm.Subject.Digest != img.Digest {
		return "", fmt.Errorf("signature %s is not about %s", d.Digest, img.Digest)
	}
	if len(sm.Layers) != 1 || sm.Layers[0].MediaType != MediaStatement || sm.Layers[0].Size > maxStatement {
		return "", fmt.Errorf("signature %s does not hold one statement (%s, at most %d bytes)", d.Digest, MediaStatement, maxStatement)
	}
	env, err := content.FetchAll(ctx, c.repo.Blobs(), sm.Layers[0])
	if err != nil {
		return "", fmt.Errorf("signature %s: %w", d.Digest, err)
	}
	var whyKeys []string
	for _, pub := range c.opt.Trust {
		payload, err := sign.OpenEnvelope(env, pub, PayloadType)
		if err != nil {
			whyKeys = append(whyKeys, err.Error())
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		var s Statement
		if err := dec.Decode(&s); err != nil {
			return "", fmt.Errorf("signature %s: statement: %w", d.Digest, err)
		}
		if s.Type != statementType || s.Key != key || s.Manifest != img.Digest.String() {
			return "", fmt.Errorf("signature %s signs stage %q manifest %s, not %s at %s", d.Digest, s.Key, s.Manifest, key, img.Digest)
		}
		id, _ := sign.KeyID(pub)
		return shortID(id), nil
	}
	return "", fmt.Errorf("signature %s: %s", d.Digest, strings.Join(whyKeys, "; "))
}

// fetchTree streams the tree layer into out, hashing it on the way; the
// digest and size are checked when it has been read whole.
func (c *Cache) fetchTree(ctx context.Context, d ocispec.Descriptor, out, key string) ([]store.OutputFile, error) {
	rc, err := c.repo.Blobs().Fetch(ctx, d)
	if err != nil {
		return nil, c.blobError(key, d, err)
	}
	defer rc.Close()
	root, err := os.OpenRoot(out)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	h, n := sha256.New(), &counter{}
	m := progress.New(c.opt.Log, "pull "+key[:min(len(key), len(stageName(key))+13)], "B", d.Size)
	r := io.TeeReader(io.LimitReader(rc, d.Size+1), io.MultiWriter(h, n, meterWriter{m}))
	files, err := extractTree(ctx, r, root)
	if err != nil {
		// A malformed tree is refused; the digest says whether the registry altered it.
		if _, derr := io.Copy(io.Discard, r); derr == nil && hex.EncodeToString(h.Sum(nil)) != d.Digest.Encoded() {
			return nil, refused(key, "the registry sent a tree whose sha256 is not the manifest's %s: the stored blob was altered", d.Digest.Encoded())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, refused(key, "%v", err)
	}
	if _, err := io.Copy(io.Discard, r); err != nil { // the tar's end padding
		return nil, fmt.Errorf("fetching the tree of %s: %w", key, err)
	}
	m.Done()
	if n.n != d.Size {
		return nil, refused(key, "the registry sent %d bytes of tree, the manifest says %d", n.n, d.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != d.Digest.Encoded() {
		return nil, refused(key, "the registry sent a tree whose sha256 is %s, not the manifest's %s: the stored blob was altered", sum, d.Digest.Encoded())
	}
	return files, nil
}

func (c *Cache) fetchJSON(ctx context.Context, d ocispec.Descriptor, v any, key string) error {
	if d.Size > maxManifest {
		return refused(key, "manifest %s is %d bytes, more than %d", d.Digest, d.Size, maxManifest)
	}
	b, err := content.FetchAll(ctx, c.repo, d) // checks size and digest
	if err != nil {
		return c.blobError(key, d, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return refused(key, "manifest %s: %v", d.Digest, err)
	}
	return nil
}

// blobError words a failed fetch: content that is not what its descriptor
// says is a refusal, anything else a network problem.
func (c *Cache) blobError(key string, d ocispec.Descriptor, err error) error {
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, io.ErrUnexpectedEOF) ||
		strings.Contains(err.Error(), "mismatch Content-Length") {
		return refused(key, "%s %s: the registry sent other bytes than the digest names: %v", d.MediaType, d.Digest, err)
	}
	return fmt.Errorf("fetching %s of %s from %s: %w", d.MediaType, key, c.Ref, err)
}

type meterWriter struct{ m *progress.Meter }

func (w meterWriter) Write(p []byte) (int, error) { w.m.Add(int64(len(p))); return len(p), nil }
