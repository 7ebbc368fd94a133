package driver

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// releaseTree is one of NVIDIA's release trees kept beside the repository for
// CI, which reaches no git host: `git archive --format=tar
// --prefix=open-gpu-kernel-modules-TAG/ TAG | zstd -19` of a tag of
// NVIDIA/open-gpu-kernel-modules (shared/inputs/open-gpu-kernel-modules/README.md).
type releaseTree struct {
	tag, sha256 string
	size        int64
}

// releaseTrees maps the commit a recipe pins to its tree. The sha256 is of the
// .tar.zst as the README lists it; the archive's pax header must also name
// the commit, so a file renamed onto another tag cannot pass.
var releaseTrees = map[string]releaseTree{
	"23e9e7621487fe632040a370249f690a456967dd": {"550.163.01", "09f6861cabd42ecf8fb48a84dbaf2a59b3f365bbc1a78ee4be71576698423f82", 8334138},
	"2b436058a616676ec888ef3814d1db6b2220f2eb": {"580.95.05", "ee09b2272c9c8dae50de4442ec5947912a676347a45432267efa25fdc69c4e40", 15721760},
	"1a5075f82128be3603d4a4657c7b689234306778": {"580.142", "97e68d48df672b555a1247938fee84b0f9835c34e8737157aa5199d727f1cdf7", 15750880},
	"df1c9a3de2be4b130f4fc7680f7198193d8ac6ad": {"595.45.04", "7396a8b3db2a421130b5ee5a21f364f8e78304d8535c17ae79f0b79b34403b21", 17324030},
}

// releaseTreeDir is where the release trees are: $PEERBOOT_NVIDIA_TREES, else
// shared/inputs/open-gpu-kernel-modules beside the repository's root.
func releaseTreeDir() (string, error) {
	if d := os.Getenv("PEERBOOT_NVIDIA_TREES"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "inputs", "open-gpu-kernel-modules"), nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = up
	}
}

// unpackReleaseTree unpacks the release tree of commit into dst (the archive's
// top directory stripped), after checking its size and sha256; with paths, only
// those files. It returns "" and why not when there is no file for it here; a
// file that is there but wrong is an error.
func unpackReleaseTree(commit, dst string, paths ...string) (string, error) {
	rt, ok := releaseTrees[commit]
	if !ok {
		return fmt.Sprintf("no release tree is listed for commit %s", commit), nil
	}
	dir, err := releaseTreeDir()
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, rt.tag+".tar.zst")
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Sprintf("%s does not exist (set PEERBOOT_NVIDIA_TREES to the directory holding %s.tar.zst)", file, rt.tag), nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", file, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rt.sha256 || n != rt.size {
		return "", fmt.Errorf("%s: sha256 %s, %d bytes; want %s, %d bytes (tag %s)", file, got, n, rt.sha256, rt.size, rt.tag)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	zr, err := zstd.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	defer zr.Close()
	if err := untarTree(tar.NewReader(zr), "open-gpu-kernel-modules-"+rt.tag+"/", commit, dst, paths...); err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	return "", nil
}

// untarTree writes a git archive's entries under prefix into dst (with paths,
// only those regular files, each of which must be there). The pax global
// header git writes must name commit.
func untarTree(tr *tar.Reader, prefix, commit, dst string, paths ...string) error {
	sawCommit := false
	want := map[string]bool{}
	for _, p := range paths {
		want[p] = true
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			if c := h.PAXRecords["comment"]; c != commit {
				return fmt.Errorf("archive of commit %q, want %s", c, commit)
			}
			sawCommit = true
			continue
		}
		name, ok := strings.CutPrefix(h.Name, prefix)
		if !ok {
			return fmt.Errorf("entry %s is outside %s", h.Name, prefix)
		}
		if name == "" {
			continue
		}
		if clean := path.Clean(name); clean != strings.TrimSuffix(name, "/") || strings.HasPrefix(clean, "../") || path.IsAbs(clean) {
			return fmt.Errorf("entry %s leaves the tree", h.Name)
		}
		if len(paths) > 0 {
			if h.Typeflag != tar.TypeReg || !want[name] {
				continue
			}
			delete(want, name)
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %s: unexpected type %q in a git archive", h.Name, h.Typeflag)
		}
	}
	if !sawCommit {
		return fmt.Errorf("no pax header naming commit %s (not a git archive of it)", commit)
	}
	for _, p := range paths {
		if want[p] {
			return fmt.Errorf("no file %s in the archive of %s", p, commit)
		}
	}
	return nil
}

// A tree of the wrong commit, a path out of the tree and a missing commit
// header are refused, so the series test cannot apply to the wrong tree.
func TestUntarTreeRefuses(t *testing.T) {
	const commit = "23e9e7621487fe632040a370249f690a456967dd"
	for _, tc := range []struct {
		name    string
		entries []tar.Header
		want    string
	}{
		{name: "ok", entries: []tar.Header{
			{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": commit}},
			{Typeflag: tar.TypeDir, Name: "p/", Mode: 0o755},
			{Typeflag: tar.TypeReg, Name: "p/kernel-open/Kbuild", Mode: 0o644},
		}},
		{name: "other commit", entries: []tar.Header{
			{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "2b436058a616676ec888ef3814d1db6b2220f2eb"}},
		}, want: `archive of commit "2b436058a616676ec888ef3814d1db6b2220f2eb"`},
		{name: "no commit header", entries: []tar.Header{
			{Typeflag: tar.TypeReg, Name: "p/a", Mode: 0o644},
		}, want: "no pax header naming commit"},
		{name: "escape", entries: []tar.Header{
			{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": commit}},
			{Typeflag: tar.TypeReg, Name: "p/../x", Mode: 0o644},
		}, want: "leaves the tree"},
		{name: "other prefix", entries: []tar.Header{
			{Typeflag: tar.TypeReg, Name: "q/a", Mode: 0o644},
		}, want: "outside p/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				tw := tar.NewWriter(pw)
				for _, h := range tc.entries {
					h.Format = tar.FormatPAX
					if err := tw.WriteHeader(&h); err != nil {
						pw.CloseWithError(err)
						return
					}
				}
				pw.CloseWithError(tw.Close())
			}()
			dst := t.TempDir()
			err := untarTree(tar.NewReader(pr), "p/", commit, dst)
			pr.Close()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(dst, "kernel-open", "Kbuild")); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// A release tarball that is not the listed one is an error, not a skip; an
// absent one is a reason to skip (which CI turns into a failure).
func TestUnpackReleaseTreeChecksFile(t *testing.T) {
	const commit = "23e9e7621487fe632040a370249f690a456967dd"
	dir := t.TempDir()
	t.Setenv("PEERBOOT_NVIDIA_TREES", dir)
	why, err := unpackReleaseTree(commit, t.TempDir())
	if err != nil || !strings.Contains(why, "550.163.01.tar.zst does not exist") {
		t.Fatalf("absent file: why %q, err %v", why, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "550.163.01.tar.zst"), []byte("not NVIDIA's tree"), 0o644); err != nil {
		t.Fatal(err)
	}
	why, err = unpackReleaseTree(commit, t.TempDir())
	if err == nil || why != "" || !strings.Contains(err.Error(), "want 09f6861cabd42ecf8fb48a84dbaf2a59b3f365bbc1a78ee4be71576698423f82, 8334138 bytes") {
		t.Fatalf("wrong file: why %q, err %v", why, err)
	}
	if why, err := unpackReleaseTree("0000000000000000000000000000000000000000", t.TempDir()); err != nil || why == "" {
		t.Fatalf("unlisted commit: why %q, err %v", why, err)
	}
}
