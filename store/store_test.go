package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	old, _ := st.NewScratch("kernel")
	os.WriteFile(filepath.Join(old, "big.o"), make([]byte, 4096), 0o644)
	fresh, _ := st.NewScratch("driver")
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
