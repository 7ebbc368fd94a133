package flash

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/peerboot/peerboot/internal/stickimage"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/reportdisk"
	"github.com/peerboot/peerboot/selftest"
)

// These tests write real block devices: loop devices over sparse files in a
// temporary directory, detached again in cleanup. They need root and losetup.

// needLoop skips away from CI without root, the tools or loop devices; CI
// (root, `make deps` done) has them all, so there it fails instead.
func needLoop(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testguard.Skip(t, "flash tests need root (losetup)")
	}
	for _, tool := range []string{"losetup", "fsck.vfat", "sgdisk"} {
		if _, err := exec.LookPath(tool); err != nil {
			testguard.Skipf(t, "%s not installed (peerboot doctor --packages)", tool)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testguard.Skip(t, "no /dev/loop-control")
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// loopDevice attaches a sparse file of size bytes with partition scanning on.
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "stick.raw")
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, size); err != nil {
		t.Fatal(err)
	}
	dev := sh(t, "losetup", "-f", "--show", "-P", backing)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	return dev
}

// testImage is a small stick with one report on it (internal/stickimage).
func testImage(t *testing.T) string { return stickimage.Write(t, "sha256:flash-test") }

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// partition returns a node for partition n (1-based) of a flashed loop
// device: the kernel's own (devtmpfs creates it after the table is re-read)
// or, on kernels without partition support (some VM kernels), a second loop
// device over the partition's byte range.
func partition(t *testing.T, dev string, n int) string {
	t.Helper()
	node := fmt.Sprintf("%sp%d", dev, n)
	for i := 0; i < 20; i++ {
		if _, err := os.Stat(node); err == nil {
			return node
		}
		time.Sleep(50 * time.Millisecond)
	}
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := image.ReadGPT(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range g.Partitions {
		if p.Index == n-1 {
			loop := sh(t, "losetup", "-f", "--show", "-o", fmt.Sprint(p.Offset()), "--sizelimit", fmt.Sprint(p.Size()), dev)
			t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
			return loop
		}
	}
	t.Fatalf("%s has no partition %d", dev, n)
	return ""
}

func flashOpts() Options {
	return Options{Force: true, Yes: true, BlockSize: 1 << 20}
}

func TestFlashVerifyGrow(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	dev := loopDevice(t, 256<<20)
	var log bytes.Buffer
	opt := flashOpts()
	opt.Log = &log
	opt.GrowReports = true
	res, err := Flash(context.Background(), img, dev, opt)
	if err != nil {
		t.Fatalf("Flash: %v\n%s", err, log.String())
	}
	if res.SHA256 != fileSHA(t, img) {
		t.Errorf("result sha256 %s is not the image's", res.SHA256)
	}
	if !res.Direct {
		t.Error("O_DIRECT was not used on a loop device")
	}
	if res.Reports == nil || res.Reports.NewSize < 180<<20 || res.Reports.Kept != 1 {
		t.Errorf("grow: %+v", res.Reports)
	}
	t.Logf("%s\nwrite %.1f MiB/s, verify %.1f MiB/s", log.String(), res.WriteRate()/(1<<20), res.VerifyRate()/(1<<20))

	// The stick's table and both filesystems are sound, as the Linux tools see them.
	if out := sh(t, "sgdisk", "-v", dev); !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v %s:\n%s", dev, out)
	}
	for _, n := range []int{1, 2} {
		sh(t, "fsck.vfat", "-n", partition(t, dev, n))
	}
	if out := sh(t, "fsck.vfat", "-n", "-v", partition(t, dev, 2)); !strings.Contains(out, "32 bit entries") {
		t.Errorf("grown reports partition is not FAT32:\n%s", out)
	}
	// The report written before the grow is still there and decodes.
	found, err := reportdisk.Read(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Err != nil || found[0].Report.Verdict != selftest.Pass || found[0].Path != "report-20250601T120000Z.json" {
		t.Fatalf("reports after grow: %+v", found)
	}
	// Growing again is a no-op.
	g, err := GrowReports(dev, nil)
	if err != nil || g.NewSize != g.OldSize {
		t.Errorf("second grow: %+v, %v", g, err)
	}
}

// defaultImage is the default recipe's disk image as `make test` builds it
// before the tests (out/default at the top of the tree), or
// $PEERBOOT_TEST_IMAGE: a disk.img or an output directory, relative to the
// top of the tree unless absolute.
func defaultImage() string {
	img := os.Getenv("PEERBOOT_TEST_IMAGE")
	if img == "" {
		img = "out/default/disk.img"
	}
	if !filepath.IsAbs(img) {
		img = filepath.Join("..", img) // the tests run in flash/
	}
	if st, err := os.Stat(img); err == nil && st.IsDir() {
		img = filepath.Join(img, "disk.img")
	}
	return img
}

// The real default image: CI builds it first, so there a missing one fails.
func TestFlashDefaultImage(t *testing.T) {
	testguard.Short(t, "the full-size write of the default image")
	needLoop(t)
	img := defaultImage()
	st, err := os.Stat(img)
	if err != nil {
		testguard.Skipf(t, "the default image is not built (make image, or set PEERBOOT_TEST_IMAGE): %v", err)
	}
	dev := loopDevice(t, st.Size()+64<<20)
	opt := flashOpts()
	opt.BlockSize = DefaultBlockSize
	res, err := Flash(context.Background(), img, dev, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d bytes, write %v (%.1f MiB/s), verify %v (%.1f MiB/s)", img, res.Bytes,
		res.Write.Round(time.Millisecond), res.WriteRate()/(1<<20), res.Verify.Round(time.Millisecond), res.VerifyRate()/(1<<20))
	for _, n := range []int{1, 2} {
		sh(t, "fsck.vfat", "-n", partition(t, dev, n))
	}
	if _, err := reportdisk.Read(dev); err != nil {
		t.Errorf("reports on the default image: %v", err)
	}
}

// An image whose length is not a whole number of logical blocks: the end is
// written with O_DIRECT switched off on the same descriptor, and read back.
func TestFlashUnalignedTail(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte("tail"), 250)) // 1000 bytes past the last block
	f.Close()
	dev := loopDevice(t, 128<<20)
	res, err := Flash(context.Background(), img, dev, flashOpts())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Direct || res.SHA256 != fileSHA(t, img) {
		t.Errorf("direct %v, sha256 %s, want O_DIRECT and the image's", res.Direct, res.SHA256)
	}
	st, _ := os.Stat(img)
	got := make([]byte, 1000)
	g, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.ReadAt(got, st.Size()-1000); err != nil || !bytes.Equal(got, bytes.Repeat([]byte("tail"), 250)) {
		t.Errorf("the device's last 1000 bytes of the image: %q, %v", got[:16], err)
	}
}

func TestMismatchCaught(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	dev := loopDevice(t, 128<<20)
	opt := flashOpts()
	opt.readBack = func(off int64, b []byte) {
		if off <= 50<<20 && 50<<20 < off+int64(len(b)) {
			b[50<<20-off] ^= 0x01 // one bit, as a failing flash cell would
		}
	}
	_, err := Flash(context.Background(), img, dev, opt)
	var mm *MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("Flash with a corrupted read-back: %v, want a MismatchError", err)
	}
	if mm.Want != fileSHA(t, img) || mm.Got == mm.Want {
		t.Errorf("mismatch: %+v", mm)
	}
	// The corruption was in the read-back only, so the second pass finds the
	// medium itself intact.
	if mm.Offset != -1 {
		t.Errorf("first difference at %d, want none on the medium", mm.Offset)
	}
}

func exists(p string) bool {
	time.Sleep(200 * time.Millisecond)
	_, err := os.Stat(p)
	return err == nil
}

// fakePartitionSys builds a sysfs where block device part is a partition of disk.
func fakePartitionSys(t *testing.T, part, disk string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(part, &st); err != nil {
		t.Fatal(err)
	}
	sys := t.TempDir()
	dir := filepath.Join(sys, "devices/virtual/block", filepath.Base(disk), filepath.Base(disk)+"p2")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "partition"), []byte("2\n"), 0o644)
	os.MkdirAll(filepath.Join(sys, "dev/block"), 0o755)
	if err := os.Symlink(dir, filepath.Join(sys, "dev/block", fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))); err != nil {
		t.Fatal(err)
	}
	return sys
}

func refusedFor(t *testing.T, err error, want string) {
	t.Helper()
	var r *Refused
	if !errors.As(err, &r) {
		t.Fatalf("got %v, want a refusal mentioning %q", err, want)
	}
	if !strings.Contains(r.Error(), want) {
		t.Errorf("refusal %q does not mention %q", r.Error(), want)
	}
}

func TestRefusals(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	ctx := context.Background()

	small := loopDevice(t, 32<<20)
	_, err := Flash(ctx, img, small, flashOpts())
	refusedFor(t, err, "larger than the device")

	dev := loopDevice(t, 128<<20)
	opt := flashOpts()
	opt.Force = false
	_, err = Flash(ctx, img, dev, opt)
	refusedFor(t, err, "not a removable disk")

	opt = flashOpts()
	opt.Yes = false
	opt.Confirm = func(d *Device) (bool, error) {
		if !strings.Contains(d.String(), "loop device backed by") {
			t.Errorf("confirmation line %q does not describe the device", d.String())
		}
		return false, nil
	}
	_, err = Flash(ctx, img, dev, opt)
	refusedFor(t, err, "not confirmed")

	_, err = Flash(ctx, img, img, flashOpts())
	refusedFor(t, err, "not a block device")

	// A partition of a disk.
	if _, err := Flash(ctx, img, dev, flashOpts()); err != nil {
		t.Fatal(err)
	}
	if part := dev + "p2"; exists(part) {
		_, err = Flash(ctx, img, part, flashOpts())
		refusedFor(t, err, "is a partition")
	} else {
		// No partition nodes on this kernel: a fake sysfs says the second
		// loop device is partition 2 of the first.
		other := loopDevice(t, 64<<20)
		_, err = Flash(ctx, img, other, Options{Force: true, Yes: true, Env: Env{Sys: fakePartitionSys(t, other, dev)}})
		refusedFor(t, err, "is a partition, not a whole disk: give "+dev)
	}

	// The running root and swap, staged through a fake /proc naming the loop device.
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "self"), 0o755)
	mi := fmt.Sprintf("22 1 %d:%d / / rw,relatime - ext4 %s rw\n", unix.Major(st.Rdev), unix.Minor(st.Rdev), dev)
	os.WriteFile(filepath.Join(proc, "self/mountinfo"), []byte(mi), 0o644)
	os.WriteFile(filepath.Join(proc, "swaps"), []byte("Filename\tType\tSize\tUsed\tPriority\n"+dev+"\tpartition\t1024\t0\t-2\n"), 0o644)
	opt = flashOpts()
	opt.Env = Env{Proc: proc}
	_, err = Flash(ctx, img, dev, opt)
	refusedFor(t, err, "running root filesystem")
	refusedFor(t, err, "swap")

	// A mounted filesystem on the whole disk.
	mnt := mountExt4(t, dev)
	_, err = Flash(ctx, img, dev, flashOpts())
	refusedFor(t, err, "mounted at "+mnt)
}

// filledLoop attaches a loop device over a file of size bytes filled with a
// pattern, so that any write to it shows in its hash; detaching is
// best-effort in cleanup, since a test may leave it detached already.
func filledLoop(t *testing.T, size int64) (dev, backing string) {
	t.Helper()
	backing = filepath.Join(t.TempDir(), "victim.raw")
	if err := os.WriteFile(backing, bytes.Repeat([]byte("not yours, never inspected\n"), int(size/27)+1)[:size], 0o600); err != nil {
		t.Fatal(err)
	}
	dev = sh(t, "losetup", "-f", "--show", backing)
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev, backing
}

// attachedTo says which file a loop device is backed by now ("" when detached).
func attachedTo(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop/backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// The device written is the device inspected and confirmed: what the path
// names after the "yes" does not matter (issue 15 item 10). Two ways the
// path can come to name another disk while the prompt waits: the loop device
// is detached and re-attached to another file, or the device node itself is
// replaced by one for another disk. Either way the other disk must keep its
// bytes, and what was inspected is what holds the image.
func TestFlashWritesTheDeviceItInspected(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	ctx := context.Background()

	t.Run("loop device re-attached during the prompt", func(t *testing.T) {
		dev, inspected := filledLoop(t, 128<<20)
		victim := filepath.Join(t.TempDir(), "victim.raw")
		if err := os.WriteFile(victim, bytes.Repeat([]byte{0xa5}, 128<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		before := fileSHA(t, victim)
		opt := flashOpts()
		opt.Yes = false
		reattached := false
		opt.Confirm = func(d *Device) (bool, error) {
			// Detach and attach the same node to another file, as a second
			// losetup (or a udisks user) would. While flash holds the disk
			// open, the kernel only marks it for detaching on last close, and
			// the second attach fails: the node stays on the inspected file.
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
			}
			out, err := exec.Command("losetup", dev, victim).CombinedOutput()
			reattached = err == nil
			t.Logf("re-attaching %s to %s during the prompt: %v %s (now backed by %q)", dev, victim, err, bytes.TrimSpace(out), attachedTo(dev))
			return true, nil
		}
		res, err := Flash(ctx, img, dev, opt)
		if got := fileSHA(t, victim); got != before {
			t.Fatalf("the file attached during the prompt was written (sha256 %s, was %s); Flash: %v", got, before, err)
		}
		if err != nil {
			t.Fatalf("Flash: %v", err)
		}
		if reattached {
			t.Errorf("%s was re-attached while flash held it open", dev)
		}
		if res.SHA256 != fileSHA(t, img) {
			t.Errorf("result sha256 %s is not the image's", res.SHA256)
		}
		// The inspected file holds the image.
		if !sameStart(t, inspected, img) {
			t.Errorf("%s (what was inspected) does not hold the image", inspected)
		}
	})

	t.Run("device node replaced during the prompt", func(t *testing.T) {
		first, inspected := filledLoop(t, 128<<20)
		second, victim := filledLoop(t, 128<<20)
		before := fileSHA(t, victim)
		node := filepath.Join(nodeDir(t), "stick")
		mknodLike(t, node, first)
		opt := flashOpts()
		opt.Yes = false
		opt.Confirm = func(d *Device) (bool, error) {
			if !strings.Contains(d.String(), inspected) {
				t.Errorf("confirmation line %q does not name the inspected disk's backing file %s", d.String(), inspected)
			}
			os.Remove(node)
			mknodLike(t, node, second)
			return true, nil
		}
		_, err := Flash(ctx, img, node, opt)
		if got := fileSHA(t, victim); got != before {
			t.Fatalf("%s (behind the node made during the prompt) was written (sha256 %s, was %s); Flash: %v", second, got, before, err)
		}
		if err != nil {
			t.Fatalf("Flash: %v", err)
		}
		if !sameStart(t, inspected, img) {
			t.Errorf("%s (what was inspected) does not hold the image", inspected)
		}
	})
}

// nodeDir is a directory where device nodes work: the test's own unless its
// filesystem is mounted nodev (a tmpfs /tmp often is), else /dev.
func nodeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Flags&unix.ST_NODEV == 0 {
		return dir
	}
	dir, err := os.MkdirTemp("/dev", "peerboot-flash-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// mknodLike makes a block device node at path for the same disk as dev.
func mknodLike(t *testing.T, path, dev string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(path, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
}

// sameStart says whether file a begins with the whole of file b.
func sameStart(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return len(x) >= len(y) && bytes.Equal(x[:len(y)], y)
}

// A loop device attached over the stick (or one of its partitions) uses it
// without claiming it, so O_EXCL does not stop flash: a filesystem mounted
// from that loop device would be overwritten under its feet. Flash must
// refuse it as it refuses a device-mapper holder.
func TestRefusesDiskBackingALoopDevice(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	stick := loopDevice(t, 128<<20)
	over := sh(t, "losetup", "-f", "--show", stick)
	t.Cleanup(func() { exec.Command("losetup", "-d", over).Run() })
	mountExt4(t, over)

	_, err := Flash(context.Background(), img, stick, flashOpts())
	refusedFor(t, err, over)
}

// The other way round: the disk named is a loop device over a disk (or a
// partition) that is mounted. The loop device itself is unclaimed, so O_EXCL
// lets flash open it, and --force (which a loop device, never removable,
// needs) must not let it overwrite the mounted filesystem underneath.
func TestRefusesLoopDeviceOverMountedDisk(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	under := loopDevice(t, 128<<20)
	mnt := mountExt4(t, under)
	over := sh(t, "losetup", "-f", "--show", under)
	t.Cleanup(func() { exec.Command("losetup", "-d", over).Run() })

	_, err := Flash(context.Background(), img, over, flashOpts())
	refusedFor(t, err, "it is a loop device over "+under+", and "+under+" is mounted at "+mnt)
}

// mountExt4 makes an ext4 on dev and mounts it (unmounted at the test's end),
// returning where.
func mountExt4(t *testing.T, dev string) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		testguard.Skip(t, "mkfs.ext4 not installed (e2fsprogs)")
	}
	sh(t, "mkfs.ext4", "-q", "-F", dev)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", dev, mnt).CombinedOutput(); err != nil {
		testguard.Skipf(t, "cannot mount ext4 here: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	return mnt
}

// The image flash opened is the image written and the one verified: a build
// that renames a new disk.img into place while the prompt waits must not
// turn a good write into "the stick may be failing" (the hash was taken of
// the path again, the new file, while the stick holds the old one).
func TestImageReplacedDuringPrompt(t *testing.T) {
	needLoop(t)
	img := testImage(t)
	want := fileSHA(t, img)
	dev := loopDevice(t, 128<<20)
	opt := flashOpts()
	opt.Yes = false
	opt.Confirm = func(*Device) (bool, error) {
		other := img + ".new"
		if err := os.WriteFile(other, []byte("a newer build"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(other, img); err != nil {
			t.Fatal(err)
		}
		return true, nil
	}
	res, err := Flash(context.Background(), img, dev, opt)
	if err != nil {
		t.Fatalf("Flash: %v", err)
	}
	if res.SHA256 != want {
		t.Errorf("result sha256 %s, want %s (the image written)", res.SHA256, want)
	}
}
