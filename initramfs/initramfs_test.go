package initramfs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

const testEpoch = 1700000000

// node is one thing in the test tree. Directories are implied by paths and
// also listed explicitly so empty ones exist.
type node struct {
	path   string
	kind   fs.FileMode // 0 file, ModeDir, ModeSymlink
	perm   fs.FileMode // requested before umask; files and dirs
	data   string      // file content or symlink target
	linkTo string      // hardlink: create as a link to this path
}

// testTree covers every entry kind Pack handles, names that sort
// differently by full path than by component ("a-b" vs "a/c"), a hardlink
// pair, and names with spaces, quotes, non-ASCII and a tab.
var testTree = []node{
	{path: "a", kind: fs.ModeDir, perm: 0o700},
	{path: "a/c", kind: fs.ModeDir, perm: 0o777},
	{path: "a/c/x", data: "x\n", perm: 0o600},
	{path: "a-b", kind: fs.ModeDir, perm: 0o755},
	{path: "a-b/y", data: "yy\n", perm: 0o444},
	{path: "bin", kind: fs.ModeSymlink, data: "usr/bin"},
	{path: "empty", kind: fs.ModeDir, perm: 0o755},
	{path: "etc", kind: fs.ModeDir, perm: 0o755},
	{path: "etc/empty-file", perm: 0o644},
	{path: "etc/hostname", data: "peerboot\n", perm: 0o600},
	{path: "etc/odd name ü $x'q*[1].txt", data: "odd\n", perm: 0o666},
	{path: "etc/tab\tname", data: "tab\n", perm: 0o644},
	{path: "init", data: "#!/bin/sh\nexec /bin/sh\n", perm: 0o700},
	{path: "usr", kind: fs.ModeDir, perm: 0o755},
	{path: "usr/bin", kind: fs.ModeDir, perm: 0o755},
	{path: "usr/bin/tool", data: "#!/bin/sh\necho tool\n", perm: 0o755 | fs.ModeSetuid},
	{path: "usr/lib", kind: fs.ModeDir, perm: 0o755},
	{path: "usr/lib/dangling", kind: fs.ModeSymlink, data: "../nowhere/x"},
	{path: "usr/lib/libx.so.1", data: strings.Repeat("ELF", 1000), perm: 0o755},
	{path: "usr/lib/libx.so.1.0", linkTo: "usr/lib/libx.so.1"},
}

// buildTree creates nodes under dir in the given order, then stamps every
// file and directory with mtime.
func buildTree(t testing.TB, dir string, nodes []node, mtime time.Time) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(dir, filepath.FromSlash(n.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case n.linkTo != "":
			// Whichever of the pair comes first is written; the other links it.
			src := filepath.Join(dir, filepath.FromSlash(n.linkTo))
			if _, serr := os.Lstat(src); serr == nil {
				err = os.Link(src, p)
			} else {
				orig := nodeByPath(t, nodes, n.linkTo)
				if err = os.WriteFile(p, []byte(orig.data), 0o666); err == nil {
					err = os.Chmod(p, orig.perm)
				}
				if err == nil {
					err = os.Link(p, src)
				}
			}
		case n.kind == fs.ModeDir:
			if err = os.MkdirAll(p, 0o777); err == nil {
				err = os.Chmod(p, n.perm)
			}
		case n.kind == fs.ModeSymlink:
			err = os.Symlink(n.data, p)
		default:
			if _, serr := os.Lstat(p); serr == nil {
				continue // already created as the other half of a hardlink
			}
			if err = os.WriteFile(p, []byte(n.data), 0o666); err == nil {
				err = os.Chmod(p, n.perm)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, mtime, mtime)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func nodeByPath(t testing.TB, nodes []node, p string) node {
	for _, n := range nodes {
		if n.path == p {
			return n
		}
	}
	t.Fatalf("no node %s", p)
	return node{}
}

func packBytes(t testing.TB, root string) ([]byte, Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := Pack(context.Background(), root, testEpoch, &buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), st
}

func sha(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// checkGolden compares got with testdata/name, or rewrites it under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGoldenListing(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root, testTree, time.Unix(1234567890, 0))
	out, st := packBytes(t, root)
	lines, err := List(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree.golden", strings.Join(lines, "\n")+"\n")
	// The compressed bytes themselves are golden too: a zstd library upgrade
	// that changes output changes every image hash, and should be a
	// deliberate, reviewed -update rather than a surprise.
	checkGolden(t, "tree.zst.sha256.golden", sha(out)+"\n")

	want := Stats{Files: 10, Dirs: 9, Symlinks: 2}
	st.Bytes = 0
	if st != want {
		t.Errorf("stats = %+v, want %+v", st, want)
	}
}

func TestStatsBytesIsUncompressedSize(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root, testTree, time.Unix(0, 0))
	out, st := packBytes(t, root)
	rc, err := NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	if int64(raw.Len()) != st.Bytes || raw.Len()%4 != 0 {
		t.Errorf("Stats.Bytes = %d, uncompressed stream is %d bytes", st.Bytes, raw.Len())
	}
	// List must accept the raw stream as well as the compressed one.
	a, err := List(bytes.NewReader(raw.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := List(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a, b) {
		t.Error("raw and compressed listings differ")
	}
}

func TestHeaderFields(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root, testTree, time.Unix(99, 0))
	out, _ := packBytes(t, root)
	rc, err := NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var ino uint32
	var prev []string
	err = readArchive(rc, func(h rawHeader) error {
		ino++
		if h.ino != ino {
			t.Errorf("%s: ino %d, want %d", h.name, h.ino, ino)
		}
		if h.mtime != testEpoch || h.uid != 0 || h.gid != 0 {
			t.Errorf("%s: mtime %d uid %d gid %d", h.name, h.mtime, h.uid, h.gid)
		}
		wantLinks := uint32(1)
		if h.mode&0o170000 == 0o040000 {
			wantLinks = 2
		}
		if h.nlink != wantLinks {
			t.Errorf("%s: nlink %d, want %d", h.name, h.nlink, wantLinks)
		}
		// Component-wise order, and every entry's parent already seen.
		comp := strings.Split(h.name, "/")
		if prev != nil && slices.Compare(prev, comp) >= 0 && h.name != "." {
			t.Errorf("%s not after %s", h.name, strings.Join(prev, "/"))
		}
		prev = comp
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReproducible builds the same tree twice under different umasks,
// mtimes and creation orders (hence different inode numbers and directory
// order on disk) and wants identical bytes.
func TestReproducible(t *testing.T) {
	rootA, rootB := t.TempDir(), t.TempDir()

	old := syscall.Umask(0o022)
	buildTree(t, rootA, testTree, time.Unix(1000, 0))
	syscall.Umask(0o077)
	rev := slices.Clone(testTree)
	slices.Reverse(rev)
	buildTree(t, rootB, rev, time.Unix(2000000000, 0))
	syscall.Umask(old)

	a, _ := packBytes(t, rootA)
	b, _ := packBytes(t, rootB)
	if sha(a) != sha(b) {
		la, _ := List(bytes.NewReader(a))
		lb, _ := List(bytes.NewReader(b))
		t.Fatalf("outputs differ: %s vs %s\n%s\n---\n%s", sha(a), sha(b),
			strings.Join(la, "\n"), strings.Join(lb, "\n"))
	}
}

// TestWorkerCountIndependence checks the property zstdWorkers relies on:
// with concurrent blocks, the bytes do not depend on the worker count. The
// tree spans several 32 MiB jobs so the parallel path really runs.
func TestWorkerCountIndependence(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~80 MB")
	}
	root := t.TempDir()
	genTree(t, root, 80<<20, 40)
	var sums []string
	for _, n := range []int{2, 3, 4} {
		var buf bytes.Buffer
		if _, err := pack(context.Background(), root, testEpoch, &buf, n); err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sha(buf.Bytes()))
	}
	if sums[0] != sums[1] || sums[0] != sums[2] {
		t.Fatalf("output depends on worker count: %v", sums)
	}
}

func TestRealTools(t *testing.T) {
	for _, tool := range []string{"cpio", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (make deps installs it): %v", tool, err)
		}
	}
	root := t.TempDir()
	buildTree(t, root, testTree, time.Unix(5, 0))
	out, _ := packBytes(t, root)
	work := t.TempDir()
	img := filepath.Join(work, "initrd.zst")
	if err := os.WriteFile(img, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("zstd", "-t", "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("zstd -t: %v\n%s", err, b)
	}

	// Same paths, same order, as our own reader sees.
	cmd := exec.Command("sh", "-c", `zstd -dc "$1" | cpio -it --quiet`, "sh", img)
	listed, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -it: %v", err)
	}
	var ours []string
	rc, err := NewReader(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := readArchive(rc, func(h rawHeader) error { ours = append(ours, h.name); return nil }); err != nil {
		t.Fatal(err)
	}
	theirs := strings.Split(strings.TrimSuffix(string(listed), "\n"), "\n")
	if !slices.Equal(ours, theirs) {
		t.Errorf("cpio -it lists\n%q\nwe list\n%q", theirs, ours)
	}

	// Extraction reproduces every file's content and symlink's target.
	dest := filepath.Join(work, "x")
	if err := os.Mkdir(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command("sh", "-c", `zstd -dc "$1" | cpio -idm --quiet --no-absolute-filenames`, "sh", img)
	cmd.Dir = dest
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -idm: %v\n%s", err, b)
	}
	for _, n := range testTree {
		p := filepath.Join(dest, filepath.FromSlash(n.path))
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("extracted: %v", err)
			continue
		}
		switch {
		case n.kind == fs.ModeSymlink:
			if got, err := os.Readlink(p); err != nil || got != n.data {
				t.Errorf("%s: target %q, %v; want %q", n.path, got, err, n.data)
			}
		case n.kind == fs.ModeDir:
			if !fi.IsDir() {
				t.Errorf("%s: not a directory", n.path)
			}
		default:
			want := n.data
			if n.linkTo != "" {
				want = nodeByPath(t, testTree, n.linkTo).data
			}
			got, err := os.ReadFile(p)
			if err != nil || string(got) != want {
				t.Errorf("%s: content %q, %v; want %q", n.path, got, err, want)
			}
			if fi.ModTime().Unix() != testEpoch {
				t.Errorf("%s: mtime %v, want epoch %d", n.path, fi.ModTime(), testEpoch)
			}
		}
	}
}

func TestFifoIsAnError(t *testing.T) {
	root := t.TempDir()
	buildTree(t, root, testTree, time.Unix(0, 0))
	fifo := filepath.Join(root, "usr", "lib", "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err := Pack(context.Background(), root, testEpoch, &buf)
	if !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "usr/lib/pipe") {
		t.Fatalf("err = %v, want ErrUnsupportedType naming usr/lib/pipe", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written before the error; want none", buf.Len())
	}
}

func TestBadInputs(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Pack(context.Background(), t.TempDir(), -1, &buf); err == nil {
		t.Error("negative epoch accepted")
	}
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(context.Background(), f, 0, &buf); err == nil {
		t.Error("file as root accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Pack(ctx, t.TempDir(), 0, &buf); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
	if _, err := List(strings.NewReader("070701garbage")); err == nil {
		t.Error("truncated header accepted")
	}
	// An archive without a trailer is truncated.
	root := t.TempDir()
	out, _ := packBytes(t, root)
	rc, _ := NewReader(bytes.NewReader(out))
	var raw bytes.Buffer
	raw.ReadFrom(rc)
	rc.Close()
	if _, err := List(bytes.NewReader(raw.Bytes()[:raw.Len()-124])); err == nil {
		t.Error("archive without trailer accepted")
	}
}

func FuzzList(f *testing.F) {
	root := f.TempDir()
	buildTree(f, root, testTree, time.Unix(0, 0))
	out, _ := packBytes(f, root)
	f.Add(out)
	f.Add(append(append(append([]byte{}, out...), make([]byte, 9)...), out...)) // NULs between and after frames
	rc, _ := NewReader(bytes.NewReader(out))
	var raw bytes.Buffer
	raw.ReadFrom(rc)
	rc.Close()
	f.Add(raw.Bytes())
	f.Add([]byte("070701"))
	f.Add([]byte(zstdMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		lines, err := List(bytes.NewReader(b))
		if err == nil && len(lines) == 0 && !bytes.Contains(b, []byte(trailerName)) && !bytes.HasPrefix(b, []byte(zstdMagic)) {
			t.Errorf("empty listing without a trailer accepted")
		}
	})
}

// genTree writes about total bytes in nfiles files spread over a few
// directories: half random (incompressible, like firmware and compressed
// modules), half repetitive text (like scripts and configs), deterministic
// from a fixed seed so every benchmark sees the same tree.
func genTree(t testing.TB, root string, total int64, nfiles int) int64 {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	per := total / int64(nfiles)
	var written int64
	buf := make([]byte, per*2)
	for i := range nfiles {
		dir := filepath.Join(root, "d"+string(rune('a'+i%7)), "sub"+string(rune('a'+i%3)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		size := per/2 + rng.Int64N(per+1)
		b := buf[:size]
		if i%2 == 0 {
			for j := 0; j+8 <= len(b); j += 8 {
				v := rng.Uint64()
				for k := range 8 {
					b[j+k] = byte(v >> (8 * k))
				}
			}
		} else {
			words := []string{"kernel ", "module ", "peerboot ", "initramfs ", "zstd ", "\n", "0x1f ", "root=/dev/vda "}
			for j := 0; j < len(b); {
				j += copy(b[j:], words[rng.IntN(len(words))])
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "f"+hex.EncodeToString([]byte{byte(i >> 8), byte(i)})), b, 0o644); err != nil {
			t.Fatal(err)
		}
		written += size
	}
	return written
}

const benchTree = 200 << 20

func BenchmarkPack(b *testing.B) {
	root := b.TempDir()
	size := genTree(b, root, benchTree, 300)
	out := filepath.Join(b.TempDir(), "initrd.zst")
	b.SetBytes(size)
	cpu := startCPU(b, syscall.RUSAGE_SELF)
	for b.Loop() {
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Pack(context.Background(), root, testEpoch, f); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	cpu()
	reportRatio(b, out, size)
}

// BenchmarkShellPipeline times the obvious shell alternative on the same
// tree, so one `go test -bench` run shows the ratio.
func BenchmarkShellPipeline(b *testing.B) {
	root := b.TempDir()
	size := genTree(b, root, benchTree, 300)
	out := filepath.Join(b.TempDir(), "initrd.zst")
	b.SetBytes(size)
	cpu := startCPU(b, syscall.RUSAGE_CHILDREN)
	for b.Loop() {
		cmd := exec.Command("sh", "-c", `cd "$1" && find . | sort | cpio -o -H newc --quiet | zstd -T0 -3 -q > "$2"`, "sh", root, out)
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, o)
		}
	}
	cpu()
	reportRatio(b, out, size)
}

func reportRatio(b *testing.B, out string, size int64) {
	fi, err := os.Stat(out)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/float64(size), "ratio")
}

// startCPU measures CPU time (user+sys) from now until the returned func is
// called, per op. The build machine shares its cores with a kernel compile,
// so wall time alone is noisy; CPU time compares the work done.
func startCPU(b *testing.B, who int) func() {
	get := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := get()
	return func() {
		b.ReportMetric(float64((get()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
	}
}

func TestReadFiles(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"usr/lib/modules/6.1/kernel/a.ko": "module a", "usr/lib/modules/6.1/updates/b.ko": strings.Repeat("b", 70000), "etc/hostname": "node\n", "empty.ko": ""}
	for p, body := range files {
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(root, p), []byte(body), 0o644)
	}
	os.Symlink("a.ko", filepath.Join(root, "usr/lib/modules/6.1/kernel/link.ko"))
	var buf bytes.Buffer
	if _, err := Pack(context.Background(), root, 1700000000, &buf); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	err := ReadFiles(&buf, func(p string) bool { return strings.HasSuffix(p, ".ko") }, func(p string, data []byte) error {
		got[p] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for p, body := range files {
		if strings.HasSuffix(p, ".ko") {
			want[p] = body
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("ReadFiles gave %d files %v, want the 3 regular .ko files", len(got), slices.Sorted(maps.Keys(got)))
	}
}

// An initrd of several segments (one per rootfs layer) lists and reads as
// the kernel unpacks it: every segment in turn, each with its own trailer.
func TestConcatenatedSegments(t *testing.T) {
	var all bytes.Buffer
	for i, files := range []map[string]string{{"usr/lib/a.so": "a"}, {"etc/b.conf": "b"}} {
		root := t.TempDir()
		for p, body := range files {
			os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
			os.WriteFile(filepath.Join(root, p), []byte(body), 0o644)
		}
		if _, err := Pack(context.Background(), root, 1700000000, &all); err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
	}
	lines, err := List(bytes.NewReader(all.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(lines, "\n")
	for _, want := range []string{" usr/lib/a.so", " etc/b.conf"} {
		if !strings.Contains(joined, want) {
			t.Errorf("listing lacks %s:\n%s", want, joined)
		}
	}
	got := map[string]string{}
	err = ReadFiles(bytes.NewReader(all.Bytes()), func(string) bool { return true }, func(p string, b []byte) error {
		got[p] = string(b)
		return nil
	})
	if err != nil || got["usr/lib/a.so"] != "a" || got["etc/b.conf"] != "b" {
		t.Errorf("ReadFiles across segments: %v, %v", got, err)
	}
}

// The kernel skips NUL bytes between and after compressed archives, and the
// image stage pads the initrd to whole MiB with them: the reader must too,
// and refuse anything else where a frame must start.
func TestNULPadding(t *testing.T) {
	var segs [2][]byte
	for i, files := range []map[string]string{{"usr/lib/a.so": "a"}, {"etc/b.conf": "b"}} {
		root := t.TempDir()
		for p, body := range files {
			os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
			os.WriteFile(filepath.Join(root, p), []byte(body), 0o644)
		}
		var b bytes.Buffer
		if _, err := Pack(context.Background(), root, 1700000000, &b); err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		segs[i] = b.Bytes()
	}
	a, b := segs[0], segs[1]
	nul := func(n int) []byte { return make([]byte, n) }
	skippable := []byte{0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'x', 'y', 'z'}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		in   []byte
		err  string // "" = both files listed
	}{
		{"no padding", cat(a, b), ""},
		{"padded to a whole MiB", cat(a, b, nul(1<<20-len(a)-len(b))), ""},
		{"one NUL after", cat(a, b, nul(1)), ""},
		{"NULs between and after", cat(a, nul(7), b, nul(4096)), ""},
		{"a skippable frame between", cat(a, skippable, b), ""},
		{"junk after the padding", cat(a, b, nul(5), []byte("junk")), "no zstd frame at offset " + fmt.Sprint(len(a)+len(b)+5)},
		{"junk right after a frame", cat(a, []byte{1}, b), "no zstd frame at offset " + fmt.Sprint(len(a))},
		{"last frame truncated", cat(a, b[:len(b)-3]), "truncated"},
		{"truncated in a frame header", cat(a, b[:5]), "truncated"},
		{"truncated skippable frame", cat(a, b, skippable[:9]), "truncated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := List(bytes.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			joined := strings.Join(lines, "\n")
			for _, want := range []string{" usr/lib/a.so", " etc/b.conf"} {
				if !strings.Contains(joined, want) {
					t.Errorf("listing lacks %s:\n%s", want, joined)
				}
			}
		})
	}
}
