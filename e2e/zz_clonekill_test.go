package e2e

import (
	"bufio"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// Crash safety of the image stage's in-place write (issue 34): on a store
// with reflinks (an XFS loop mount made for the test, holding a copy of the
// default recipe's warm outputs), the stage starts the UKI, disk and ISO as
// clones of the previous build's and rewrites only the blocks an overlay edit
// changed. SIGKILL that build 8 times at random moments of the image stage
// (drawn over its uninterrupted span, from its "image: building" line to its
// commit): after every kill `store verify` is clean (the previous image
// output's MANIFEST still holds: the clone never wrote through to it) and the
// previous build's published files still check against their SHA256SUMS. A
// rebuild afterwards clones again and equals a build from empty
// (`build --check image`).
func TestKillImageRewriteAtRandomMoments(t *testing.T) {
	testguard.Short(t, "copies the warm store to an XFS loop mount and kills the image stage 8 times")
	const kills, maxAttempts = 8, 30
	keys := planKeys(t)
	mnt := xfstest.Mount(t, 16<<30)
	store := copyStore(t, cacheDir(), filepath.Join(mnt, "store"), keys)
	t.Setenv("PEERBOOT_CACHE", store)
	baseOut := filepath.Join(mnt, "out-base")
	// The copy holds the warm outputs: the kernel is reused, "cached" or, when
	// the copied store holds the recipe's image too, "unused" (nothing that
	// reads it is built). "built" would mean the copy missed it.
	if out, code := peerboot(t, "build", "--out", baseOut); code != 0 || !slices.Contains([]string{"cached", "unused"}, stageStatus(out, "kernel")) {
		t.Fatalf("build of the default recipe in the copied store: exit %d, want the kernel reused (cached or unused):\n%s", code, out)
	}
	baseSums := filepath.Join(baseOut, "default", "SHA256SUMS")

	hostsPath, err := filepath.Abs(filepath.Join("..", "overlay", "etc", "hosts"))
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := os.ReadFile(hostsPath)
	if err != nil {
		t.Fatal(err)
	}
	pb := overlayPeerboot(t, filepath.Join(t.TempDir(), "bin"), hostsPath, append(hosts, fmt.Sprintf("# killed %d\n", time.Now().UnixNano())...))
	// Before each build of the edit: the recipe's last build is the base
	// again (all cached, published aside), and the edit's image output is gone.
	var editedKey string
	reset := func() {
		t.Helper()
		if out, code := peerboot(t, "build", "--out", filepath.Join(mnt, "out-reset")); code != 0 {
			t.Fatalf("build of the base: exit %d\n%s", code, out)
		}
		if editedKey != "" {
			if err := os.RemoveAll(filepath.Join(store, "out", editedKey)); err != nil {
				t.Fatal(err)
			}
		}
	}
	killOut := filepath.Join(mnt, "out-edit")
	first := watchBuild(t, pb, killOut, -1)
	if first.err != nil {
		t.Fatalf("build of the edit: %v\n%s", first.err, first.log)
	}
	if n := strings.Count(first.log, "cloned from the previous build"); n != 3 {
		t.Fatalf("the image stage cloned %d of its 3 files from the previous build, want 3:\n%s", n, first.log)
	}
	editedKey = first.imageKey
	span := first.imageSpan
	t.Logf("the image stage (%s) cloned, wrote and committed in %s:\n%s", editedKey, span.Round(time.Millisecond), imageLines(first.log))

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	killed, finished := 0, 0
	phases := map[string]int{}
	for attempt := 0; killed < kills; attempt++ {
		if attempt == maxAttempts {
			t.Fatalf("only %d of %d attempts were killed in the image stage (%d finished first): want %d", killed, attempt, finished, kills)
		}
		reset()
		wait := time.Duration(rng.Int63n(int64(span)))
		r := watchBuild(t, pb, killOut, wait)
		if !r.killed {
			if r.err != nil {
				t.Fatalf("attempt %d: the build failed without a kill: %v\n%s", attempt, r.err, r.log)
			}
			finished++
			t.Logf("attempt %d: the build finished before %s; not counted", attempt, wait)
			if r.imageSpan > 0 && r.imageSpan < span {
				span = r.imageSpan // the first build read a colder cache
			}
			continue
		}
		killed++
		phases[r.phase]++
		t.Logf("attempt %d: killed %s into the image stage, %s", attempt, wait.Round(time.Millisecond), r.phase)
		if out, code := peerboot(t, "store", "verify"); code != 0 {
			t.Fatalf("after a kill %s (%s): store verify exit %d\n%s", wait, r.phase, code, out)
		}
		check := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
		check.Dir = filepath.Dir(baseSums)
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("after a kill %s (%s): the previous build's published files changed: %v\n%s", wait, r.phase, err, out)
		}
	}
	t.Logf("%d builds killed in the image stage (%v), %d finished first and were not counted", killed, phases, finished)
	if inside := killed - phases["after its commit"]; inside < kills/2 {
		t.Errorf("only %d of %d kills landed before the image commit: the draw misses the in-place write", inside, killed)
	}
	reset()
	last := watchBuild(t, pb, killOut, -1)
	if last.err != nil || strings.Count(last.log, "cloned from the previous build") != 3 {
		t.Fatalf("the build after the kills: %v, want 3 clones:\n%s", last.err, last.log)
	}
	out, errs, code, err := runBuild(pb, "build", "--out", filepath.Join(mnt, "out-check"), "--check", "image")
	if err != nil || code != 0 {
		t.Fatalf("build --check image (from empty, against the cloned output): exit %d %v\n%s%s", code, err, out, errs)
	}
	if out, code := peerboot(t, "store", "verify"); code != 0 {
		t.Fatalf("store verify at the end: exit %d\n%s", code, out)
	}
}

// built is what watchBuild saw of one build.
type built struct {
	log       string
	imageKey  string        // from its "image: building (KEY)" line
	imageSpan time.Duration // from that line to "image: committed"
	killed    bool          // SIGKILL ended it
	phase     string        // where the image stage was when killed
	err       error
}

// watchBuild runs pb build --out out, reading its output as it comes; with
// kill >= 0 it sends SIGKILL that long after the "image: building" line.
func watchBuild(t *testing.T, pb, out string, kill time.Duration) built {
	t.Helper()
	cmd := exec.Command(pb, "build", "--out", out)
	cmd.Dir = ".."
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); done <- err }()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, pr)
		close(lines)
	}()
	var b built
	var log strings.Builder
	var start time.Time
	var timer <-chan time.Time
	phase := "writing the UKI"
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			log.WriteString(l + "\n")
			switch {
			case strings.HasPrefix(l, "image: building ("):
				b.imageKey = strings.TrimSuffix(strings.TrimPrefix(l, "image: building ("), ")")
				start = time.Now()
				if kill >= 0 {
					timer = time.After(kill)
				}
			case strings.HasPrefix(l, "image: peerboot.efi cloned"):
				phase = "writing the disk"
			case strings.HasPrefix(l, "image: disk.img cloned"):
				phase = "writing the ISO"
			case strings.HasPrefix(l, "image: peerboot.iso cloned"):
				phase = "hashing and syncing (the commit)"
			case strings.HasPrefix(l, "image: committed"):
				b.imageSpan = time.Since(start)
				phase = "after its commit"
			}
		case <-timer:
			timer = nil
			b.phase = phase
			cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	b.err = <-done
	b.killed = killedBySIGKILL(b.err)
	b.log = log.String()
	return b
}

// imageLines are the image stage's own lines of a build's log.
func imageLines(log string) string {
	var b strings.Builder
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "image: ") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func runBuild(pb string, args ...string) (string, string, int, error) {
	cmd := exec.Command(pb, args...)
	cmd.Dir = ".."
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errs.String(), ee.ExitCode(), nil
	}
	return out.String(), errs.String(), 0, err
}

// copyStore copies what building the default recipe reads from the store at
// src to dst (another file system: no hard links): its blobs, git mirrors and
// the outputs of the stages in keys it holds; the kernel's and driver's must
// be there (hours to build), the later stages are built if not. src is only
// read.
func copyStore(t *testing.T, src, dst string, keys map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dst, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"blobs", "git"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(src, d), dst).CombinedOutput(); err != nil {
			t.Fatalf("copying the store's %s: %v\n%s", d, err, out)
		}
	}
	for stage, key := range keys {
		if _, err := os.Stat(filepath.Join(src, "out", key)); err != nil && stage != "kernel" && stage != "driver" {
			continue
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(src, "out", key), filepath.Join(dst, "out")).CombinedOutput(); err != nil {
			t.Fatalf("copying the %s stage's output (is the store warm? `make image`): %v\n%s", stage, err, out)
		}
	}
	return dst
}
