package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/internal/testguard"
)

// crashKey is the i-th output the crash helper commits.
func crashKey(i int) string { return fmt.Sprintf("image-%064x", i+1) }

// TestCommitCrashHelper is not a test: run by TestKillCommitAtRandomMoments
// (STORE_CRASH_ROOT set), it commits, one after another, outputs that resume
// from the base output 0 (its file's tail edited), until it is killed.
func TestCommitCrashHelper(t *testing.T) {
	root := os.Getenv("STORE_CRASH_ROOT")
	if root == "" {
		return
	}
	st, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(st.OutputDir(crashKey(0)), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; ; i++ {
		dir, err := st.NewScratch("crash")
		if err != nil {
			t.Fatal(err)
		}
		b := append([]byte(nil), base...)
		copy(b[len(b)-100:], strconv.Itoa(i))
		writeSparse(t, filepath.Join(dir, "disk.img"), b)
		fmt.Printf("committing %d\n", i)
		if err := st.CommitOutputWith(crashKey(i), dir, CommitOptions{Base: crashKey(0)}); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("committed %d\n", i)
	}
}

// SIGKILL a process at random moments while it commits outputs that resume
// hashing from a base output: after every kill the base output is intact (its
// sum unchanged) and `store verify` finds nothing wrong (an output is either
// complete with the right sums or absent). Kills are drawn after the helper's
// first "committing" line, over twice its first commit's length, and at least
// a third of them must land inside a commit.
func TestKillCommitAtRandomMoments(t *testing.T) {
	testguard.Short(t, "kills a committing process 15 times")
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3*midChunk+5000)
	rand.New(rand.NewSource(3)).Read(b)
	dir, _ := st.NewScratch("crash")
	writeSparse(t, filepath.Join(dir, "disk.img"), b)
	if err := st.CommitOutput(crashKey(0), dir); err != nil {
		t.Fatal(err)
	}
	basePath := filepath.Join(st.OutputDir(crashKey(0)), "disk.img")
	want, _ := fsutil.HashFile(basePath)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	const kills = 15
	span, inside := time.Duration(0), 0
	for kill := 0; kill < kills; kill++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCommitCrashHelper$")
		cmd.Env = append(os.Environ(), "STORE_CRASH_ROOT="+st.Root)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1000)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		last := <-lines // "committing 1": the helper is in its first commit
		start := time.Now()
		if span == 0 { // the first run measures how long one commit takes
			for l := range lines {
				if strings.HasPrefix(l, "committed") {
					break
				}
			}
			span = 2 * time.Since(start)
			t.Logf("one commit takes %s; kills land within %s of a commit's start", span/2, span)
		}
		time.Sleep(time.Duration(rng.Int63n(int64(span))))
		cmd.Process.Kill()
	drain:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break drain
				}
				last = l
			case <-time.After(100 * time.Millisecond):
				break drain
			}
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("the helper ended by itself: %v", err)
		}
		if got, _ := fsutil.HashFile(basePath); got != want {
			t.Fatalf("kill %d: the base output changed: %s, was %s", kill, got, want)
		}
		probs, err := st.Verify(context.Background(), nil)
		if err != nil || len(probs) > 0 {
			t.Fatalf("kill %d: store verify: %v %v", kill, probs, err)
		}
		if strings.HasPrefix(last, "committing") {
			inside++
		}
	}
	t.Logf("%d kills, %d inside a commit", kills, inside)
	if inside < kills/3 {
		t.Errorf("only %d of %d kills landed inside a commit", inside, kills)
	}
}
