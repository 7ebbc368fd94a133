package netboot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/output"
)

// Build is one published output directory (out/<recipe>/ as `peerboot build` and
// `peerboot sign` leave it).
type Build struct {
	Recipe       string
	RecipeDigest string
	ID           string            // 16 hex digits of sha256(manifest.json, SHA256SUMS): changes with every rebuild or signing
	Dir          string            // absolute
	Files        map[string]string // servable path -> sha256 hex (SHA256SUMS when present: it is what `sign` rewrites)
	Cmdline      string            // the kernel arguments of pxe/boot.ipxe
	BurnIn       time.Duration     // the length of pxe/boot.ipxe's burn-in entry (peerboot.soak= on a later kernel line); 0: none
	Loaded       time.Time
	Built        time.Time // manifest.json's modification time: orders builds loaded together
	root         *os.Root
	stamp        string
}

// HasPXE reports whether the build has the PXE bundle.
func (b *Build) HasPXE() bool {
	return b.Files[output.PXEKernelPath] != "" && b.Files[output.PXEInitrdPath] != ""
}

// HasUKI reports whether the build has a UKI (signed, after `peerboot sign`).
func (b *Build) HasUKI() bool { return b.Files[output.UKIFile] != "" }

// HasISO reports whether the build has the ISO for BMC virtual media.
func (b *Build) HasISO() bool { return b.Files[output.ISOFile] != "" }

// buildStamp changes when the directory is swapped by a rebuild or re-signed.
func buildStamp(dir string) string {
	var b strings.Builder
	for _, name := range []string{".", output.ManifestFile, output.SumsFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			b.WriteString("-;")
			continue
		}
		ino := uint64(0)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%d/%d/%d;", ino, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// LoadBuild reads one output directory.
func LoadBuild(dir string) (*Build, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	stamp := buildStamp(abs)
	mj, err := os.ReadFile(filepath.Join(abs, output.ManifestFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a build output (no manifest.json): make one with `peerboot build`", dir)
		}
		return nil, fmt.Errorf("reading the build output: %w", err)
	}
	var m output.Manifest
	if err := json.Unmarshal(mj, &m); err != nil {
		return nil, fmt.Errorf("%s/manifest.json: %w", dir, err)
	}
	if m.Recipe == "" {
		return nil, fmt.Errorf("%s/manifest.json: no recipe name", dir)
	}
	b := &Build{Recipe: m.Recipe, RecipeDigest: m.RecipeDigest, Dir: abs, Files: map[string]string{}, Loaded: time.Now(), stamp: stamp}
	if fi, err := os.Stat(filepath.Join(abs, output.ManifestFile)); err == nil {
		b.Built = fi.ModTime()
	}
	for _, o := range m.Outputs {
		b.Files[o.Path] = o.SHA256
	}
	sums, err := os.ReadFile(filepath.Join(abs, output.SumsFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("reading the build output: %w", err)
	}
	if err == nil {
		listed, err := output.ParseSums(sums)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
		for _, l := range listed {
			b.Files[l.Path] = l.SHA256
		}
	}
	for p := range b.Files {
		if err := checkRelPath(p); err != nil {
			return nil, fmt.Errorf("%s lists %q: %w", dir, p, err)
		}
	}
	for _, f := range output.MetaFiles() {
		if _, ok := b.Files[f]; !ok {
			if _, err := os.Lstat(filepath.Join(abs, f)); err == nil {
				b.Files[f] = "" // served, hash unknown (it is the list of hashes, or signs it)
			}
		}
	}
	sum := sha256.New()
	sum.Write(mj)
	sum.Write(sums)
	b.ID = hex.EncodeToString(sum.Sum(nil))[:16]
	if ipxe, err := os.ReadFile(filepath.Join(abs, output.PXEScriptPath)); err == nil {
		b.Cmdline = kernelArgs(ipxe)
		b.BurnIn = burnIn(ipxe)
	}
	if b.root, err = os.OpenRoot(abs); err != nil {
		return nil, fmt.Errorf("opening the build output: %w", err)
	}
	return b, nil
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// kernelArgs returns the arguments of the first "kernel IMAGE ARGS..." line of an
// iPXE script: the recipe's kernel command line for a PXE boot. A menu entry's
// own name (bootproto.ArgEntry) is the bundle menu's, not the build's: serve's
// menu adds its entries' own.
func kernelArgs(script []byte) string {
	for _, line := range strings.Split(string(script), "\n") {
		f := strings.Fields(line)
		if len(f) >= 1 && (f[0] == "kernel" || f[0] == "chain") {
			var args []string
			for _, w := range f[min(2, len(f)):] {
				if !strings.HasPrefix(w, bootproto.ArgEntry+"=") {
					args = append(args, w)
				}
			}
			return strings.Join(args, " ")
		}
	}
	return ""
}

// burnIn is the soak length a bundle's boot menu offers: the peerboot.soak= of a
// kernel line (image.IPXEScript writes the burn-in entry after the normal one).
func burnIn(script []byte) time.Duration {
	for _, line := range strings.Split(string(script), "\n") {
		f := strings.Fields(line)
		if len(f) < 1 || f[0] != "kernel" {
			continue
		}
		for _, w := range f[1:] {
			if v, ok := strings.CutPrefix(w, bootproto.ArgSoak+"="); ok {
				if d, err := time.ParseDuration(v); err == nil && d > 0 {
					return d
				}
			}
		}
	}
	return 0
}

var errRefused = errors.New("refused")

// checkRelPath accepts only clean, relative, slash-separated paths with no hidden
// component: what a build lists and a node may ask for.
func checkRelPath(p string) error {
	switch {
	case p == "" || strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("%w: not a file name", errRefused)
	case strings.HasPrefix(p, "/") || path.Clean(p) != p:
		return fmt.Errorf("%w: not a clean relative path", errRefused)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return fmt.Errorf("%w: leaves the output directory", errRefused)
		}
		if strings.HasPrefix(part, ".") {
			return fmt.Errorf("%w: hidden file", errRefused)
		}
	}
	return nil
}

// Open opens a file the build lists. The path must be clean and listed, and it is
// opened through an os.Root, so a symlink that leads out of the output directory is
// refused even if it appears after the build was loaded.
func (b *Build) Open(p string) (*os.File, fs.FileInfo, error) {
	if err := checkRelPath(p); err != nil {
		return nil, nil, err
	}
	if _, ok := b.Files[p]; !ok {
		return nil, nil, fmt.Errorf("%w: %s is not an output of %s", fs.ErrNotExist, p, b.Recipe)
	}
	f, err := b.root.Open(p)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errRefused, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%w: %s is not a regular file", errRefused, p)
	}
	return f, fi, nil
}

// Builds is the catalogue of outputs served: every build it is given, several per
// recipe, in the order it first held them (entry order, which the rollouts call
// "newer"). A directory swapped by a rebuild is reloaded and, its id changed, counts
// as a new entry; a root given to WatchRoot is rescanned for new output directories.
type Builds struct {
	mu      sync.Mutex
	dirs    []string
	root    string
	list    []*Build // entry order
	scanned time.Time
}

// LoadBuilds reads every directory. Builds found together enter the catalogue oldest
// manifest.json first; a directory holding a build already loaded (a copy) is skipped.
func LoadBuilds(dirs []string) (*Builds, error) {
	if len(dirs) == 0 {
		return nil, errors.New("no build output to serve")
	}
	bs := &Builds{dirs: dirs}
	var loaded []*Build
	for _, d := range dirs {
		b, err := LoadBuild(d)
		if err != nil {
			return nil, err
		}
		loaded = append(loaded, b)
	}
	bs.add(loaded)
	return bs, nil
}

// add appends builds not yet held, oldest manifest first (the caller holds mu or owns bs).
func (bs *Builds) add(loaded []*Build) []*Build {
	sort.SliceStable(loaded, func(i, j int) bool {
		if !loaded[i].Built.Equal(loaded[j].Built) {
			return loaded[i].Built.Before(loaded[j].Built)
		}
		return loaded[i].Dir < loaded[j].Dir
	})
	var added []*Build
	for _, b := range loaded {
		if bs.find(func(o *Build) bool { return o.ID == b.ID || o.Dir == b.Dir }) != nil {
			b.root.Close()
			continue
		}
		bs.list = append(bs.list, b)
		added = append(added, b)
	}
	return added
}

func (bs *Builds) find(match func(*Build) bool) *Build {
	for _, b := range bs.list {
		if match(b) {
			return b
		}
	}
	return nil
}

// WatchRoot makes Rescan look under root (the --out directory) for new outputs.
func (bs *Builds) WatchRoot(root string) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.root = root
}

// rescanEvery bounds how often Rescan reads the directories: it runs on boot
// script requests.
const rescanEvery = time.Second

// Rescan reloads swapped directories and, with a root, loads output directories new
// under it; it returns the builds that entered the catalogue. A directory that does not
// load (a build still being written) is tried again next time.
func (bs *Builds) Rescan() []*Build {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if time.Since(bs.scanned) < rescanEvery {
		return nil
	}
	bs.scanned = time.Now()
	var added []*Build
	for _, b := range append([]*Build(nil), bs.list...) {
		if nb := bs.refresh(b); nb != b {
			added = append(added, nb)
		}
	}
	if bs.root == "" {
		return added
	}
	dirs, _ := FindOutputs(bs.root)
	var loaded []*Build
	for _, d := range dirs {
		abs, err := filepath.Abs(d)
		if err != nil || bs.find(func(o *Build) bool { return o.Dir == abs }) != nil {
			continue
		}
		if b, err := LoadBuild(abs); err == nil {
			loaded = append(loaded, b)
		}
	}
	return append(added, bs.add(loaded)...)
}

// refresh reloads b if its directory changed; a new id is a new entry, at the end.
func (bs *Builds) refresh(b *Build) *Build {
	if buildStamp(b.Dir) == b.stamp {
		return b
	}
	nb, err := LoadBuild(b.Dir)
	if err != nil || nb.Recipe != b.Recipe {
		return b // mid-swap or broken: keep serving what was loaded
	}
	for i, o := range bs.list {
		if o == b {
			bs.list = append(bs.list[:i], bs.list[i+1:]...)
			break
		}
	}
	b.root.Close()
	if nb.ID == b.ID {
		nb.Built = b.Built
	}
	bs.list = append(bs.list, nb)
	return nb
}

// FindOutputs lists the build outputs under root (out/ by default): each
// subdirectory with a manifest.json.
func FindOutputs(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listing build outputs: %w", err)
	}
	var dirs []string
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), output.ManifestFile)); err == nil {
			dirs = append(dirs, filepath.Join(root, e.Name()))
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no build output under %s: run `peerboot build RECIPE` first", root)
	}
	return dirs, nil
}

// Get returns the newest build of a recipe (the last to enter the catalogue),
// reloading it if its directory changed.
func (bs *Builds) Get(recipe string) (*Build, error) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for i := len(bs.list) - 1; i >= 0; i-- {
		if b := bs.list[i]; b.Recipe == recipe {
			return bs.refresh(b), nil
		}
	}
	return nil, fmt.Errorf("recipe %q is not served (serving %s): %w", recipe, strings.Join(bs.recipes(), ", "), fleetdb.ErrNotFound)
}

// ByID returns the build with id, reloading its directory if it changed (nil: none
// holds it, or no longer).
func (bs *Builds) ByID(id string) *Build {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.find(func(o *Build) bool { return o.ID == id })
	if b == nil {
		return nil
	}
	if nb := bs.refresh(b); nb.ID == id {
		return nb
	}
	return nil
}

// All returns every build, by recipe name, each recipe's in entry order.
func (bs *Builds) All() []*Build {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	out := append([]*Build(nil), bs.list...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Recipe < out[j].Recipe })
	return out
}

// Recipes lists the recipe names served, sorted.
func (bs *Builds) Recipes() []string {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.recipes()
}

func (bs *Builds) recipes() []string {
	seen := map[string]bool{}
	out := []string{}
	for _, b := range bs.list {
		if !seen[b.Recipe] {
			seen[b.Recipe] = true
			out = append(out, b.Recipe)
		}
	}
	sort.Strings(out)
	return out
}
