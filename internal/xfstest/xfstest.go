// Package xfstest mounts a small XFS file system with reflinks for tests of
// what clones files (internal/clonewrite, the image stage): this machine's
// and CI's own file systems may not clone.
package xfstest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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
	tmp := tb.TempDir()
	img, mnt := filepath.Join(tmp, "xfs.img"), filepath.Join(tmp, "mnt")
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
