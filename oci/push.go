package oci

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/sign"
)

// PushOptions controls Push.
type PushOptions struct {
	Remote
	// Tags are more tags for the same manifest, e.g. a moving <recipe>-<driver>.
	Tags []string
	// Annotations are added to the image manifest, over the derived ones
	// (driver version and kernel release can be given when they cannot be derived).
	Annotations map[string]string
	Log         io.Writer
}

// PushResult names what was pushed.
type PushResult struct {
	Image      ocispec.Descriptor
	Signature  *ocispec.Descriptor // nil when the output is not signed
	Provenance *ocispec.Descriptor
	Uploaded   int64 // bytes sent
	Reused     int   // blobs the registry already had
}

func digestOf(sha string) digest.Digest { return digest.NewDigestFromEncoded(digest.SHA256, sha) }

// localFile is one file of the output to push.
type localFile struct {
	rel, path string
	desc      ocispec.Descriptor
}

// Push publishes the output directory dir (as `peerboot build` and `peerboot
// sign` leave it) to ref, then attaches the signature and the provenance as
// referrers when dir has them. Every file is checked against SHA256SUMS first:
// a changed output is refused, not published.
func Push(ctx context.Context, dir, ref string, opt PushOptions) (*PushResult, error) {
	log := opt.Log
	if log == nil {
		log = io.Discard
	}
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if r.Reference.Reference == "" || strings.Contains(r.Reference.Reference, ":") {
		return nil, fmt.Errorf("%s: push needs a tag (oci://REGISTRY/REPO:TAG)", ref)
	}
	repo, err := opt.repository(r)
	if err != nil {
		return nil, err
	}

	// 1. What the output holds: SHA256SUMS and every file it lists, re-hashed.
	sumsPath := filepath.Join(dir, output.SumsFile)
	sb, err := os.ReadFile(sumsPath)
	if err != nil {
		return nil, fmt.Errorf("%s is not a build output: %w", dir, err)
	}
	sums, err := output.ParseSums(sb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sumsPath, err)
	}
	files := []localFile{}
	add := func(rel, want string) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		got, err := fsutil.HashFile(p)
		if err != nil {
			return err
		}
		if want != "" && got != want {
			return integrity("%s: sha256 %s, but %s lists %s: refusing to publish a changed output", p, got, output.SumsFile, want)
		}
		files = append(files, localFile{rel, p, descriptorFor(rel, got, info.Size())})
		return nil
	}
	if err := add(output.SumsFile, ""); err != nil {
		return nil, err
	}
	for _, s := range sums {
		if err := add(s.Path, s.SHA256); err != nil {
			return nil, err
		}
	}
	sort.Slice(files[1:], func(i, j int) bool { return files[1+i].rel < files[1+j].rel })

	// 2. The manifest's annotations, from manifest.json and the kernel itself.
	ann, created, err := annotations(dir)
	if err != nil {
		return nil, err
	}
	var sigFiles, provFiles []localFile
	for _, name := range []string{output.SumsSigFile, sign.ArtifactPubFile, output.ProvenanceFile} {
		p := filepath.Join(dir, name)
		info, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		h, err := fsutil.HashFile(p)
		if err != nil {
			return nil, err
		}
		f := localFile{name, p, descriptorFor(name, h, info.Size())}
		if name == output.ProvenanceFile {
			provFiles = append(provFiles, f)
			ann[AnnotationProvenanceDigest] = "sha256:" + h
		} else {
			sigFiles = append(sigFiles, f)
		}
	}
	for k, v := range opt.Annotations {
		if v == "" {
			delete(ann, k)
		} else {
			ann[k] = v
		}
	}

	// 3. Blobs, then the image manifest, then its tags.
	res := &PushResult{}
	if err := pushBlobs(ctx, repo, append(append(append([]localFile{}, files...), sigFiles...), provFiles...), res, log); err != nil {
		return nil, err
	}
	layers := make([]ocispec.Descriptor, len(files))
	for i, f := range files {
		layers[i] = f.desc
	}
	img, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ArtifactImage, oras.PackManifestOptions{
		Layers: layers, ManifestAnnotations: ann,
	})
	if err != nil {
		return nil, fmt.Errorf("pushing the manifest to %s: %w", r.Registry, err)
	}
	res.Image = img
	for _, tag := range append([]string{r.Reference.Reference}, opt.Tags...) {
		if err := repo.Tag(ctx, img, tag); err != nil {
			return nil, fmt.Errorf("tagging %s as %s: %w", img.Digest, tag, err)
		}
		fmt.Fprintf(log, "%s/%s:%s -> %s\n", r.Registry, r.Repository, tag, img.Digest)
	}

	// 4. Referrers: the signature and the provenance, each its own manifest
	// with the image as subject. Same output, same bytes, same digest.
	for _, ref := range []struct {
		typ   string
		files []localFile
		out   **ocispec.Descriptor
	}{{ArtifactSignature, sigFiles, &res.Signature}, {ArtifactProvenance, provFiles, &res.Provenance}} {
		if len(ref.files) == 0 {
			continue
		}
		var ls []ocispec.Descriptor
		for _, f := range ref.files {
			ls = append(ls, f.desc)
		}
		d, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, ref.typ, oras.PackManifestOptions{
			Subject: &img, Layers: ls, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: created},
		})
		if err != nil {
			return nil, fmt.Errorf("attaching the %s to %s: %w", ref.typ, img.Digest, err)
		}
		*ref.out = &d
		fmt.Fprintf(log, "attached %s %s\n", strings.TrimPrefix(ref.typ, "application/vnd.peerboot."), d.Digest)
	}
	if res.Signature == nil {
		fmt.Fprintf(log, "%s is not signed (no %s): pushed without a signature\n", dir, output.SumsSigFile)
	}
	return res, nil
}

func pushBlobs(ctx context.Context, repo *remote.Repository, files []localFile, res *PushResult, log io.Writer) error {
	done := map[digest.Digest]bool{}
	for _, f := range files {
		if done[f.desc.Digest] {
			continue
		}
		done[f.desc.Digest] = true
		ok, err := repo.Exists(ctx, f.desc)
		if err != nil {
			return fmt.Errorf("asking %s for %s: %w", repo.Reference.Registry, f.rel, err)
		}
		if ok {
			res.Reused++
			fmt.Fprintf(log, "%s: already in the registry\n", f.rel)
			continue
		}
		fh, err := os.Open(f.path)
		if err != nil {
			return err
		}
		m := progress.New(log, "push "+f.rel, "B", f.desc.Size)
		err = repo.Push(ctx, f.desc, &meterReader{fh, m})
		fh.Close()
		if err != nil {
			return fmt.Errorf("pushing %s to %s: %w", f.rel, repo.Reference.Registry, err)
		}
		m.Done()
		res.Uploaded += f.desc.Size
	}
	return nil
}

type meterReader struct {
	r io.Reader
	m *progress.Meter
}

func (r *meterReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.m.Add(int64(n))
	return n, err
}

// annotations derives the image manifest's annotations from manifest.json
// (recipe, digest, build time, driver version from the driver source's
// package version) and pxe/vmlinuz (kernel release from the bzImage header).
func annotations(dir string) (map[string]string, string, error) {
	p := filepath.Join(dir, output.ManifestFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, "", fmt.Errorf("%s is not a build output: %w", dir, err)
	}
	var m output.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, "", fmt.Errorf("%s: %w", p, err)
	}
	created := time.Unix(m.SourceDateEpoch, 0).UTC().Format(time.RFC3339)
	ann := map[string]string{
		ocispec.AnnotationCreated: created,
		ocispec.AnnotationTitle:   m.Recipe,
		AnnotationRecipe:          m.Recipe,
		AnnotationRecipeDigest:    m.RecipeDigest,
	}
	for _, in := range m.Inputs {
		if in.Role == "driver-source" {
			if v := DriverVersion(in.Name); v != "" {
				ann[AnnotationDriverVersion] = v
			}
		}
	}
	if rel, err := KernelRelease(filepath.Join(dir, output.PXEDir, output.PXEKernel)); err == nil {
		ann[AnnotationKernelRelease] = rel
	}
	return ann, created, nil
}

// DriverVersion takes the NVIDIA version out of a driver source input name:
// "nvidia-open-kernel-source_535.261.03-1" gives 535.261.03. Other names
// (a git source) give "".
func DriverVersion(name string) string {
	_, v, ok := strings.Cut(name, "_")
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, "-")
	if i := strings.Index(v, ":"); i >= 0 {
		v = v[i+1:] // an epoch
	}
	return v
}

// KernelRelease reads the release ("6.1.0-peerboot") from an x86 bzImage:
// the setup header's kernel_version field points at "RELEASE (builder) #1 ...".
func KernelRelease(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return "", fmt.Errorf("%s is not a bzImage", path)
	}
	off := int64(binary.LittleEndian.Uint16(hdr[0x20E:])) + 0x200
	buf := make([]byte, 256)
	n, _ := f.ReadAt(buf, off)
	s := string(buf[:n])
	if i := strings.IndexAny(s, " \x00"); i > 0 {
		return s[:i], nil
	}
	return "", fmt.Errorf("%s: no kernel version string", path)
}
