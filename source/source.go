// Package source unpacks a stage's pinned source input (a source .deb holding a
// tarball under /usr/src, a tarball, or a git commit) into a directory.
package source

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/debfile"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

// Unpack extracts in into dir and returns the source root: the directory below dir
// that holds the tree, after descending through single-directory levels (a source
// tarball's "linux-source-6.1/", nvidia's "modules/nvidia-open-kernel/").
func Unpack(ctx context.Context, st *store.Store, in lock.Input, dir string) (string, error) {
	var err error
	switch in.Kind {
	case lock.KindDeb:
		err = unpackDeb(ctx, st.BlobPath(in.SHA256), dir)
	case lock.KindURL:
		err = untar(ctx, st.BlobPath(in.SHA256), dir)
	case lock.KindGit:
		err = gitArchive(ctx, st.GitDir(in.URL), in.Commit, dir)
	default:
		err = fmt.Errorf("unknown source kind %q", in.Kind)
	}
	if err != nil {
		return "", fmt.Errorf("unpacking %s: %w", in.Name, err)
	}
	return descend(dir)
}

// unpackDeb finds the one source tarball under usr/src in the package and untars it.
func unpackDeb(ctx context.Context, debPath, dir string) error {
	f, err := os.Open(debPath)
	if err != nil {
		return err
	}
	defer f.Close()
	var tarball string
	err = debfile.Data(f, func(h *tar.Header, body io.Reader) error {
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg || !strings.HasPrefix(name, "usr/src/") || !strings.Contains(filepath.Base(name), ".tar") {
			return nil
		}
		if tarball != "" {
			return fmt.Errorf("more than one source tarball under usr/src: %s and %s", tarball, name)
		}
		tarball = filepath.Join(dir, filepath.Base(name))
		out, err := os.Create(tarball)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, body); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		return err
	}
	if tarball == "" {
		return fmt.Errorf("%s has no source tarball under usr/src", filepath.Base(debPath))
	}
	if err := untar(ctx, tarball, dir); err != nil {
		return err
	}
	return os.Remove(tarball)
}

// untar uses the host's tar: it is several times faster than Go's xz reader on a
// kernel tree, and the bytes it writes are fixed by the pinned archive.
func untar(ctx context.Context, archive, dir string) error {
	return run(ctx, "tar", "-xf", archive, "-C", dir, "--no-same-owner", "--no-same-permissions")
}

func gitArchive(ctx context.Context, gitDir, commit, dir string) error {
	arch := exec.CommandContext(ctx, "git", "--git-dir", gitDir, "archive", "--format=tar", commit)
	ex := exec.CommandContext(ctx, "tar", "-x", "-C", dir, "--no-same-owner")
	pipe, err := arch.StdoutPipe()
	if err != nil {
		return err
	}
	ex.Stdin = pipe
	var e1, e2 bytes.Buffer
	arch.Stderr, ex.Stderr = &e1, &e2
	if err := arch.Start(); err != nil {
		return err
	}
	if err := ex.Run(); err != nil {
		arch.Wait()
		return fmt.Errorf("tar: %w: %s", err, e2.String())
	}
	if err := arch.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", commit, err, e1.String())
	}
	return nil
}

func descend(dir string) (string, error) {
	for {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		if len(entries) != 1 || !entries[0].IsDir() {
			return dir, nil
		}
		dir = filepath.Join(dir, entries[0].Name())
	}
}

func run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return nil
}
