// Package stagecache is the remote stage cache: stage outputs kept as signed
// OCI artifacts in one registry repository, tagged by their action key, so a
// stage built once (on a laptop, in one CI job) is fetched instead of built
// everywhere else.
//
// A stage's artifact is an OCI 1.1 image manifest of artifactType
// application/vnd.peerboot.stage.v1 with three layers: the output's MANIFEST,
// its SIZES (the store's own records, byte for byte) and its tree (a
// deterministic tar of everything else), annotated with the stage key, the
// stage's plan record and the dates of the inputs its build clock read. The
// manifest holds no time and no signature, so builders pushing one stage push
// one manifest. The signature is a referrer (artifactType
// application/vnd.peerboot.stage.signature.v1) holding a DSSE envelope, signed
// with the artifact key, over a statement naming the key and the manifest's
// digest; it is pushed before the tag, and the tag last, so no partial push is
// ever a hit.
//
// A pull trusts nothing by name: the manifest must carry a signature by a
// configured key over exactly its digest, and every blob must match the
// digest the manifest gives; the tree is unpacked into a locked scratch
// directory and committed through the store's own commit only when its files
// equal the signed MANIFEST and SIZES.
package stagecache

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"strings"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/peerboot/peerboot/oci"
	"github.com/peerboot/peerboot/sign"
)

// Artifact and media types.
const (
	ArtifactStage     = "application/vnd.peerboot.stage.v1"
	ArtifactSignature = "application/vnd.peerboot.stage.signature.v1"
	MediaManifest     = "application/vnd.peerboot.stage.manifest.v1"       // the output's MANIFEST
	MediaSizes        = "application/vnd.peerboot.stage.sizes.v1"          // the output's SIZES
	MediaTree         = "application/vnd.peerboot.stage.tree.v1.tar"       // everything else, as a tar
	MediaStatement    = "application/vnd.peerboot.stage.statement.v1+dsse" // the signed statement
	PayloadType       = "application/vnd.peerboot.stage.statement.v1+json" // the DSSE payload type
)

// Annotations on a stage manifest.
const (
	AnnotationKey   = "com.github.peerboot.stage.key"
	AnnotationPlan  = "com.github.peerboot.stage.plan"  // the stage's plan record (JSON)
	AnnotationDates = "com.github.peerboot.stage.dates" // input digest -> its date (JSON), for the puller's build clock
)

// statementType is the statement's "type".
const statementType = "peerboot-stage/v1"

// Statement is what a stage's signature covers: the stage key, and the digest
// of the manifest that carries it (which names every blob by digest).
type Statement struct {
	Type     string `json:"type"`
	Key      string `json:"key"`
	Manifest string `json:"manifest"`
}

// Options says how to reach the registry and which keys to sign and trust with.
type Options struct {
	oci.Remote
	// Signer signs pushes (the recipe's sign.artifact_key); nil: Push refuses.
	Signer crypto.Signer
	// Trust are the keys a pulled stage must be signed with; none: Pull refuses.
	Trust []crypto.PublicKey
	Log   io.Writer
}

// Cache is one registry repository used as a stage cache.
type Cache struct {
	Ref  string // as given, for messages
	repo *remote.Repository
	opt  Options
}

// ParseRepo accepts a registry repository, oci://REGISTRY/REPO or
// REGISTRY/REPO: no tag or digest (the stage key is the tag).
func ParseRepo(s string) (oci.Ref, error) {
	r, err := oci.ParseRef(s)
	if err != nil {
		return oci.Ref{}, err
	}
	if r.Reference.Reference != "" {
		return oci.Ref{}, fmt.Errorf("%q names a tag or digest: a stage cache is a repository (oci://REGISTRY/REPO); each stage is tagged by its key", s)
	}
	return r, nil
}

// Open checks ref and prepares the connection; it reads no network.
func Open(ref string, opt Options) (*Cache, error) {
	r, err := ParseRepo(ref)
	if err != nil {
		return nil, err
	}
	repo, err := opt.Repository(r)
	if err != nil {
		return nil, err
	}
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	return &Cache{Ref: r.Registry + "/" + r.Repository, repo: repo, opt: opt}, nil
}

// Has says whether the repository tags key: a complete, pushed stage (whose
// signature and blobs Pull still checks).
func (c *Cache) Has(ctx context.Context, key string) (bool, error) {
	_, err := c.repo.Resolve(ctx, key)
	if errors.Is(err, errdef.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("asking %s for %s: %w", c.Ref, key, err)
	}
	return true, nil
}

// RefusedError is a stage in the cache that failed a check: unsigned, signed
// by a key not trusted, or content that is not what the signature covers.
// Nothing of it entered the store.
type RefusedError struct {
	Key string
	Err error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("remote cache: %s refused: %v", e.Key, e.Err)
}
func (e *RefusedError) Unwrap() error { return e.Err }

func refused(key, format string, a ...any) error {
	return &RefusedError{Key: key, Err: fmt.Errorf(format, a...)}
}

// keyIDs names the trusted keys for messages.
func keyIDs(keys []crypto.PublicKey) string {
	var ids []string
	for _, k := range keys {
		id, err := sign.KeyID(k)
		if err != nil {
			id = "?"
		}
		ids = append(ids, shortID(id))
	}
	return strings.Join(ids, ", ")
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:16]
	}
	return id
}

// stageName is the stage part of a key ("kernel" of "kernel-<sha256>").
func stageName(key string) string {
	if i := strings.LastIndexByte(key, '-'); i > 0 {
		return key[:i]
	}
	return key
}
