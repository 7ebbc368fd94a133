package fsutil

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// CanClone says whether files in dir can be cloned (FICLONE), by cloning a small
// file it makes there and removing both; nil if they can, else why not.
// `peerboot doctor` asks it of the store: without clones an image rebuild
// writes its files whole.
func CanClone(dir string) error {
	src, err := os.CreateTemp(dir, ".clone-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(src.Name())
	defer src.Close()
	if _, err := src.Write([]byte("peerboot clone probe\n")); err != nil {
		return err
	}
	dst, err := os.CreateTemp(dir, ".clone-probe-*")
	if err != nil {
		return err
	}
	defer os.Remove(dst.Name())
	defer dst.Close()
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err != nil {
		return fmt.Errorf("FICLONE: %w", err)
	}
	return nil
}

// fsNames are the statfs magic numbers of the filesystems a store is likely
// to live on (linux/magic.h).
var fsNames = map[int64]string{
	0xEF53:     "ext4", // ext2 and ext3 share it
	0x58465342: "xfs",
	0x9123683E: "btrfs",
	0x01021994: "tmpfs",
	0x794C7630: "overlayfs",
	0x2FC12FC1: "zfs",
	0x6969:     "nfs",
	0xF15F:     "ecryptfs",
	0x65735546: "fuse",
	0xF2F52010: "f2fs",
	0x5346544E: "ntfs",
	0x4D44:     "vfat",
	0x0BD00BD0: "lustre",
	0x73717368: "squashfs",
	0xCA451A4E: "bcachefs",
}

// FSType names the filesystem dir is on ("0x…" for one not listed).
func FSType(dir string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "", err
	}
	if name, ok := fsNames[int64(st.Type)]; ok {
		return name, nil
	}
	return fmt.Sprintf("0x%X", uint64(st.Type)), nil
}
