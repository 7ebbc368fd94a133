// Package oci publishes a build output directory to an OCI registry as an
// artifact and pulls it back, verified before anything lands in the target
// directory.
//
// The artifact is one OCI image manifest (spec v1.1, artifactType
// application/vnd.peerboot.image.v1) with one layer per file of the output
// (every file SHA256SUMS lists, plus SHA256SUMS), each titled with its path.
// Signatures and provenance are separate manifests whose subject is that
// manifest (OCI 1.1 referrers; on registries without the referrers API the
// fallback tag scheme, sha256-<digest>, indexes them). The image manifest
// names its provenance by digest (an annotation), so an unsigned output and
// each signing of it have their own manifest digest; the layers are shared.
package oci

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/peerboot/peerboot/output"
)

// Artifact types of the three kinds of manifest.
const (
	ArtifactImage      = "application/vnd.peerboot.image.v1"
	ArtifactSignature  = "application/vnd.peerboot.signature.v1"
	ArtifactProvenance = "application/vnd.peerboot.provenance.v1"
)

// Layer media types: one per kind of file an output holds.
const (
	MediaDisk       = "application/vnd.peerboot.disk.v1.raw"        // disk.img: GPT disk image
	MediaUKI        = "application/vnd.peerboot.uki.v1.efi"         // *.efi: unified kernel image
	MediaISO        = "application/vnd.peerboot.iso.v1.iso9660"     // peerboot.iso: El Torito UEFI CD image
	MediaKernel     = "application/vnd.peerboot.pxe.kernel.v1"      // pxe/vmlinuz
	MediaInitrd     = "application/vnd.peerboot.pxe.initrd.v1+zstd" // pxe/initrd.img: newc cpio, zstd
	MediaIPXE       = "application/vnd.peerboot.pxe.script.v1+ipxe" // pxe/*.ipxe
	MediaManifest   = "application/vnd.peerboot.manifest.v1+json"   // manifest.json
	MediaSums       = "application/vnd.peerboot.sha256sums.v1"      // SHA256SUMS
	MediaSumsSig    = "application/vnd.peerboot.sha256sums.sig.v1"  // SHA256SUMS.sig: base64 signature
	MediaPublicKey  = "application/vnd.peerboot.publickey.v1+pem"   // cosign.pub
	MediaProvenance = "application/vnd.peerboot.provenance.v1+dsse" // provenance.intoto.jsonl: DSSE envelope
	MediaFile       = "application/vnd.peerboot.file.v1"            // anything else
)

// Manifest annotations on the image manifest.
const (
	AnnotationRecipe           = "com.github.peerboot.recipe"
	AnnotationRecipeDigest     = "com.github.peerboot.recipe.digest"
	AnnotationDriverVersion    = "com.github.peerboot.driver.version"
	AnnotationKernelRelease    = "com.github.peerboot.kernel.release"
	AnnotationProvenanceDigest = "com.github.peerboot.provenance.digest"
)

// MediaTypeFor returns the layer media type for a file of an output directory.
func MediaTypeFor(rel string) string {
	switch base := path.Base(rel); {
	case rel == output.DiskFile:
		return MediaDisk
	case strings.HasSuffix(base, ".efi"):
		return MediaUKI
	case rel == output.ISOFile:
		return MediaISO
	case rel == output.PXEKernelPath:
		return MediaKernel
	case rel == output.PXEInitrdPath:
		return MediaInitrd
	case strings.HasSuffix(base, ".ipxe"):
		return MediaIPXE
	case rel == output.ManifestFile:
		return MediaManifest
	case rel == output.SumsFile:
		return MediaSums
	case rel == output.SumsSigFile:
		return MediaSumsSig
	case rel == output.PublicKeyFile:
		return MediaPublicKey
	case rel == output.ProvenanceFile:
		return MediaProvenance
	}
	return MediaFile
}

// Ref is a parsed oci://REGISTRY/REPO[:TAG|@DIGEST].
type Ref struct {
	registry.Reference
}

// ParseRef accepts oci://REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:....
func ParseRef(s string) (Ref, error) {
	r, err := registry.ParseReference(strings.TrimPrefix(s, "oci://"))
	if err != nil {
		return Ref{}, fmt.Errorf("%q is not an OCI reference (want oci://REGISTRY/REPO:TAG): %w", s, err)
	}
	return Ref{r}, nil
}

// Remote says how to reach a registry.
type Remote struct {
	// PlainHTTP talks HTTP instead of HTTPS; the default is HTTPS except for
	// loopback registries (localhost, 127.0.0.0/8, [::1]).
	PlainHTTP *bool
	// Credentials: $PEERBOOT_REGISTRY_USERNAME and $PEERBOOT_REGISTRY_PASSWORD
	// when set, else the docker credential store (~/.docker/config.json, as
	// `docker login` and CI login actions write it).
}

// isLoopback says whether a registry host[:port] is this machine, which is
// the only place peerboot speaks plain HTTP (and sends credentials over it)
// by default. The host must be the name localhost or an IP address the
// parser accepts as loopback: a name such as 127.attacker.example is an
// ordinary DNS name, resolved anywhere.
func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1] // [::1] without a port
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (o Remote) repository(ref Ref) (*remote.Repository, error) {
	repo, err := remote.NewRepository(ref.Registry + "/" + ref.Repository)
	if err != nil {
		return nil, err
	}
	repo.PlainHTTP = isLoopback(ref.Registry)
	// Attaching a second referrer on a registry without the referrers API
	// replaces the fallback index; deleting the old one needs the registry's
	// delete permission, which many do not grant. The old index is left to the
	// registry's garbage collection instead.
	repo.SkipReferrersGC = true
	if o.PlainHTTP != nil {
		repo.PlainHTTP = *o.PlainHTTP
	}
	client := &auth.Client{
		Client: &http.Client{Transport: retry.NewTransport(&http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			ResponseHeaderTimeout: 2 * time.Minute,
			IdleConnTimeout:       90 * time.Second,
		})},
		Cache: auth.NewCache(),
	}
	client.SetUserAgent("peerboot")
	if u, p := os.Getenv("PEERBOOT_REGISTRY_USERNAME"), os.Getenv("PEERBOOT_REGISTRY_PASSWORD"); u != "" || p != "" {
		client.Credential = auth.StaticCredential(ref.Registry, auth.Credential{Username: u, Password: p})
	} else if store, err := credentials.NewStoreFromDocker(credentials.StoreOptions{}); err == nil {
		client.Credential = credentials.Credential(store)
	}
	repo.Client = client
	return repo, nil
}

// IntegrityError is a digest, size or signature that did not match; nothing
// was written to the target directory.
type IntegrityError struct{ Err error }

func (e *IntegrityError) Error() string { return e.Err.Error() }
func (e *IntegrityError) Unwrap() error { return e.Err }

func integrity(format string, a ...any) error {
	return &IntegrityError{fmt.Errorf(format, a...)}
}

// descriptorFor returns the layer descriptor of one file.
func descriptorFor(rel, sha string, size int64) ocispec.Descriptor {
	return ocispec.Descriptor{
		MediaType:   MediaTypeFor(rel),
		Digest:      digestOf(sha),
		Size:        size,
		Annotations: map[string]string{ocispec.AnnotationTitle: rel},
	}
}

// safeRel checks a layer title before it becomes a path under the target:
// relative, clean, no "..", no hidden tricks.
func safeRel(title string) error {
	if title == "" {
		return errors.New("a layer has no title (org.opencontainers.image.title)")
	}
	if strings.HasPrefix(title, "/") || strings.Contains(title, "\\") || path.Clean(title) != title || title == "." ||
		title == ".." || strings.HasPrefix(title, "../") {
		return fmt.Errorf("layer title %q is not a clean relative path", title)
	}
	return nil
}

// Repository is the registry repository ref names, reached as o says: the
// stage cache shares publish's transport, credentials and loopback rule.
func (o Remote) Repository(ref Ref) (*remote.Repository, error) { return o.repository(ref) }
