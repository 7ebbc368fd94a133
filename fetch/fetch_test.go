package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/store"
)

func payload(n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(1)).Read(b)
	return b
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// rangeServer serves data with Range support and records every request's Range header.
type rangeServer struct {
	data   []byte
	mu     sync.Mutex
	ranges []string
	// stallAfter, if > 0, makes the first request send that many bytes and then hang.
	stallAfter int
	stalled    chan struct{}
}

func (s *rangeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	first := len(s.ranges) == 0
	s.ranges = append(s.ranges, r.Header.Get("Range"))
	s.mu.Unlock()
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
		start, _ = strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, len(s.data)-1, len(s.data)))
		w.Header().Set("Content-Length", strconv.Itoa(len(s.data)-start))
		w.WriteHeader(http.StatusPartialContent)
	} else {
		w.Header().Set("Content-Length", strconv.Itoa(len(s.data)))
	}
	body := s.data[start:]
	if first && s.stallAfter > 0 {
		w.Write(body[:s.stallAfter])
		w.(http.Flusher).Flush()
		close(s.stalled)
		<-r.Context().Done() // hang until the client dies
		return
	}
	w.Write(body)
}

func (s *rangeServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...)
}

// TestMain runs as the process the kill test kills when PEERBOOT_FETCH_CHILD is
// set (not as a test that would skip everywhere else).
func TestMain(m *testing.M) {
	if os.Getenv("PEERBOOT_FETCH_CHILD") != "" {
		fetchChild()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fetchChild() {
	st, err := store.Open(os.Getenv("PEERBOOT_FETCH_STORE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	in := lock.Input{Role: "userspace", Name: "big", Kind: "deb", URL: os.Getenv("PEERBOOT_FETCH_URL"), SHA256: os.Getenv("PEERBOOT_FETCH_SUM")}
	Fetch(context.Background(), st, []lock.Input{in}, Options{})
}

func TestKillMidwayThenRefetch(t *testing.T) {
	data := payload(4 << 20)
	srv := &rangeServer{data: data, stallAfter: 1 << 20, stalled: make(chan struct{})}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	root := t.TempDir()
	child := exec.Command(os.Args[0])
	child.Env = append(os.Environ(), "PEERBOOT_FETCH_CHILD=1", "PEERBOOT_FETCH_STORE="+root,
		"PEERBOOT_FETCH_URL="+ts.URL+"/big.deb", "PEERBOOT_FETCH_SUM="+sum(data))
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.stalled:
	case <-time.After(30 * time.Second):
		child.Process.Kill()
		t.Fatal("child never started downloading")
	}
	partial := filepath.Join(root, "tmp", sum(data)+".partial")
	waitFor(t, func() bool { fi, err := os.Stat(partial); return err == nil && fi.Size() > 0 })
	child.Process.Kill() // SIGKILL: no cleanup runs
	child.Wait()

	st, _ := store.Open(root)
	if st.HasBlob(sum(data)) {
		t.Fatal("a killed fetch left an entry that looks complete")
	}
	if problems, err := st.Verify(context.Background(), nil); err != nil || len(problems) != 0 {
		t.Fatalf("store verify after kill: %v %v", problems, err)
	}
	in := lock.Input{Role: "userspace", Name: "big", Kind: "deb", URL: ts.URL + "/big.deb", SHA256: sum(data), Size: int64(len(data))}
	stats, err := Fetch(context.Background(), st, []lock.Input{in}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Downloaded != 1 || stats.Bytes >= int64(len(data)) {
		t.Fatalf("refetch should resume, not restart: %+v", stats)
	}
	reqs := srv.requests()
	if last := reqs[len(reqs)-1]; !strings.HasPrefix(last, "bytes=") || last == "bytes=0-" {
		t.Fatalf("refetch sent Range %q, want a resume offset", last)
	}
	if err := st.CheckBlob(sum(data)); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if ok() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("timed out waiting")
}

func TestMismatchFailsAndLeavesNothing(t *testing.T) {
	data := payload(1 << 16)
	ts := httptest.NewServer(&rangeServer{data: data})
	defer ts.Close()
	st, _ := store.Open(t.TempDir())
	want := sum([]byte("what the lock pinned"))
	in := lock.Input{Role: "userspace", Name: "libcuda1", Kind: "deb", URL: ts.URL + "/x.deb", SHA256: want}
	_, err := Fetch(context.Background(), st, []lock.Input{in}, Options{})
	var mm *store.MismatchError
	if !errors.As(err, &mm) || mm.Want != want || mm.Got != sum(data) || !strings.Contains(err.Error(), "/x.deb") {
		t.Fatalf("want a mismatch naming URL, expected and got; got %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(st.Root, "tmp")); len(entries) != 0 {
		t.Fatalf("mismatch left temp files: %v", entries)
	}
	if st.HasBlob(want) {
		t.Fatal("mismatched bytes entered the store")
	}
}

func TestTamperedEntryIsReplacedAndSecondFetchDownloadsNothing(t *testing.T) {
	data := payload(1 << 16)
	srv := &rangeServer{data: data}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	st, _ := store.Open(t.TempDir())
	in := lock.Input{Role: "userspace", Name: "nvidia-smi", Kind: "deb", URL: ts.URL + "/n.deb", SHA256: sum(data), Size: int64(len(data))}
	if _, err := Fetch(context.Background(), st, []lock.Input{in}, Options{}); err != nil {
		t.Fatal(err)
	}
	path := st.BlobPath(sum(data))
	raw, _ := os.ReadFile(path)
	raw[100] ^= 0xff
	os.WriteFile(path, raw, 0o644)
	var log bytes.Buffer
	stats, err := Fetch(context.Background(), st, []lock.Input{in}, Options{Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Replaced != 1 || stats.Downloaded != 1 || !strings.Contains(log.String(), "corrupt") {
		t.Fatalf("want the corrupt entry replaced: %+v, log %q", stats, log.String())
	}
	before := len(srv.requests())
	stats, err = Fetch(context.Background(), st, []lock.Input{in}, Options{})
	if err != nil || stats.Present != 1 || stats.Downloaded != 0 || len(srv.requests()) != before {
		t.Fatalf("second fetch should download nothing: %+v %v", stats, err)
	}
}

func TestGitMirror(t *testing.T) {
	src := t.TempDir()
	run := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", src}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	os.WriteFile(filepath.Join(src, "Makefile"), []byte("modules:\n"), 0o644)
	run("add", ".")
	run("commit", "-qm", "one")
	commit := run("rev-parse", "HEAD")
	st, _ := store.Open(t.TempDir())
	url := "https://git.invalid/open-gpu-kernel-modules.git" // never contacted: the mirror stands in
	mirrors := map[string]string{url: src}
	in := lock.Input{Role: "driver-source", Name: url, Kind: "git", URL: url, Commit: commit}
	stats, err := Fetch(context.Background(), st, []lock.Input{in}, Options{GitMirrors: mirrors})
	if err != nil || stats.Downloaded != 1 {
		t.Fatalf("%+v %v", stats, err)
	}
	if stats, err := Fetch(context.Background(), st, []lock.Input{in}, Options{GitMirrors: mirrors}); err != nil || stats.Present != 1 {
		t.Fatalf("second git fetch: %+v %v", stats, err)
	}
	in.Commit = strings.Repeat("0", 40)
	if _, err := Fetch(context.Background(), st, []lock.Input{in}, Options{GitMirrors: mirrors}); err == nil {
		t.Fatal("a commit the mirror lacks was accepted")
	}
}

func TestParseGitMirrors(t *testing.T) {
	m, err := ParseGitMirrors("https://a/x.git=/srv/x, https://b/y.git=/srv/y")
	if err != nil || m["https://a/x.git"] != "/srv/x" || m["https://b/y.git"] != "/srv/y" {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := ParseGitMirrors("no-equals-sign"); err == nil {
		t.Fatal("malformed pair accepted")
	}
}

func TestVanishedDebSaysHowToRecover(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	st, _ := store.Open(t.TempDir())
	in := lock.Input{Role: "kernel-source", Name: "linux-source-6.1_6.1.192-3", Kind: "deb", URL: ts.URL + "/pool/l.deb", SHA256: sum([]byte("x"))}
	_, err := Fetch(context.Background(), st, []lock.Input{in}, Options{})
	if err == nil || !strings.Contains(err.Error(), "peerboot lock") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("got %v", err)
	}
}

// A server that sends more than the lock's size is cut off one byte past it
// and refused: it cannot fill the store's disk before the hash check.
func TestOversizedDownloadIsCutOff(t *testing.T) {
	data := payload(1 << 20)
	var sent int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 64; i++ { // 64 MiB offered for a 4 KiB pin
			n, err := w.Write(data)
			sent += int64(n)
			if err != nil {
				return
			}
		}
	}))
	defer ts.Close()
	st, _ := store.Open(t.TempDir())
	in := lock.Input{Role: "userspace", Name: "libcuda1", Kind: "deb", URL: ts.URL + "/x.deb", SHA256: sum(data[:4096]), Size: 4096}
	_, err := Fetch(context.Background(), st, []lock.Input{in}, Options{})
	if err == nil || !strings.Contains(err.Error(), "more than the 4096 bytes pinned") {
		t.Fatalf("want a refusal naming the pinned size, got %v", err)
	}
	var held int64
	filepath.WalkDir(st.Root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, _ := d.Info(); fi != nil {
				held += fi.Size()
			}
		}
		return nil
	})
	if held > 1<<16 {
		t.Errorf("the store holds %d bytes after refusing a 4096-byte pin", held)
	}
}

// NVIDIA's site is not reachable from every build machine: the installer's
// failure names the air-gapped path, and the other inputs are fetched anyway.
func TestUnreachableInstallerSaysHowToImportIt(t *testing.T) {
	deb := payload(3000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".run") {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		w.Write(deb)
	}))
	defer srv.Close()
	st, _ := store.Open(t.TempDir())
	runSum := strings.Repeat("c", 64)
	ins := []lock.Input{
		{Role: lock.RoleInstaller, Name: "NVIDIA-Linux-x86_64-580.142.run", Kind: "url", URL: srv.URL + "/NVIDIA-Linux-x86_64-580.142.run", SHA256: runSum},
		{Role: lock.RoleUserspace, Name: "libc6", Kind: "deb", URL: srv.URL + "/libc6.deb", SHA256: sum(deb), Size: int64(len(deb))},
	}
	stats, err := Fetch(context.Background(), st, ins, Options{HTTP: srv.Client(), Parallel: 1, Recipe: "recipes/rtx5090-4gpu.toml"})
	var ie *InstallerError
	if !errors.As(err, &ie) {
		t.Fatalf("got %v, want an InstallerError", err)
	}
	for _, want := range []string{"HTTP 403", "peerboot store import recipes/rtx5090-4gpu.toml NVIDIA-Linux-x86_64-580.142.run", runSum} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if stats.Downloaded != 1 || !st.HasBlob(sum(deb)) {
		t.Errorf("the reachable input was not fetched: %+v", stats)
	}
}
