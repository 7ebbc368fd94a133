package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/flash"
	"github.com/peerboot/peerboot/output"
	"github.com/peerboot/peerboot/progress"
)

func flashCmd() *cobra.Command {
	var opt flash.Options
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "flash IMAGE DEVICE [--yes] [--force] [--grow-reports]",
		Short: "Write a disk image to a USB stick and verify it",
		Long: `flash writes IMAGE (a disk.img, or a build output directory holding one) to
DEVICE, a whole disk such as /dev/sdb.

It opens DEVICE once, read-write and exclusively (O_EXCL: the kernel refuses a
mounted or claimed disk, and nothing can mount or claim it while flash holds it),
and does everything through that one descriptor: the checks read sysfs by the
descriptor's own device number, and the write, the read-back and the grow use it,
so the disk written is the disk shown, even if the path names another one by the
time "yes" is typed.

Before writing it refuses a device that is mounted (any partition), holds the
running root filesystem or an active swap area, is held by device-mapper/LVM/RAID
or backs a loop device, is read-only, is a partition rather than a whole disk, or
is smaller than the image; a loop device over a disk that is in use; and a disk
sysfs does not call removable unless --force. It shows the device's
model, serial and size and asks for "yes" unless --yes.

It writes in 4 MiB blocks with O_DIRECT (aligned buffers; plain writes where the
device refuses O_DIRECT), reading and hashing the next block while the current one
is written, then fsyncs, reads the image's length back from the medium and
compares sha256 hashes. Progress (bytes, rate, ETA) is redrawn on a terminal and
printed as plain lines otherwise; the write and verify throughput are reported.

--grow-reports then grows the PEERBOOT report partition to the end of the device
(at most 2 TiB, the largest FAT32):
the GPT (primary and backup) is rewritten for the device's size, and the report
filesystem is re-created at the new size (FAT32 above 33 MiB) with the files it
held copied over.

Exit codes: 0 written and verified; 10 (device) refused, not confirmed, or an I/O
error; 6 (integrity) the read-back differs from the image; 2 bad command line.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opt.BlockSize <= 0 || opt.BlockSize%4096 != 0 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("--block-size: want a positive multiple of 4096, got %d", opt.BlockSize))
			}
			img := args[0]
			if st, err := os.Stat(img); err != nil {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("image: %w", err))
			} else if st.IsDir() {
				img = filepath.Join(img, output.DiskFile)
				if _, err := os.Stat(img); err != nil {
					return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: no %s: not a build output (peerboot build writes out/RECIPE)", args[0], output.DiskFile))
				}
			}
			// The image argument is wrong, not the device: a usage error (2), not 10.
			if st, err := os.Stat(img); err == nil && !st.Mode().IsRegular() {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: not a disk image: not a regular file", img))
			} else if err == nil && st.Size() == 0 {
				return exitcode.Tag(exitcode.Usage, fmt.Errorf("%s: not a disk image: an empty file", img))
			}
			out := cmd.ErrOrStderr()
			opt.Log = out
			in := bufio.NewReader(cmd.InOrStdin())
			opt.Confirm = func(d *flash.Device) (bool, error) {
				fmt.Fprintf(out, "Everything on %s will be overwritten. Type yes to continue: ", d.Path)
				line, err := in.ReadString('\n')
				if err != nil && line == "" {
					return false, fmt.Errorf("reading the answer: %w", err)
				}
				return strings.TrimSpace(line) == "yes", nil
			}
			res, err := flash.Flash(cmd.Context(), img, args[1], opt)
			var refused *flash.Refused
			var mismatch *flash.MismatchError
			switch {
			case errors.As(err, &mismatch):
				return exitcode.Tag(exitcode.Integrity, err)
			case errors.As(err, &refused):
				return exitcode.Tag(exitcode.Device, err)
			case err != nil && cmd.Context().Err() != nil:
				return err
			case err != nil:
				return exitcode.Tag(exitcode.Device, err)
			}
			mode := "O_DIRECT"
			if !res.Direct {
				mode = "buffered, the device refused O_DIRECT"
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, flashJSON{Image: img, Device: res.Device.Path, Bytes: res.Bytes, SHA256: res.SHA256, Direct: res.Direct,
					WriteSeconds: res.Write.Seconds(), VerifySeconds: res.Verify.Seconds()})
			}
			fmt.Fprintf(w, "%s: wrote %s in %.2fs (%s/s, %s), verified in %.2fs (%s/s)\n", res.Device.Path,
				progress.Bytes(res.Bytes), res.Write.Seconds(), progress.Bytes(int64(res.WriteRate())), mode,
				res.Verify.Seconds(), progress.Bytes(int64(res.VerifyRate())))
			fmt.Fprintf(w, "sha256 %s  %s\n", res.SHA256, img)
			return nil
		},
	}
	cmd.Flags().BoolVarP(&opt.Yes, "yes", "y", false, "do not ask for confirmation")
	addJSONFlag(cmd, &asJSON)
	cmd.Flags().BoolVar(&opt.Force, "force", false, "write to a disk sysfs does not call removable (or with a non-512-byte block size)")
	cmd.Flags().BoolVar(&opt.GrowReports, "grow-reports", false, "grow the PEERBOOT report partition to fill the device")
	cmd.Flags().IntVar(&opt.BlockSize, "block-size", flash.DefaultBlockSize, "bytes per write, a multiple of 4096")
	return cmd
}

// flashJSON is `peerboot flash --json`: what was written and verified.
type flashJSON struct {
	Image         string  `json:"image"`
	Device        string  `json:"device"`
	Bytes         int64   `json:"bytes"`
	SHA256        string  `json:"sha256"` // of the image, and of what was read back
	Direct        bool    `json:"direct"` // O_DIRECT (false: the device refused it)
	WriteSeconds  float64 `json:"write_seconds"`
	VerifySeconds float64 `json:"verify_seconds"`
}
