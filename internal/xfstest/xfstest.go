// Package xfstest mounts a small XFS file system with reflinks for tests of
// what clones files (internal/clonewrite, the image stage): this machine's
// and CI's own file systems may not clone.
package xfstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/internal/testguard"
)

// Mount formats a sparse loop file of size bytes in a temp dir as XFS
// (mkfs.xfs -m reflink=1), mounts it and returns the mount point; it is
// unmounted when tb ends. A missing mkfs.xfs is a guard CI fails on
// (xfsprogs is a test dependency); no root or no loop device skips, with the
// reason.
func Mount(tb testing.TB, size int64) string {
	tb.Helper()
	mkfs, err := exec.LookPath("mkfs.xfs")
	if err != nil {
		testguard.Skip(tb, "mkfs.xfs not installed (xfsprogs): the reflink tests need an XFS file system")
	}
	if os.Geteuid() != 0 {
		tb.Skip("not root: cannot mount an XFS loop file")
	}
	sweep(tb)
	tmp := tb.TempDir()
	img, mnt := filepath.Join(tmp, "xfs.img"), filepath.Join(tmp, "mnt")
	// Who owns the mount: a test binary killed before its cleanup (a timed-out
	// mutant) leaves it mounted, and the next Mount sweeps it (sweep).
	if err := os.WriteFile(filepath.Join(tmp, ownerFile), []byte(processID(os.Getpid())), 0o644); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(img)
	if err != nil {
		tb.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		tb.Fatalf("mkfs.xfs: %v\n%s", err, out)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		tb.Skipf("cannot mount an XFS loop file here (no loop device?): %v: %s", err, bytes.TrimSpace(out))
	}
	// Registered after TempDir's cleanup, so it runs first: unmounted, then removed.
	// A store keeps its scratch locks open until the process exits: then the
	// mount is detached lazily (umount -l), gone once they close.
	tb.Cleanup(func() {
		if exec.Command("umount", mnt).Run() == nil {
			return
		}
		if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
			tb.Errorf("umount -l %s: %v: %s", mnt, err, out)
		}
	})
	if err := fsutil.CanClone(mnt); err != nil {
		tb.Fatalf("XFS made with reflink=1 cannot clone: %v", err)
	}
	return mnt
}

// ownerFile, beside xfs.img, names the process that mounted it.
const ownerFile = "owner"

// processID is pid and its start time (/proc/PID/stat's 22nd field), so a
// reused pid is not taken for the owner; "" if the process is gone.
func processID(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: the fields after it follow its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19] // field 22, counting from the state (field 3)
}

// sweep unmounts and removes what Mount made for processes that are gone.
func sweep(tb testing.TB) {
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || filepath.Base(f[4]) != "mnt" {
			continue
		}
		tmp := filepath.Dir(f[4])
		owner, err := os.ReadFile(filepath.Join(tmp, ownerFile))
		if err != nil {
			continue // not one of ours
		}
		var pid int
		if _, err := fmt.Sscan(string(owner), &pid); err != nil || processID(pid) == string(owner) {
			continue // alive
		}
		if out, err := exec.Command("umount", "-l", f[4]).CombinedOutput(); err != nil {
			tb.Logf("xfstest: umount -l %s, left by gone process %d: %v: %s", f[4], pid, err, out)
			continue
		}
		os.RemoveAll(tmp)
		tb.Logf("xfstest: unmounted and removed %s, left by gone process %d", tmp, pid)
	}
}
