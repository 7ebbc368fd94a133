package store

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
)

// Problem is one bad store entry found by Verify.
type Problem struct {
	Path string
	Msg  string
}

func (p Problem) String() string { return p.Path + ": " + p.Msg }

// Verify re-hashes every input and every stage output file against its manifest.
// progress, if set, is called with bytes hashed so far and the total.
func (s *Store) Verify(ctx context.Context, progress func(done, total int64)) ([]Problem, error) {
	type item struct {
		path, want string
		size       int64
	}
	var items []item
	var problems []Problem
	var total int64
	blobs := filepath.Join(s.Root, "blobs", "sha256")
	err := filepath.WalkDir(blobs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !isBlobName(d.Name()) || filepath.Base(filepath.Dir(path)) != d.Name()[:2] {
			problems = append(problems, Problem{path, "stray file: not a store entry"})
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		items = append(items, item{path, d.Name(), info.Size()})
		total += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walking %s: %w", blobs, err)
	}
	outs, err := os.ReadDir(filepath.Join(s.Root, "out"))
	if err != nil {
		return nil, err
	}
	for _, o := range outs {
		dir := filepath.Join(s.Root, "out", o.Name())
		m, err := readManifest(dir)
		if err != nil {
			problems = append(problems, Problem{dir, err.Error()})
			continue
		}
		sizes, err := readSizes(dir)
		if err != nil {
			problems = append(problems, Problem{dir, err.Error()})
		}
		for _, e := range m {
			p := filepath.Join(dir, e.path)
			info, err := os.Lstat(p)
			if err != nil {
				problems = append(problems, Problem{p, "missing (listed in MANIFEST)"})
				continue
			}
			if !info.Mode().IsRegular() {
				// Hashing would follow a symlink to bytes outside the output.
				problems = append(problems, Problem{p, "not a regular file (listed in MANIFEST)"})
				continue
			}
			if want, ok := sizes[e.path]; sizes != nil && (!ok || want != info.Size()) {
				problems = append(problems, Problem{p, fmt.Sprintf("%d bytes, %d when committed (%s)", info.Size(), want, sizesName)})
				continue
			}
			items = append(items, item{p, e.sum, info.Size()})
			total += info.Size()
		}
	}
	var done int64
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return problems, err
		}
		got, err := fsutil.HashFile(it.path)
		if err != nil {
			problems = append(problems, Problem{it.path, err.Error()})
		} else if got != it.want {
			problems = append(problems, Problem{it.path, fmt.Sprintf("corrupt: expected sha256 %s, got %s", it.want, got)})
		}
		done += it.size
		if progress != nil {
			progress(done, total)
		}
	}
	sort.Slice(problems, func(i, j int) bool { return problems[i].Path < problems[j].Path })
	return problems, nil
}

type manifestEntry struct{ sum, path string }

const manifestName = "MANIFEST"

func readManifest(dir string) ([]manifestEntry, error) {
	f, err := os.Open(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, fmt.Errorf("no MANIFEST: incomplete or foreign output")
	}
	defer f.Close()
	var out []manifestEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, path, ok := strings.Cut(sc.Text(), "  ")
		if !ok || !isSum(sum) {
			return nil, fmt.Errorf("MANIFEST: malformed line %q", sc.Text())
		}
		out = append(out, manifestEntry{sum, path})
	}
	return out, sc.Err()
}

// isSum is sumRe without the regexp: a no-op build reads every MANIFEST line.
func isSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
