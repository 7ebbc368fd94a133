package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/fsutil"
)

var keyRe = regexp.MustCompile(`^[a-z0-9-]+-[0-9a-f]{64}$`)

// OutputDir is where the output of action key lives (whether or not it exists).
// Keys look like "kernel-<sha256>".
func (s *Store) OutputDir(key string) string { return filepath.Join(s.Root, "out", key) }

// HasOutput says whether a complete committed output exists for key (see CheckOutput).
func (s *Store) HasOutput(key string) bool { return s.CheckOutput(key) == nil }

// CheckOutput says why key's output cannot be reused, or nil when it can: its
// MANIFEST must be there, and every file it lists must be a regular file of the
// size recorded at commit. Only stat: a no-op build checks every output, and
// `store verify` is what re-hashes. An output committed before sizes were
// recorded (no SIZES file) is checked for its files' presence only.
func (s *Store) CheckOutput(key string) error { return s.CheckOutputFiles(key, nil) }

// CheckOutputFiles is CheckOutput of only the listed files (nil: all of
// them), for a build that reads only those of an output: the image stage
// reads one of the kernel output's 12,000 files. A listed file the MANIFEST
// lacks is an error.
func (s *Store) CheckOutputFiles(key string, files []string) error {
	dir := s.OutputDir(key)
	var m []manifestEntry
	var sizes map[string]int64
	var err error
	if files == nil {
		if m, err = readManifest(dir); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
		if sizes, err = readSizes(dir); err != nil {
			return fmt.Errorf("%s: %w", dir, err)
		}
	} else if m, sizes, err = lookupFiles(dir, files); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// The kernel's output lists 12,000 files: its stats are split over the
	// CPUs; the error named is the first in MANIFEST order either way.
	parts := 1
	if len(m) >= 1024 {
		parts = min(runtime.GOMAXPROCS(0), 8)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, e := range m[p*len(m)/parts : (p+1)*len(m)/parts] {
				if errs[p] = checkFile(int(d.Fd()), dir, e.path, sizes); errs[p] != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFile is CheckOutput's check of one file (path inside dir, whose
// descriptor is dirFD): there, regular, of the size SIZES recorded (sizes nil:
// an output from before SIZES, presence only).
func checkFile(dirFD int, dir, path string, sizes map[string]int64) error {
	// fstatat from the output directory: the kernel walks only path.
	var st unix.Stat_t
	if err := unix.Fstatat(dirFD, path, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s/%s: missing (listed in MANIFEST)", dir, path)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s/%s: not a regular file (listed in MANIFEST)", dir, path)
	}
	if sizes == nil {
		return nil
	}
	if want, ok := sizes[path]; !ok {
		return fmt.Errorf("%s/%s: listed in MANIFEST but not in %s", dir, path, sizesName)
	} else if st.Size != want {
		return fmt.Errorf("%s/%s: %d bytes, %d when committed (cut short by a crash?)", dir, path, st.Size, want)
	}
	return nil
}

// CommitOutput fsyncs every file and directory of dir, writes SIZES (each
// regular file's size) and MANIFEST (its sha256), in that order and synced, and
// renames dir to the output of key. If another process committed key first, dir is removed and
// theirs kept: both are the same function of the same inputs.
func (s *Store) CommitOutput(key, dir string) error {
	return s.CommitOutputWith(key, dir, CommitOptions{})
}

// CommitOutputWith is CommitOutput hashing only what opt cannot vouch for
// (see CommitOptions); it also keeps MIDSTATES for a later commit to resume from.
func (s *Store) CommitOutputWith(key, dir string, opt CommitOptions) error {
	if !keyRe.MatchString(key) {
		return fmt.Errorf("store: malformed action key %q", key)
	}
	// Every file and directory reaches the disk before MANIFEST does: MANIFEST is
	// what says "complete", so a crash must never leave it over truncated files.
	var files, dirs []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		} else if d.Type().IsRegular() {
			files = append(files, path)
		} // a symlink lives in its directory, synced below
		return nil
	})
	if err != nil {
		return fmt.Errorf("hashing output %s: %w", dir, err)
	}
	var base string
	var baseMids *midstates
	if opt.Base != "" && keyRe.MatchString(opt.Base) && s.HasOutput(opt.Base) {
		base = s.OutputDir(opt.Base)
		baseMids = readMidstates(base)
	}
	lines, sizes, mids, hs, err := hashAndSyncAll(dir, files, base, baseMids, s.linkedFiles(opt.Links, linkCandidates(files)))
	if err != nil {
		return fmt.Errorf("hashing output %s: %w", dir, err)
	}
	if opt.Log != nil {
		rels := make([]string, len(files))
		for i, f := range files {
			rels[i], _ = filepath.Rel(dir, f)
		}
		logHashed(opt.Log, key, rels, hs)
	}
	for _, d := range dirs {
		if err := fsutil.Sync(d); err != nil {
			return fmt.Errorf("syncing output %s: %w", dir, err)
		}
	}
	if err := writeMidstates(dir, mids); err != nil {
		return err
	}
	manifest, sizesText := formatRecords(lines, sizes)
	if err := writeFileSync(filepath.Join(dir, sizesName), sizesText); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, manifestName), manifest); err != nil {
		return err
	}
	if err := fsutil.Sync(dir); err != nil {
		return fmt.Errorf("syncing output %s: %w", dir, err)
	}
	unlock, err := s.Lock("out-" + key)
	if err != nil {
		return err
	}
	defer unlock()
	if s.HasOutput(key) {
		return os.RemoveAll(dir)
	}
	dst := s.OutputDir(key)
	os.RemoveAll(dst) // an interrupted commit (no MANIFEST) or a damaged output (CheckOutput)
	if err := os.Rename(dir, dst); err != nil {
		return fmt.Errorf("committing output %s: %w", key, err)
	}
	return fsutil.Sync(filepath.Dir(dst))
}

// OutputFile is one file of a committed output, as its MANIFEST lists it.
type OutputFile struct {
	Path   string // relative, slash-separated
	SHA256 string // hex, recorded at commit: no re-hashing
	Size   int64
}

// OutputFiles lists the files of key's committed output, sorted by path, with
// the sha256 its MANIFEST recorded and the size they have now.
func (s *Store) OutputFiles(key string) ([]OutputFile, error) {
	dir := s.OutputDir(key)
	m, err := readManifest(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	var out []OutputFile
	for _, e := range m {
		info, err := os.Stat(filepath.Join(dir, e.path))
		if err != nil {
			return nil, err
		}
		out = append(out, OutputFile{Path: e.path, SHA256: e.sum, Size: info.Size()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// OutputSum is the sha256 key's MANIFEST recorded for path; it reads only the
// MANIFEST (an output with thousands of files, the kernel's, is not walked).
func (s *Store) OutputSum(key, path string) (string, error) {
	dir := s.OutputDir(key)
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return "", fmt.Errorf("%s: no MANIFEST: incomplete or foreign output", dir)
	}
	sum, ok := findLine(b, path)
	if !ok || !isSum(sum) {
		return "", fmt.Errorf("%s: %s is not in its MANIFEST", dir, path)
	}
	return sum, nil
}

// lookupFiles is readManifest and readSizes of the listed files alone: their
// lines are found in the records without parsing the others (the kernel's
// output lists 12,000 files). A file MANIFEST lacks is an error; sizes is nil
// for an output without SIZES.
func lookupFiles(dir string, files []string) (m []manifestEntry, sizes map[string]int64, err error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: no MANIFEST: incomplete or foreign output", dir)
	}
	for _, f := range files {
		sum, ok := findLine(b, f)
		if !ok {
			return nil, nil, fmt.Errorf("%s/%s: not in MANIFEST", dir, f)
		}
		if !isSum(sum) {
			return nil, nil, fmt.Errorf("%s: MANIFEST: malformed line for %s", dir, f)
		}
		m = append(m, manifestEntry{sum, f})
	}
	sb, err := os.ReadFile(filepath.Join(dir, sizesName))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	sizes = map[string]int64{}
	for _, f := range files {
		if n, ok := findLine(sb, f); ok {
			size, err := strconv.ParseInt(n, 10, 64)
			if err != nil || size < 0 {
				return nil, nil, fmt.Errorf("%s: %s: malformed line for %s", dir, sizesName, f)
			}
			sizes[f] = size
		}
	}
	return m, sizes, nil
}

// findLine finds path's line ("<field>  <path>") in a MANIFEST's or SIZES'
// bytes and returns its field, without splitting the other lines.
func findLine(b []byte, path string) (string, bool) {
	needle := "  " + path + "\n"
	for from := 0; ; {
		i := bytes.Index(b[from:], []byte(needle))
		if i < 0 {
			return "", false
		}
		i += from
		start := bytes.LastIndexByte(b[:i], '\n') + 1
		if bytes.Index(b[start:], []byte("  ")) == i-start { // the line's first separator, as readManifest cuts it
			return string(b[start:i]), true
		}
		from = i + 1 // a longer path ending in this one's: not its line
	}
}

// The names of an output's two records, beside its files.
const (
	ManifestName = manifestName // "<sha256>  <path>" per regular file
	SizesName    = sizesName    // "<bytes>  <path>" per regular file
)

// IsRecord reports whether a top-level name in an output directory is one of
// the store's records (MANIFEST, SIZES, and MIDSTATES: a hint for the next
// commit, never pushed or compared) rather than content: a record
// added here is one that no copier of outputs must learn about separately.
func IsRecord(name string) bool {
	return name == manifestName || name == sizesName || name == midstatesName
}

// Records returns the MANIFEST and SIZES bytes CommitOutput writes for these
// files: a remote stage cache compares what it fetched with what was pushed
// in exactly the store's own form.
func Records(files []OutputFile) (manifest, sizes []byte) {
	var lines, sz []string
	for _, f := range files {
		lines = append(lines, f.SHA256+"  "+f.Path)
		sz = append(sz, strconv.FormatInt(f.Size, 10)+"  "+f.Path)
	}
	return formatRecords(lines, sz)
}

func formatRecords(lines, sizes []string) (manifest, sizesText []byte) {
	lines, sizes = slices.Clone(lines), slices.Clone(sizes)
	sort.Strings(lines)
	sort.Slice(sizes, func(i, j int) bool { return pathOf(sizes[i]) < pathOf(sizes[j]) })
	return []byte(joinLines(lines)), []byte(joinLines(sizes))
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

func pathOf(line string) string { _, p, _ := strings.Cut(line, "  "); return p }

// hashAndSyncAll hashes and fsyncs files (under dir) on several goroutines: one
// fsync at a time waits for a journal commit each, concurrent ones share commits.
// It returns MANIFEST's and SIZES' lines, the files' midstates and how each
// was hashed.
func hashAndSyncAll(dir string, files []string, base string, baseMids *midstates, links map[inode]linked) (lines, sizes []string, mids midstates, hs []hashed, err error) {
	lines, sizes = make([]string, len(files)), make([]string, len(files))
	hs = make([]hashed, len(files))
	errs := make([]error, len(files))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(16, len(files)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rel, _ := filepath.Rel(dir, files[i])
				hs[i], errs[i] = hashFile(files[i], rel, base, baseMids, links)
				lines[i], sizes[i] = hs[i].sum+"  "+rel, strconv.FormatInt(hs[i].size, 10)+"  "+rel
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()
	mids = midstates{Chunk: midChunk, Files: map[string][]string{}}
	for i, h := range hs {
		if len(h.mids) > 0 {
			rel, _ := filepath.Rel(dir, files[i])
			mids.Files[rel] = h.mids
		}
	}
	return lines, sizes, mids, hs, errors.Join(errs...)
}

// sizesName lists each MANIFEST file's size at commit ("<bytes>  <path>"), so
// reuse can check sizes without hashing. MANIFEST itself keeps its format.
const sizesName = "SIZES"

// readSizes reads SIZES; nil (no error) for an output committed before it existed.
func readSizes(dir string) (map[string]int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, sizesName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		n, p, ok := strings.Cut(line, "  ")
		size, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || size < 0 {
			return nil, fmt.Errorf("%s: malformed line %q", sizesName, line)
		}
		out[p] = size
	}
	return out, nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ErrNoOutput is returned when a stage output is needed but absent.
var ErrNoOutput = errors.New("no such stage output in the store")
