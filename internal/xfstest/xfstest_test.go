package xfstest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/testguard"
)

// A test binary killed before its cleanup (a timed-out mutant, ^C twice)
// leaves its XFS mounted; the next Mount unmounts it and removes its files.
// One that is alive keeps its mount.
func TestSweepsMountsOfGoneProcesses(t *testing.T) {
	if os.Getenv("XFSTEST_CHILD") == "1" {
		mnt := Mount(t, 300<<20)
		os.Stdout.WriteString(mnt + "\n")
		select {} // killed by the parent
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(self, "-test.run=^TestSweepsMountsOfGoneProcesses$", "-test.v")
		cmd.Env = append(os.Environ(), "XFSTEST_CHILD=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "/") {
				return cmd, line
			}
			if strings.Contains(sc.Text(), "SKIP") {
				cmd.Process.Kill()
				cmd.Wait()
				testguard.Skip(t, "the child could not mount: "+sc.Text())
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child printed no mount point")
		return nil, ""
	}
	killed, gone := start()
	alive, kept := start()
	t.Cleanup(func() { alive.Process.Kill(); alive.Wait(); Mount(t, 300<<20) }) // sweeps kept's too
	killed.Process.Kill()
	killed.Wait()
	if !mounted(t, gone) || !mounted(t, kept) {
		t.Fatalf("the children's mounts are not there: %s %s", gone, kept)
	}
	Mount(t, 300<<20)
	if mounted(t, gone) {
		t.Errorf("%s, left by a killed process, is still mounted", gone)
	}
	if _, err := os.Stat(filepath.Dir(gone)); !os.IsNotExist(err) {
		t.Errorf("%s, left by a killed process, is still there (%v)", filepath.Dir(gone), err)
	}
	if !mounted(t, kept) {
		t.Errorf("%s, of a live process, was unmounted", kept)
	}
}

func mounted(t *testing.T, dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
