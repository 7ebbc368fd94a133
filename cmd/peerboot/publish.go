package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/mirror"
	"github.com/peerboot/peerboot/oci"
	"github.com/peerboot/peerboot/output"
)

// registryFlags are the flags publish and pull share.
type registryFlags struct {
	plainHTTP, https bool
}

func (f *registryFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.plainHTTP, "plain-http", false, "talk HTTP to the registry (the default for 127.0.0.1 and localhost only)")
	cmd.Flags().BoolVar(&f.https, "https", false, "talk HTTPS even to a loopback registry")
}

func (f *registryFlags) remote() oci.Remote {
	var r oci.Remote
	switch {
	case f.plainHTTP:
		v := true
		r.PlainHTTP = &v
	case f.https:
		v := false
		r.PlainHTTP = &v
	}
	return r
}

// ociError maps an oci error onto the exit codes: a digest or signature
// mismatch is integrity, anything else on the way to the registry is network.
func ociError(err error) error {
	var ie *oci.IntegrityError
	if errors.As(err, &ie) {
		return exitcode.Tag(exitcode.Integrity, err)
	}
	return exitcode.Tag(exitcode.Network, err)
}

func publishCmd() *cobra.Command {
	var rf registryFlags
	var opt oci.PushOptions
	var annotations []string
	var driver, kernel string
	var pubJSON bool
	var httpDir string
	cmd := &cobra.Command{
		Use:   "publish OUTDIR oci://REGISTRY/REPO:TAG [--tag T]... | publish OUTDIR --http DIR",
		Short: "Push a build output to an OCI registry, with its signature and provenance as referrers",
		Long: `publish pushes OUTDIR (as build and sign leave it) as one OCI artifact: an image
manifest of artifactType ` + oci.ArtifactImage + ` with one layer per file
(SHA256SUMS and every file it lists, each re-hashed first: a changed output is not
published), titled with its path, under peerboot's own media types:

  disk.img                 ` + oci.MediaDisk + `
  peerboot.iso             ` + oci.MediaISO + `
  *.efi                    ` + oci.MediaUKI + `
  pxe/vmlinuz              ` + oci.MediaKernel + `
  pxe/initrd.img           ` + oci.MediaInitrd + `
  pxe/*.ipxe               ` + oci.MediaIPXE + `
  manifest.json            ` + oci.MediaManifest + `
  SHA256SUMS               ` + oci.MediaSums + `
  other files              ` + oci.MediaFile + `

The manifest is annotated with the recipe (` + oci.AnnotationRecipe + `, .digest), the
driver version (` + oci.AnnotationDriverVersion + `, from the driver source package, or
--driver-version), the kernel release (` + oci.AnnotationKernelRelease + `, from
pxe/vmlinuz, or --kernel-release), the provenance digest
(` + oci.AnnotationProvenanceDigest + `) and org.opencontainers.image.created = the
build's SOURCE_DATE_EPOCH, so the same output always has the same manifest digest.

A signed output's SHA256SUMS.sig and cosign.pub (` + oci.MediaSumsSig + `,
` + oci.MediaPublicKey + `) form a referrer of artifactType ` + oci.ArtifactSignature + `,
and provenance.intoto.jsonl (` + oci.MediaProvenance + `) one of ` + oci.ArtifactProvenance + `,
both with the image as subject: the OCI 1.1 referrers API where the registry has it,
else the fallback tag sha256-<digest>.

Credentials: $PEERBOOT_REGISTRY_USERNAME / $PEERBOOT_REGISTRY_PASSWORD, else the docker
credential store (docker login). Exit 6 for a changed output, 5 when the registry
fails, 2 for a bad command line.

--http DIR instead writes OUTDIR's files (every file SHA256SUMS lists, each re-hashed
first) into DIR as an HTTP mirror's layout: DIR/sha256/<hex of the file's sha256>.
Copy DIR to any web server, object store or CDN and give its URL to
` + "`peerboot serve --files-url URL`" + `: nodes then fetch their kernel and initrd from
there (docs/pxe-boot.md). An entry already in DIR is kept when whole, replaced when not.`,
		Args: rangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if httpDir != "" || len(args) == 1 {
				return publishHTTP(cmd, args, httpDir, pubJSON)
			}
			if _, err := oci.ParseRef(args[1]); err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			if _, err := os.Stat(filepath.Join(args[0], output.SumsFile)); err != nil {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s is not a build output: %w", args[0], err))
			}
			opt.Remote = rf.remote()
			opt.Log = cmd.ErrOrStderr()
			opt.Annotations = map[string]string{}
			for _, a := range annotations {
				k, v, ok := strings.Cut(a, "=")
				if !ok || k == "" {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("--annotation %q: want KEY=VALUE", a))
				}
				opt.Annotations[k] = v
			}
			if driver != "" {
				opt.Annotations[oci.AnnotationDriverVersion] = driver
			}
			if kernel != "" {
				opt.Annotations[oci.AnnotationKernelRelease] = kernel
			}
			res, err := oci.Push(cmd.Context(), args[0], args[1], opt)
			if err != nil {
				return ociError(err)
			}
			w := cmd.OutOrStdout()
			if pubJSON {
				j := publishJSON{Ref: args[1], Image: string(res.Image.Digest), Uploaded: res.Uploaded, Reused: res.Reused, Tags: append([]string{}, opt.Tags...)}
				if res.Signature != nil {
					j.Signature = string(res.Signature.Digest)
				}
				if res.Provenance != nil {
					j.Provenance = string(res.Provenance.Digest)
				}
				return writeJSON(w, j)
			}
			fmt.Fprintf(w, "image %s (%d bytes uploaded, %d blobs already there)\n", res.Image.Digest, res.Uploaded, res.Reused)
			if res.Signature != nil {
				fmt.Fprintf(w, "signature %s\n", res.Signature.Digest)
			}
			if res.Provenance != nil {
				fmt.Fprintf(w, "provenance %s\n", res.Provenance.Digest)
			}
			return nil
		},
	}
	rf.add(cmd)
	cmd.Flags().StringArrayVar(&opt.Tags, "tag", nil, "another tag for the same manifest (repeatable), e.g. a moving <recipe>-<driver>")
	cmd.Flags().StringArrayVar(&annotations, "annotation", nil, "KEY=VALUE manifest annotation (repeatable; an empty VALUE removes a derived one)")
	cmd.Flags().StringVar(&driver, "driver-version", "", "driver version annotation, when it cannot be derived (a git driver source)")
	cmd.Flags().StringVar(&kernel, "kernel-release", "", "kernel release annotation, when there is no pxe/vmlinuz")
	cmd.Flags().StringVar(&httpDir, "http", "", "write OUTDIR's files into DIR/sha256/<hex>, an HTTP mirror's layout for serve --files-url, instead of pushing")
	addJSONFlag(cmd, &pubJSON)
	return cmd
}

// publishHTTPJSON is `peerboot publish --http DIR --json`: each file and its entry.
type publishHTTPJSON struct {
	Dir   string                `json:"dir"`
	Files []publishHTTPFileJSON `json:"files"`
}

type publishHTTPFileJSON struct {
	File   string `json:"file"`
	Path   string `json:"path"` // under dir
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Copied bool   `json:"copied"`
}

// publishHTTP is publish --http: flags -> mirror.Publish.
func publishHTTP(cmd *cobra.Command, args []string, dir string, asJSON bool) error {
	switch {
	case dir == "":
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("publish: want oci://REGISTRY/REPO:TAG or --http DIR after %s (usage: %s)", args[0], cmd.UseLine()))
	case len(args) == 2:
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("publish: --http DIR writes a directory, not %s: give one or the other", args[1]))
	}
	if _, err := os.Stat(filepath.Join(args[0], output.SumsFile)); err != nil {
		return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s is not a build output: %w", args[0], err))
	}
	files, err := mirror.Publish(cmd.Context(), args[0], dir)
	var me *mirror.MismatchError
	if errors.As(err, &me) {
		return exitcode.Tag(exitcode.Integrity, err)
	}
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if asJSON {
		j := publishHTTPJSON{Dir: dir, Files: []publishHTTPFileJSON{}}
		for _, f := range files {
			j.Files = append(j.Files, publishHTTPFileJSON{File: f.File, Path: mirror.Path(f.SHA256), SHA256: f.SHA256, Size: f.Size, Copied: f.Copied})
		}
		return writeJSON(w, j)
	}
	copied := 0
	for _, f := range files {
		state := "already there"
		if f.Copied {
			state, copied = "copied", copied+1
		}
		fmt.Fprintf(w, "%s  %s (%s)\n", mirror.Path(f.SHA256), f.File, state)
	}
	fmt.Fprintf(w, "%s: %d files, %d copied; serve them with peerboot serve --files-url URL-OF-%s\n", dir, len(files), copied, dir)
	return nil
}

func pullCmd() *cobra.Command {
	var rf registryFlags
	var opt oci.PullOptions
	var pullJSON bool
	cmd := &cobra.Command{
		Use:   "pull oci://REGISTRY/REPO:TAG|@DIGEST DIR [--key PUB]",
		Short: "Fetch a published output, verified, into DIR",
		Long: `pull fetches an artifact that publish pushed into DIR, a directory laid out like a
build output (so run, verify and a netboot server can use it as is).

Nothing is written to DIR until everything checks out: the blobs go to a temporary
directory beside it, each one's sha256 and size are checked against the manifest,
SHA256SUMS must list exactly the other layers with the same digests, the newest
signature and provenance referrers are fetched the same way and the provenance
must be the one the manifest names; with --key (a PEM public key, file:PATH or
env:VAR) the output must be signed and pass the same checks as peerboot verify
(--db-cert adds the UKI's Secure Boot signature). Only then is the directory
renamed to DIR. An existing DIR is replaced atomically, and only when it is itself
an output (holds SHA256SUMS).

Exit 6 when a digest or signature does not match (DIR untouched), 5 when the
registry fails, 2 for a bad command line.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := oci.ParseRef(args[0]); err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			if err := oci.CheckTarget(args[1]); err != nil {
				return exitcode.Tag(exitcode.Usage, err)
			}
			opt.Remote = rf.remote()
			opt.Log = cmd.ErrOrStderr()
			res, err := oci.Pull(cmd.Context(), args[0], args[1], opt)
			if err != nil {
				return ociError(err)
			}
			if pullJSON {
				return writeJSON(cmd.OutOrStdout(), pullJSONOut{Dir: args[1], Ref: args[0], Image: string(res.Image.Digest), Recipe: res.Annotations[oci.AnnotationRecipe],
					Files: res.Files, Bytes: res.Bytes, Verified: res.Verified})
			}
			state := "digests checked, no --key: signature not verified"
			if res.Verified {
				state = "signature and provenance verified"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d files, %d bytes from %s (%s; %s)\n", args[1], res.Files, res.Bytes, res.Image.Digest, res.Annotations[oci.AnnotationRecipe], state)
			return nil
		},
	}
	rf.add(cmd)
	cmd.Flags().StringVar(&opt.Key, "key", "", "artifact public key (PEM; path, file:PATH or env:VAR): the output must be signed with it")
	cmd.Flags().StringVar(&opt.DBCert, "db-cert", "", "also check the UKI's Secure Boot signature against this certificate")
	addJSONFlag(cmd, &pullJSON)
	return cmd
}

// publishJSON is `peerboot publish --json`.
type publishJSON struct {
	Ref        string   `json:"ref"`
	Image      string   `json:"image"` // the manifest's digest
	Uploaded   int64    `json:"uploaded"`
	Reused     int      `json:"reused"`
	Tags       []string `json:"tags"`
	Signature  string   `json:"signature"`  // the signature referrer's digest; "" when unsigned
	Provenance string   `json:"provenance"` // the provenance referrer's digest; ""
}

// pullJSONOut is `peerboot pull --json`.
type pullJSONOut struct {
	Dir      string `json:"dir"`
	Ref      string `json:"ref"`
	Image    string `json:"image"`
	Recipe   string `json:"recipe"`
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
	Verified bool   `json:"verified"` // signature and provenance checked with --key
}
