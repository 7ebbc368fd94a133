package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func sumOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

func TestPutCheckAndMismatch(t *testing.T) {
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("hello gpu")
	sum := sumOf(data)
	if err := st.Put(context.Background(), strings.NewReader("other bytes"), sum); err == nil {
		t.Fatal("Put accepted bytes with the wrong hash")
	} else {
		var mm *MismatchError
		if !errors.As(err, &mm) || mm.Want != sum || mm.Got != sumOf([]byte("other bytes")) {
			t.Fatalf("want a MismatchError naming expected and got, got %v", err)
		}
	}
	if st.HasBlob(sum) {
		t.Fatal("a failed Put left an entry")
	}
	if entries, _ := os.ReadDir(filepath.Join(st.Root, "tmp")); len(entries) != 0 {
		t.Fatalf("a failed Put left temp files: %v", entries)
	}
	if err := st.Put(context.Background(), strings.NewReader(string(data)), sum); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckBlob(sum); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckBlob(sumOf([]byte("absent"))); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("absent entry: want ErrNotExist, got %v", err)
	}
}

func TestVerifyNamesTamperedEntry(t *testing.T) {
	st, _ := Open(t.TempDir())
	good, bad := []byte("good input"), []byte("soon corrupt")
	for _, b := range [][]byte{good, bad} {
		if err := st.Put(context.Background(), strings.NewReader(string(b)), sumOf(b)); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := st.Verify(context.Background(), nil); err != nil || len(p) != 0 {
		t.Fatalf("fresh store: problems %v, err %v", p, err)
	}
	path := st.BlobPath(sumOf(bad))
	raw, _ := os.ReadFile(path)
	raw[3] ^= 0x01
	os.Chmod(path, 0o644)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := st.Verify(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].Path != path || !strings.Contains(p[0].Msg, "corrupt") || !strings.Contains(p[0].Msg, sumOf(bad)) {
		t.Fatalf("want exactly the tampered entry named, got %v", p)
	}
}

func TestOutputCommitAndVerify(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("ab", 32)
	dir, err := st.NewScratch("kernel")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "boot"), 0o755)
	os.WriteFile(filepath.Join(dir, "boot", "vmlinuz"), []byte("kernel bytes"), 0o644)
	if st.HasOutput(key) {
		t.Fatal("output present before commit")
	}
	if err := st.CommitOutput(key, dir); err != nil {
		t.Fatal(err)
	}
	if !st.HasOutput(key) {
		t.Fatal("output missing after commit")
	}
	manifest, _ := os.ReadFile(filepath.Join(st.OutputDir(key), "MANIFEST"))
	if want := sumOf([]byte("kernel bytes")) + "  boot/vmlinuz\n"; string(manifest) != want {
		t.Fatalf("MANIFEST = %q, want %q", manifest, want)
	}
	files, err := st.OutputFiles(key)
	if err != nil {
		t.Fatal(err)
	}
	if want := (OutputFile{Path: "boot/vmlinuz", SHA256: sumOf([]byte("kernel bytes")), Size: 12}); len(files) != 1 || files[0] != want {
		t.Fatalf("OutputFiles = %+v, want [%+v]", files, want)
	}
	if _, err := st.OutputFiles("kernel-" + strings.Repeat("cd", 32)); err == nil || !strings.Contains(err.Error(), "no MANIFEST") {
		t.Fatalf("OutputFiles of an uncommitted key: %v, want a no-MANIFEST error", err)
	}
	os.WriteFile(filepath.Join(st.OutputDir(key), "boot", "vmlinuz"), []byte("kernel bytez"), 0o644)
	p, _ := st.Verify(context.Background(), nil)
	if len(p) != 1 || !strings.HasSuffix(p[0].Path, "boot/vmlinuz") {
		t.Fatalf("want the changed output file named, got %v", p)
	}
	if err := st.CommitOutput("../escape", dir); err == nil {
		t.Fatal("malformed key accepted")
	}
}

// Two writers racing on one entry must both succeed and leave one intact entry.
func TestConcurrentPut(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := strings.Repeat("p2p", 1<<16)
	sum := sumOf([]byte(data))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- st.Put(context.Background(), strings.NewReader(data), sum)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CheckBlob(sum); err != nil {
		t.Fatal(err)
	}
}

func TestResumePartial(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("0123456789abcdef")
	sum := sumOf(data)
	p, err := st.NewPartial(sum, true)
	if err != nil {
		t.Fatal(err)
	}
	p.Write(data[:7])
	p.Keep()
	if st.HasBlob(sum) {
		t.Fatal("a kept partial looks complete")
	}
	p, _ = st.NewPartial(sum, true)
	if p.Size() != 7 {
		t.Fatalf("resumed partial has %d bytes, want 7", p.Size())
	}
	p.Write(data[7:])
	if err := p.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.CheckBlob(sum); err != nil {
		t.Fatal(err)
	}
}

func TestGCRemovesOnlyOldLeftovers(t *testing.T) {
	st, _ := Open(t.TempDir())
	data := []byte("kept input")
	st.Put(context.Background(), strings.NewReader(string(data)), sumOf(data))
	// Scratches of builds that ended without cleaning up: unlocked.
	oldSc, _ := st.OpenScratch("kernel")
	oldSc.Release()
	old := oldSc.Dir
	os.WriteFile(filepath.Join(old, "big.o"), make([]byte, 4096), 0o644)
	freshSc, _ := st.OpenScratch("driver")
	freshSc.Release()
	fresh := freshSc.Dir
	now := time.Now().Add(2 * time.Hour)
	os.Chtimes(fresh, now, now)
	stats, err := st.GC(time.Hour, now)
	if err != nil || stats.Removed != 1 || stats.Bytes != 4096 {
		t.Fatalf("%+v %v", stats, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("old scratch kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("fresh scratch removed")
	}
	if err := st.CheckBlob(sumOf(data)); err != nil {
		t.Errorf("GC touched an input: %v", err)
	}
}

// A running build's scratch is never collected, however old its directory's
// mtime and even with --older-than 0; nor is a download in progress. On the code
// before the scratch lock, GC removed all of them.
func TestGCKeepsScratchInUse(t *testing.T) {
	st, _ := Open(t.TempDir())
	long := time.Now().Add(-48 * time.Hour)
	age := func(p string) { os.Chtimes(p, long, long) }

	held, err := st.NewScratch("kernel") // the path-only API build uses: locked for the process
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(held, "vmlinux.o"), []byte("being written"), 0o644)
	age(held)
	open, _ := st.OpenScratch("driver")
	age(open.Dir)
	sum := sumOf([]byte("a download"))
	p, _ := st.NewPartial(sum, false)
	p.Write([]byte("a down"))
	partial := filepath.Join(st.Root, "tmp", sum+".partial")
	age(partial)
	// An interrupted build's scratch (its process is gone, so is its lock).
	dead, _ := st.OpenScratch("rootfs")
	dead.Release()
	age(dead.Dir)

	stats, err := st.GC(0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Removed != 1 || stats.InUse != 3 {
		t.Errorf("got %+v, want the dead scratch removed and 3 in use", stats)
	}
	if b, err := os.ReadFile(filepath.Join(held, "vmlinux.o")); err != nil || string(b) != "being written" {
		t.Errorf("GC removed a running build's scratch: %v", err)
	}
	for _, d := range []string{open.Dir, partial} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("GC removed %s in use: %v", d, err)
		}
	}
	if _, err := os.Stat(dead.Dir); !os.IsNotExist(err) {
		t.Errorf("an unlocked old scratch was kept: %v", err)
	}

	// Once released, both go at the next GC; a removed scratch leaves no lock file.
	open.Release()
	p.Abort()
	if stats, _ := st.GC(0, time.Now()); stats.Removed != 1 || stats.InUse != 1 {
		t.Errorf("after release: %+v, want the released scratch removed, the NewScratch one in use", stats)
	}
	sc, _ := st.OpenScratch("image")
	if err := sc.Remove(); err != nil {
		t.Fatal(err)
	}
	st.GC(0, time.Now())
	locks, _ := filepath.Glob(filepath.Join(st.Root, "locks", "scratch-*.lock"))
	if len(locks) != 1 || !strings.Contains(locks[0], filepath.Base(held)) {
		t.Errorf("lock files left: %v, want only the held scratch's", locks)
	}
}

func commitTestOutput(t testing.TB, st *Store, key string, files map[string]string) {
	sc, err := st.OpenScratch("kernel")
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Remove()
	out := filepath.Join(sc.Dir, "out")
	for p, body := range files {
		os.MkdirAll(filepath.Dir(filepath.Join(out, p)), 0o755)
		os.WriteFile(filepath.Join(out, p), []byte(body), 0o644)
	}
	if err := st.CommitOutput(key, out); err != nil {
		t.Fatal(err)
	}
}

// A committed output whose file was cut short (a crash before its data reached
// the disk) is not reused, and store verify names it by size. On the code before
// SIZES, HasOutput trusted MANIFEST's presence and said true.
func TestTruncatedOutputIsNotReused(t *testing.T) {
	st, _ := Open(t.TempDir())
	key := "kernel-" + strings.Repeat("cd", 32)
	commitTestOutput(t, st, key, map[string]string{"boot/vmlinuz": "kernel bytes", "lib/modules/x.ko": "module"})
	sizes, _ := os.ReadFile(filepath.Join(st.OutputDir(key), "SIZES"))
	if want := "12  boot/vmlinuz\n6  lib/modules/x.ko\n"; string(sizes) != want {
		t.Fatalf("SIZES = %q, want %q", sizes, want)
	}
	if err := st.CheckOutput(key); err != nil {
		t.Fatal(err)
	}
	vmlinuz := filepath.Join(st.OutputDir(key), "boot", "vmlinuz")
	os.Truncate(vmlinuz, 4)
	if st.HasOutput(key) {
		t.Fatal("an output with a truncated file is reused")
	}
	if err := st.CheckOutput(key); err == nil || !strings.Contains(err.Error(), "boot/vmlinuz: 4 bytes, 12 when committed") {
		t.Fatalf("got %v", err)
	}
	p, _ := st.Verify(context.Background(), nil)
	if len(p) != 1 || !strings.Contains(p[0].String(), "boot/vmlinuz: 4 bytes, 12 when committed") {
		t.Fatalf("verify: %v", p)
	}
	// The rebuild commits over the damaged output.
	commitTestOutput(t, st, key, map[string]string{"boot/vmlinuz": "kernel bytes", "lib/modules/x.ko": "module"})
	if b, _ := os.ReadFile(vmlinuz); string(b) != "kernel bytes" || !st.HasOutput(key) {
		t.Fatalf("rebuild did not replace the damaged output: %q", b)
	}
	os.Remove(vmlinuz)
	if err := st.CheckOutput(key); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing file: %v", err)
	}
	// An output committed before SIZES existed is reused while its files are there.
	commitTestOutput(t, st, key, map[string]string{"boot/vmlinuz": "kernel bytes"})
	os.Remove(filepath.Join(st.OutputDir(key), "SIZES"))
	if err := st.CheckOutput(key); err != nil {
		t.Fatalf("an output without SIZES: %v", err)
	}
}

// BenchmarkHasOutput: the stat-only reuse check on an output of 5,000 files (a
// no-op build runs it for every stage).
func BenchmarkHasOutput(b *testing.B) {
	st, _ := Open(b.TempDir())
	key := "rootfs-" + strings.Repeat("ef", 32)
	files := map[string]string{}
	for i := 0; i < 5000; i++ {
		files[fmt.Sprintf("usr/lib/d%02d/x86_64-linux-gnu/lib%d.so", i%50, i)] = strings.Repeat("x", i%100)
	}
	commitTestOutput(b, st, key, files)
	b.ResetTimer()
	for b.Loop() {
		if !st.HasOutput(key) {
			b.Fatal("not reused")
		}
	}
}

// BenchmarkCommitOutput: hashing and fsyncing an output of 2,000 small files
// (the writing of the files is not timed).
func BenchmarkCommitOutput(b *testing.B) {
	st, _ := Open(b.TempDir())
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		out := filepath.Join(b.TempDir(), "out")
		for j := 0; j < 2000; j++ {
			p := filepath.Join(out, fmt.Sprintf("usr/lib/d%02d/lib%d.so", j%50, j))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(strings.Repeat("x", j%100)+fmt.Sprint(i)), 0o644)
		}
		b.StartTimer()
		if err := st.CommitOutput(fmt.Sprintf("rootfs-%064x", i), out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashDiskTail: the floor of an overlay-edit rebuild's hashing. A
// SHA-256 over a file cannot skip what follows the first changed byte, and
// in the default disk image that is the UKI's last MiB and the report
// partition, 32 MiB mostly holes, hashed as zeros (MB/s is of the range).
func BenchmarkHashDiskTail(b *testing.B) {
	p := filepath.Join(b.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const size = 33 << 20
	data := bytes.Repeat([]byte{0x5a}, 1<<20) // the UKI's tail, then a hole to the end
	if _, err := f.WriteAt(data, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	sf := &sparseFile{f: f, size: size}
	defer sf.unmap()
	var buf []byte
	b.SetBytes(size)
	for b.Loop() {
		if err := sf.hash(sha256.New(), 0, size, &buf); err != nil {
			b.Fatal(err)
		}
	}
}
