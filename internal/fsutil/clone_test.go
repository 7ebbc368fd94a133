package fsutil_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/internal/xfstest"
)

// An XFS made with reflinks clones; tmpfs cannot (EOPNOTSUPP), whatever this
// machine's own disks are. Either way the probe's files are gone afterwards.
func TestCanClone(t *testing.T) {
	xfs := xfstest.Mount(t, 300<<20)
	if err := fsutil.CanClone(xfs); err != nil {
		t.Errorf("CanClone(XFS with reflink=1) = %v, want nil", err)
	}
	if name, err := fsutil.FSType(xfs); err != nil || name != "xfs" {
		t.Errorf("FSType(XFS) = %q, %v", name, err)
	}
	tmpfs := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(tmpfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		testguard.Skipf(t, "cannot mount a tmpfs: %v", err) // not root; the XFS half ran (or skipped) above
	}
	t.Cleanup(func() { unix.Unmount(tmpfs, 0) })
	err := fsutil.CanClone(tmpfs)
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
		t.Errorf("CanClone(tmpfs) = %v, want FICLONE refused", err)
	}
	if name, err := fsutil.FSType(tmpfs); err != nil || name != "tmpfs" {
		t.Errorf("FSType(tmpfs) = %q, %v", name, err)
	}
	for _, dir := range []string{xfs, tmpfs} {
		if left, _ := filepath.Glob(filepath.Join(dir, ".clone-probe-*")); len(left) > 0 {
			t.Errorf("the probe left %v", left)
		}
	}
	if err := fsutil.CanClone(filepath.Join(tmpfs, "missing")); err == nil || errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("CanClone(a missing dir) = %v, want the create's error", err)
	}
}
