package e2e

import (
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Crash safety: SIGKILL the build at 20 random moments while the rootfs,
// initramfs, image and publish steps run (their store outputs are removed before
// each attempt so they really run). After every kill `store verify` is clean and
// the previous output directory is intact; the final build gives the same
// SHA256SUMS. Kills inside the kernel and driver compiles are not exercised here:
// each would cost a full compile. (The file sorts last so the store is warm.)
func TestKillBuildAtRandomMoments(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the pipeline 20 times; runs in `make test`")
	}
	outRoot := t.TempDir()
	if out, code := peerboot(t, "fetch"); code != 0 {
		t.Fatalf("fetch: exit %d\n%s", code, out)
	}
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("build: exit %d\n%s", code, out)
	}
	sums := filepath.Join(outRoot, "default", "SHA256SUMS")
	ref, err := os.ReadFile(sums)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := peerboot(t, "plan")
	var later []string // store outputs of the stages after the driver
	for _, line := range strings.Split(plan, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasSuffix(f[0], ".") && (f[1] == "rootfs" || f[1] == "initramfs" || f[1] == "image") {
			later = append(later, filepath.Join(cacheDir(), "out", f[len(f)-1]))
		}
	}
	if len(later) != 3 {
		t.Fatalf("plan lacks the later stages:\n%s", plan)
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d", seed)
	for i := 0; i < 20; i++ {
		for _, d := range later {
			os.RemoveAll(d)
		}
		cmd := exec.Command(bin, "build", "--out", outRoot)
		cmd.Dir = ".."
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait := time.Duration(rng.Int63n(int64(12 * time.Second)))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
			t.Logf("kill %d: the build finished before %s", i, wait)
		case <-time.After(wait):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
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
	if out, code := peerboot(t, "build", "--out", outRoot); code != 0 {
		t.Fatalf("final build: exit %d\n%s", code, out)
	}
	if got, _ := os.ReadFile(sums); string(got) != string(ref) {
		t.Fatalf("the build after the kills differs:\n%s\nwant\n%s", got, ref)
	}
}

func cacheDir() string {
	if c := os.Getenv("PEERBOOT_CACHE"); c != "" {
		return c
	}
	d, _ := os.UserCacheDir()
	return filepath.Join(d, "peerboot")
}
