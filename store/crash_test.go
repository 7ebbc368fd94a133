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
// complete with the right sums or absent). Each kill is drawn over the
// shortest commit the first helper measured, counted from the helper's
// "committing 1" line; a kill that still lands outside a commit (the machine
// stalled the helper) is checked the same way and drawn again, until 15 have
// landed inside one.
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
	const kills, attempts = 15, 60
	span := time.Duration(0)
	inside, outside := 0, 0
	for inside < kills {
		if inside+outside == attempts {
			t.Fatalf("only %d of %d kills landed inside a commit (span %s): the draw misses the commit", inside, attempts, span)
		}
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
		if span == 0 {
			span = shortestCommit(t, last, lines, 3)
			t.Logf("the shortest of 3 commits took %s; kills land within it", span)
			last = "committed" // this helper is killed between commits
		} else {
			time.Sleep(time.Duration(rng.Int63n(int64(span))))
		}
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
		n := inside + outside
		if got, _ := fsutil.HashFile(basePath); got != want {
			t.Fatalf("kill %d: the base output changed: %s, was %s", n, got, want)
		}
		probs, err := st.Verify(context.Background(), nil)
		if err != nil || len(probs) > 0 {
			t.Fatalf("kill %d: store verify: %v %v", n, probs, err)
		}
		if strings.HasPrefix(last, "committing") {
			inside++
		} else {
			outside++
		}
	}
	t.Logf("%d kills inside a commit, %d outside", inside, outside)
}

// shortestCommit reads the helper's lines from its "committing 1" (first) over
// its next n commits and returns the shortest time from a "committing" line to
// its "committed" line.
func shortestCommit(t *testing.T, first string, lines <-chan string, n int) time.Duration {
	t.Helper()
	best, start := time.Duration(0), time.Now()
	for done := 0; done < n; {
		l, ok := <-lines
		if !ok {
			t.Fatalf("the helper stopped before %d commits (after %q)", n, first)
		}
		switch {
		case strings.HasPrefix(l, "committing"):
			start = time.Now()
		case strings.HasPrefix(l, "committed"):
			if d := time.Since(start); best == 0 || d < best {
				best = d
			}
			done++
		}
	}
	return best
}
