package e2e

import (
	"errors"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
)

// Crash safety: SIGKILL the build 20 times at random moments while the stages
// after the driver (userspace to image, and the publish) run: their store
// outputs are removed before each attempt so they really run. Only a build the
// signal really ended counts as a kill; one that finished first is retried, up
// to a bound. After every kill `store verify` is clean and the previous output
// directory is intact; the final build gives the same SHA256SUMS. Kills inside
// the kernel and driver compiles are not exercised here: each would cost a full
// compile. (The file sorts last so the store is warm.)
//
// The kills and removals happen in a private store (privateStore: the shared
// store's blobs and this recipe's kernel and driver outputs hard-linked), never
// in the shared one: a build beside the tests must not see its outputs pulled
// away. That also keeps each `store verify` to this recipe's entries.
func TestKillBuildAtRandomMoments(t *testing.T) {
	testguard.Short(t, "builds and kills the pipeline 20 times")
	const kills, maxAttempts = 20, 60
	outRoot := t.TempDir()
	fetchBuildDefault(t, outRoot)
	sums := filepath.Join(outRoot, "default", "SHA256SUMS")
	ref, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	keys := planKeys(t)
	t.Setenv("PEERBOOT_CACHE", privateStore(t, func(o string) bool { return o == keys["kernel"] || o == keys["driver"] }))
	var later []string
	for stage, key := range keys {
		if stage != "kernel" && stage != "driver" {
			later = append(later, filepath.Join(cacheDir(), "out", key))
		}
	}
	if len(later) < 2 || keys["kernel"] == "" || keys["driver"] == "" {
		t.Fatalf("plan: want the kernel, the driver and the stages after them, got %v", keys)
	}
	removeLater := func() {
		for _, d := range later {
			if err := os.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	// How long those stages take uninterrupted bounds the kill moments, so
	// nearly every draw lands inside the build.
	removeLater()
	start := time.Now()
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("build of the later stages: exit %d\n%s", code, out)
	}
	span := time.Since(start)
	t.Logf("the stages after the driver build in %s", span.Round(time.Millisecond))

	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	killed, finished := 0, 0
	for attempt := 0; killed < kills; attempt++ {
		if attempt == maxAttempts {
			t.Fatalf("only %d of %d attempts were killed mid-build (%d finished first): want %d kills", killed, attempt, finished, kills)
		}
		removeLater()
		cmd := exec.Command(bin, "build", "--out", outRoot)
		cmd.Dir = ".."
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait := time.Duration(rng.Int63n(int64(span)))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var werr error
		select {
		case werr = <-done:
		case <-time.After(wait):
			cmd.Process.Signal(syscall.SIGKILL)
			werr = <-done
		}
		if !killedBySIGKILL(werr) {
			// It exited by itself (the signal came after, or never): not a kill.
			if werr != nil {
				t.Fatalf("attempt %d: the build failed without a kill: %v", attempt, werr)
			}
			finished++
			t.Logf("attempt %d: the build finished before %s; not counted", attempt, wait)
			continue
		}
		killed++
		if out, code := peerboot(t, "store", "verify"); code != 0 {
			t.Fatalf("after a kill at %s: store verify exit %d\n%s", wait, code, out)
		}
		got, err := os.ReadFile(sums)
		if err != nil || string(got) != string(ref) {
			t.Fatalf("after a kill at %s: the output directory changed: %v", wait, err)
		}
		check := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
		check.Dir = filepath.Join(outRoot, "default")
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("after a kill at %s: previous output damaged: %v\n%s", wait, err, out)
		}
	}
	t.Logf("%d builds killed mid-way, %d finished before the kill and were not counted", killed, finished)
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("final build: exit %d\n%s", code, out)
	}
	if got, _ := os.ReadFile(sums); string(got) != string(ref) {
		t.Fatalf("the build after the kills differs:\n%s\nwant\n%s", got, ref)
	}
}

// planKeys are the action keys `peerboot plan` gives the default recipe's
// stages, by stage name.
func planKeys(t *testing.T) map[string]string {
	t.Helper()
	plan, code := peerboot(t, "plan", "recipes/default.toml")
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, plan)
	}
	keys := map[string]string{}
	for _, line := range strings.Split(plan, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasSuffix(f[0], ".") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(f[0], ".")); err != nil {
			continue
		}
		key := f[len(f)-1]
		if !strings.HasPrefix(key, f[1]+"-") {
			t.Fatalf("plan: stage %s has no key:\n%s", f[1], plan)
		}
		keys[f[1]] = key
	}
	return keys
}

// killedBySIGKILL says whether a build's Wait error is its death by SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func cacheDir() string {
	if c := os.Getenv("PEERBOOT_CACHE"); c != "" {
		return c
	}
	d, _ := os.UserCacheDir()
	return filepath.Join(d, "peerboot")
}

// Only a death by SIGKILL counts as a kill: not a clean exit, a failure, or
// another signal.
func TestKilledBySIGKILL(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   bool
	}{
		{"exit 0", false},
		{"exit 3", false},
		{"kill -TERM $$", false},
		{"kill -KILL $$", true},
	} {
		err := exec.Command("sh", "-c", tc.script).Run()
		if got := killedBySIGKILL(err); got != tc.want {
			t.Errorf("%q (%v): killedBySIGKILL %v, want %v", tc.script, err, got, tc.want)
		}
	}
}
