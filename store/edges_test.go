package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Behaviour the mutation run (make mutants, store) found no -short test for:
// each case fails when its condition is inverted.

// CompareOutput (build --check) names every file that differs, and only those.
func TestCompareOutput(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "image-" + strings.Repeat("ab", 32)
	files := map[string]string{"a": "A", "b/c": "C", "d": "D"}
	commitTestOutput(t, st, key, files)
	rebuild := func(edit func(dir string)) string {
		dir := t.TempDir()
		for p, b := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755)
			os.WriteFile(filepath.Join(dir, p), []byte(b), 0o644)
		}
		edit(dir)
		return dir
	}
	if err := st.CompareOutput(key, rebuild(func(string) {})); err != nil {
		t.Fatalf("the same files: %v", err)
	}
	err := st.CompareOutput(key, rebuild(func(dir string) {
		os.WriteFile(filepath.Join(dir, "a"), []byte("changed"), 0o644)
		os.Remove(filepath.Join(dir, "d"))
		os.WriteFile(filepath.Join(dir, "e"), []byte("new"), 0o644)
	}))
	want := fmt.Sprintf("3 files differ:\n  a: stored sha256 %s, rebuilt %s\n  d: only in the stored output\n  e: only in the rebuild", sumOf([]byte("A")), sumOf([]byte("changed")))
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	err = st.CompareOutput(key, rebuild(func(dir string) {
		for i := range 25 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%02d", i)), nil, 0o644)
		}
	}))
	if err == nil || !strings.HasPrefix(err.Error(), "25 files differ:") || !strings.HasSuffix(err.Error(), "\n  ... and 5 more") || strings.Count(err.Error(), "only in the rebuild") != 20 {
		t.Fatalf("25 differences: %v", err)
	}
	if err := st.CompareOutput("image-"+strings.Repeat("cd", 32), t.TempDir()); err == nil {
		t.Fatal("an output that was never committed compared equal")
	}
}

// GC: a leftover exactly maxAge old goes; removing a scratch removes its lock
// file, a partial download's lock file stays; the lock file of a scratch that
// is gone is removed, a live scratch's is kept.
func TestGCEdges(t *testing.T) {
	st, _ := Open(t.TempDir())
	now := time.Now()
	sc, _ := st.OpenScratch("kernel")
	sc.Release()
	edge := now.Add(-time.Hour)
	os.Chtimes(sc.Dir, edge, edge)
	young, _ := st.OpenScratch("driver")
	young.Release()
	sum := sumOf([]byte("download"))
	p, _ := st.NewPartial(sum, false)
	p.Write([]byte("down"))
	p.f.Close()
	partial := filepath.Join(st.Root, "tmp", sum+".partial")
	os.Chtimes(partial, edge, edge)
	p.unlock()
	stale := filepath.Join(st.Root, "locks", "scratch-gone-1.lock")
	os.WriteFile(stale, nil, 0o644)
	lockOf := func(dir string) string { return filepath.Join(st.Root, "locks", "scratch-"+filepath.Base(dir)+".lock") }

	stats, err := st.GC(time.Hour, now)
	if err != nil || stats.Removed != 2 {
		t.Fatalf("GC at exactly maxAge: %+v %v, want the scratch and the partial removed", stats, err)
	}
	for _, gone := range []string{sc.Dir, partial, lockOf(sc.Dir), stale} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("%s kept", gone)
		}
	}
	for _, kept := range []string{young.Dir, lockOf(young.Dir), filepath.Join(st.Root, "locks", "blob-"+sum+".lock")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
	// Scratch.Remove leaves no lock file either.
	sc2, _ := st.OpenScratch("rootfs")
	if err := sc2.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(lockOf(sc2.Dir)); err == nil {
		t.Error("Scratch.Remove left its lock file")
	}
}

// SIZES lines that are not "<bytes>  <path>" are refused, not read as sizes.
func TestReadSizesRefusesMalformed(t *testing.T) {
	for _, line := range []string{"x  boot/vmlinuz", "-1  boot/vmlinuz", "12 boot/vmlinuz"} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, sizesName), []byte(line+"\n"), 0o644)
		if _, err := readSizes(dir); err == nil || !strings.Contains(err.Error(), "malformed line") {
			t.Errorf("%q: %v", line, err)
		}
	}
}

// The store's root, entry names and local imports.
func TestRootAndEntries(t *testing.T) {
	t.Setenv("PEERBOOT_CACHE", "/srv/pb-cache")
	if got := DefaultRoot(); got != "/srv/pb-cache" {
		t.Errorf("DefaultRoot with PEERBOOT_CACHE: %s", got)
	}
	t.Setenv("PEERBOOT_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := DefaultRoot(); got != "/xdg/peerboot" {
		t.Errorf("DefaultRoot from the user cache: %s", got)
	}
	st, _ := Open(t.TempDir())
	data := []byte("imported")
	src := filepath.Join(t.TempDir(), "f")
	os.WriteFile(src, data, 0o644)
	if err := st.Import(context.Background(), src, sumOf(data)); err != nil || !st.HasBlob(sumOf(data)) {
		t.Fatalf("Import: %v, HasBlob %v", err, st.HasBlob(sumOf(data)))
	}
	if err := st.Import(context.Background(), src+".missing", sumOf(data)); err == nil {
		t.Error("importing a missing file succeeded")
	}
	bad := "NOTASUM"
	if st.HasBlob(bad) || st.HasBlob(sumOf([]byte("absent"))) {
		t.Error("HasBlob of a malformed or absent sum")
	}
	if _, err := st.Open(bad); err == nil {
		t.Error("Open of a malformed sum")
	}
	if err := st.Remove(bad); err == nil {
		t.Error("Remove of a malformed sum")
	}
	if err := st.Remove(sumOf(data)); err != nil || st.HasBlob(sumOf(data)) {
		t.Errorf("Remove: %v", err)
	}
}

// A partial download reset after a wrong start commits the right bytes.
func TestPartialReset(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("the right bytes")
	p, err := st.NewPartial(sumOf(data), false)
	if err != nil {
		t.Fatal(err)
	}
	p.Write([]byte("a server's wrong answer"))
	if err := p.Reset(); err != nil || p.Size() != 0 {
		t.Fatalf("Reset: %v, size %d", err, p.Size())
	}
	p.Write(data)
	if err := p.Commit(); err != nil {
		t.Fatalf("commit after reset: %v", err)
	}
	if b, _ := os.ReadFile(st.BlobPath(sumOf(data))); string(b) != string(data) {
		t.Fatalf("blob %q", b)
	}
}

// A commit whose rename into place fails says so (a blob path taken by a
// directory), and the entry is not there.
func TestCommitRenameFails(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("blob")
	dst := st.BlobPath(sumOf(data))
	os.MkdirAll(filepath.Join(dst, "occupied"), 0o755)
	p, err := st.NewPartial(sumOf(data), false)
	if err != nil {
		t.Fatal(err)
	}
	p.Write(data)
	if err := p.Commit(); err == nil {
		t.Fatal("a commit whose rename failed reported success")
	}
	if err := st.CheckBlob(sumOf(data)); err == nil {
		t.Fatal("the blob checks out")
	}
}

// OutputFiles lists by path (MANIFEST is ordered by digest), with sizes; an
// empty file is a file of size 0, not a malformed SIZES line.
func TestOutputFilesAndEmptyFile(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "config-" + strings.Repeat("ef", 32)
	files := map[string]string{"z": "1", "a": "22", "m": "333", "empty": ""}
	commitTestOutput(t, st, key, files)
	got, err := st.OutputFiles(key)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got {
		names = append(names, fmt.Sprintf("%s:%d", f.Path, f.Size))
		if f.SHA256 != sumOf([]byte(files[f.Path])) {
			t.Errorf("%s: sha256 %s", f.Path, f.SHA256)
		}
	}
	if strings.Join(names, " ") != "a:2 empty:0 m:3 z:1" {
		t.Fatalf("OutputFiles: %v", names)
	}
	if err := st.CheckOutput(key); err != nil {
		t.Fatalf("an output with an empty file: %v", err)
	}
}

// Exactly 20 differences are all listed, with no "... and 0 more".
func TestCompareOutputTwenty(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "image-" + strings.Repeat("12", 32)
	commitTestOutput(t, st, key, map[string]string{"a": "A"})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("A"), 0o644)
	for i := range 20 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("x%02d", i)), nil, 0o644)
	}
	err := st.CompareOutput(key, dir)
	if err == nil || !strings.HasPrefix(err.Error(), "20 files differ:") || strings.Contains(err.Error(), "more") {
		t.Fatalf("20 differences: %v", err)
	}
}

// GC keeps the lock file of a scratch whose directory is gone while someone
// holds the lock (a build between taking it and making the directory).
func TestGCKeepsHeldStaleLock(t *testing.T) {
	st, _ := Open(t.TempDir())
	l := filepath.Join(st.Root, "locks", "scratch-being-made.lock")
	f, err := os.Create(l)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GC(0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(l); err != nil {
		t.Fatalf("GC removed a held lock file: %v", err)
	}
}

// Open reads a well-formed entry's bytes.
func TestOpenEntry(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("entry")
	st.Put(context.Background(), strings.NewReader(string(data)), sumOf(data))
	r, err := st.Open(sumOf(data))
	if err != nil || r == nil {
		t.Fatalf("Open: %v", err)
	}
	defer r.Close()
	b := make([]byte, 16)
	n, _ := r.Read(b)
	if string(b[:n]) != "entry" {
		t.Fatalf("read %q", b[:n])
	}
}

func TestIsSum(t *testing.T) {
	ok := strings.Repeat("0123456789abcdef", 4)
	for s, want := range map[string]bool{
		ok: true, strings.Repeat("f", 64): true, strings.Repeat("0", 64): true,
		ok[:63]: false, ok + "0": false, "A" + ok[1:]: false, "g" + ok[1:]: false,
		"/" + ok[1:]: false, ":" + ok[1:]: false, ok[:63] + "`": false,
	} {
		if got := isSum(s); got != want {
			t.Errorf("isSum(%q) = %v, want %v", s, got, want)
		}
	}
}

// store verify names a stray file (not a sha256 name, or a blob under the
// wrong prefix directory) and a malformed MANIFEST line, and lists its
// problems by path.
func TestVerifyStrayAndOrder(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("kept")
	st.Put(context.Background(), strings.NewReader(string(data)), sumOf(data))
	blobs := filepath.Join(st.Root, "blobs", "sha256")
	os.MkdirAll(filepath.Join(blobs, "ju"), 0o755)
	os.WriteFile(filepath.Join(blobs, "ju", "junk"), []byte("x"), 0o644)
	wrong := sumOf([]byte("moved"))
	os.MkdirAll(filepath.Join(blobs, "00"), 0o755)
	os.WriteFile(filepath.Join(blobs, "00", wrong), []byte("moved"), 0o644)
	key := "kernel-" + strings.Repeat("9a", 32)
	commitTestOutput(t, st, key, map[string]string{"f": "F"})
	os.WriteFile(filepath.Join(st.OutputDir(key), "MANIFEST"), []byte("zz  f\n"), 0o644)
	key2 := "driver-" + strings.Repeat("9b", 32)
	commitTestOutput(t, st, key2, map[string]string{"f": "F"})
	os.WriteFile(filepath.Join(st.OutputDir(key2), "MANIFEST"), []byte(sumOf([]byte("F"))+" f\n"), 0o644)
	ps, err := st.Verify(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		rel, _ := filepath.Rel(st.Root, p.Path)
		got = append(got, rel+": "+strings.SplitN(p.Msg, " \"", 2)[0])
	}
	want := []string{
		"blobs/sha256/00/" + wrong + ": stray file: not a store entry",
		"blobs/sha256/ju/junk: stray file: not a store entry",
		"out/" + key2 + ": MANIFEST: malformed line",
		"out/" + key + ": MANIFEST: malformed line",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// OutputSum gives one file's recorded sum from MANIFEST alone, and names a
// path the output does not have and an output that is not committed.
func TestOutputSum(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("ab", 32)
	commitTestOutput(t, st, key, map[string]string{"boot/vmlinuz": "kernel", "build/Makefile": "all:"})
	if got, err := st.OutputSum(key, "boot/vmlinuz"); err != nil || got != sumOf([]byte("kernel")) {
		t.Fatalf("OutputSum = %s, %v", got, err)
	}
	if _, err := st.OutputSum(key, "boot/initrd"); err == nil || !strings.Contains(err.Error(), "boot/initrd is not in its MANIFEST") {
		t.Fatalf("a path the output lacks: %v", err)
	}
	if _, err := st.OutputSum("kernel-"+strings.Repeat("cd", 32), "boot/vmlinuz"); err == nil || !strings.Contains(err.Error(), "no MANIFEST") {
		t.Fatalf("an uncommitted key: %v", err)
	}
}

// CheckOutput over more files than it checks in one goroutine names the
// first damaged file in MANIFEST order, whichever part finds it.
func TestCheckOutputManyFiles(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("ab", 32)
	files := map[string]string{}
	for i := range 3000 {
		files[fmt.Sprintf("build/include/d%02d/h%d.h", i%40, i)] = fmt.Sprint(i)
	}
	commitTestOutput(t, st, key, files)
	if err := st.CheckOutput(key); err != nil {
		t.Fatal(err)
	}
	m, err := readManifest(st.OutputDir(key))
	if err != nil {
		t.Fatal(err)
	}
	// Damage a file late in the MANIFEST and one early: the early one is named.
	late, early := m[len(m)-3].path, m[5].path
	os.Remove(filepath.Join(st.OutputDir(key), late))
	if err := st.CheckOutput(key); err == nil || !strings.Contains(err.Error(), late+": missing") {
		t.Fatalf("a missing file: %v", err)
	}
	os.WriteFile(filepath.Join(st.OutputDir(key), early), []byte("longer than before"), 0o644)
	if err := st.CheckOutput(key); err == nil || !strings.Contains(err.Error(), early+": 18 bytes") {
		t.Fatalf("the first damaged file in MANIFEST order: %v", err)
	}
}

// CheckOutputFiles checks the files listed and no other; a listed file the
// output does not have is an error, as is a damaged listed one.
func TestCheckOutputFiles(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("ab", 32)
	commitTestOutput(t, st, key, map[string]string{"bzImage": "kernel", "build/x.h": "header"})
	os.WriteFile(filepath.Join(st.OutputDir(key), "build/x.h"), []byte("damaged header"), 0o644)
	if err := st.CheckOutputFiles(key, []string{"bzImage"}); err != nil {
		t.Fatalf("an intact listed file: %v", err)
	}
	if err := st.CheckOutputFiles(key, nil); err == nil || !strings.Contains(err.Error(), "build/x.h: 14 bytes, 6 when committed") {
		t.Fatalf("nil lists all: %v", err)
	}
	if err := st.CheckOutputFiles(key, []string{"bzImage", "build/x.h"}); err == nil || !strings.Contains(err.Error(), "build/x.h") {
		t.Fatalf("a damaged listed file: %v", err)
	}
	if err := st.CheckOutputFiles(key, []string{"vmlinux"}); err == nil || !strings.Contains(err.Error(), "vmlinux: not in MANIFEST") {
		t.Fatalf("a listed file the output lacks: %v", err)
	}
}

// findLine gives what a full parse gives for the path's line, and nothing for
// a path only some longer path ends with.
func TestFindLine(t *testing.T) {
	b := []byte(strings.Repeat("a", 64) + "  boot/bzImage\n" + strings.Repeat("b", 64) + "  x/boot/bzImage\n" + "12  sizes  two spaces\n" + strings.Repeat("c", 64) + "  last\n")
	for _, c := range []struct {
		path, want string
		ok         bool
	}{
		{"boot/bzImage", strings.Repeat("a", 64), true},
		{"x/boot/bzImage", strings.Repeat("b", 64), true},
		{"last", strings.Repeat("c", 64), true},
		{"bzImage", "", false},
		{"two spaces", "", false},
		{"absent", "", false},
	} {
		if got, ok := findLine(b, c.path); got != c.want || ok != c.ok {
			t.Errorf("findLine(%q) = %q, %v; want %q, %v", c.path, got, ok, c.want, c.ok)
		}
	}
}

// FuzzFindLine: on any MANIFEST the store writes, findLine agrees with
// readManifest's parse for every listed path.
func FuzzFindLine(f *testing.F) {
	f.Add("boot/bzImage", "x/boot/bzImage", "boot")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		paths := map[string]string{}
		for i, p := range []string{a, b, c} {
			if p == "" || strings.ContainsAny(p, "\n") || strings.Contains(p, "  ") {
				continue
			}
			paths[p] = strings.Repeat(fmt.Sprint(i), 64)
		}
		var lines []string
		for p, sum := range paths {
			lines = append(lines, sum+"  "+p)
		}
		sort.Strings(lines)
		body := []byte(strings.Join(lines, "\n") + "\n")
		for p, sum := range paths {
			if got, ok := findLine(body, p); !ok || got != sum {
				t.Fatalf("findLine(%q) = %q, %v in\n%s", p, got, ok, body)
			}
		}
	})
}

// CheckOutputFiles reads the records of the listed files alone, and trusts
// them no more than CheckOutput does: an output from before SIZES is checked
// for presence; a SIZES or MANIFEST line of a listed file that is not a size
// or a sum, or a listed file SIZES lacks, is named; an empty file is size 0.
// OutputSum gives no malformed MANIFEST field as a sum.
func TestCheckOutputFilesRecords(t *testing.T) {
	for _, c := range []struct {
		name    string
		damage  func(dir string)
		files   []string
		wantErr string // "": no error
	}{
		{"intact", func(string) {}, []string{"bzImage", "empty"}, ""},
		{"no SIZES", func(d string) { os.Remove(filepath.Join(d, sizesName)) }, []string{"bzImage"}, ""},
		{"no SIZES, a listed file gone", func(d string) {
			os.Remove(filepath.Join(d, sizesName))
			os.Remove(filepath.Join(d, "bzImage"))
		}, []string{"bzImage"}, "bzImage: missing"},
		{"a size not a number", func(d string) { os.WriteFile(filepath.Join(d, sizesName), []byte("0  empty\nsix  bzImage\n"), 0o644) }, []string{"bzImage"}, "SIZES: malformed line for bzImage"},
		{"a negative size", func(d string) { os.WriteFile(filepath.Join(d, sizesName), []byte("-6  bzImage\n0  empty\n"), 0o644) }, []string{"bzImage"}, "SIZES: malformed line for bzImage"},
		{"a listed file SIZES lacks", func(d string) { os.WriteFile(filepath.Join(d, sizesName), []byte("0  empty\n"), 0o644) }, []string{"bzImage"}, "bzImage: listed in MANIFEST but not in SIZES"},
		{"a MANIFEST line without its sum", func(d string) {
			os.WriteFile(filepath.Join(d, manifestName), []byte("  bzImage\n"+sumOf(nil)+"  empty\n"), 0o644)
		}, []string{"bzImage"}, "MANIFEST: malformed line for bzImage"},
		{"a MANIFEST field not a sum", func(d string) {
			os.WriteFile(filepath.Join(d, manifestName), []byte("kernel  bzImage\n"+sumOf(nil)+"  empty\n"), 0o644)
		}, []string{"bzImage"}, "MANIFEST: malformed line for bzImage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, _ := Open(t.TempDir())
			key := "kernel-" + strings.Repeat("ab", 32)
			commitTestOutput(t, st, key, map[string]string{"bzImage": "kernel", "empty": ""})
			c.damage(st.OutputDir(key))
			err := st.CheckOutputFiles(key, c.files)
			if (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
				t.Errorf("CheckOutputFiles(%v) = %v, want %q", c.files, err, c.wantErr)
			}
		})
	}
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("ab", 32)
	commitTestOutput(t, st, key, map[string]string{"bzImage": "kernel"})
	os.WriteFile(filepath.Join(st.OutputDir(key), manifestName), []byte("kernel  bzImage\n"), 0o644)
	if sum, err := st.OutputSum(key, "bzImage"); err == nil || !strings.Contains(err.Error(), "bzImage is not in its MANIFEST") {
		t.Errorf("OutputSum of a malformed line = %q, %v", sum, err)
	}
}
