// Package reportpart finds the FAT volume that receives the node's reports (the image
// stage's PEERBOOT partition, or a stick formatted FAT without a partition table) and
// writes a report onto it. The volume is recognised by image/fatread, the one FAT
// reader of the project (flash and the tests read it too).
package reportpart

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/selftest"
)

// BlockDevices lists dev/<name> for every line of proc/partitions, whole disks
// included: a USB stick may be formatted FAT without a partition table.
func BlockDevices(proc, dev string) ([]string, error) {
	f, err := os.Open(filepath.Join(proc, "partitions"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		// "major minor #blocks name"; the header and blank line have other shapes.
		if len(fl) != 4 || fl[0] == "major" {
			continue
		}
		if strings.HasPrefix(fl[3], "ram") || strings.HasPrefix(fl[3], "loop") {
			continue
		}
		out = append(out, filepath.Join(dev, fl[3]))
	}
	return out, sc.Err()
}

// Label is the FAT volume label of the device or image at path, or an error when it
// holds no FAT16 or FAT32 volume (an MBR, a GPT disk, an ext4 partition).
func Label(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return "", err
	}
	fsys, err := fatread.Open(f, size)
	if err != nil {
		return "", err
	}
	return fsys.Label(), nil
}

// Find returns the first device whose FAT label is label (in any case).
func Find(devices []string, label string) (string, error) {
	for _, d := range devices {
		if l, err := Label(d); err == nil && strings.EqualFold(l, label) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no FAT volume labelled %s among %d block device(s)", label, len(devices))
}

// Wait retries Find for a while: USB and NVMe disks may still be probing when PID 1
// starts, and a missed report partition loses the boot's evidence.
func Wait(list func() ([]string, error), label string, wait time.Duration, sleep func(time.Duration)) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		devs, err := list()
		if err == nil {
			var d string
			if d, err = Find(devs, label); err == nil {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			return "", err
		}
		sleep(250 * time.Millisecond)
	}
}

// FileName is report-<started_at without separators>.json, e.g.
// report-20250601T120000Z.json: sortable and FAT-safe (no colons).
func FileName(startedAt string) string {
	compact := strings.NewReplacer("-", "", ":", "").Replace(startedAt)
	if compact == "" {
		compact = "unknown"
	}
	return "report-" + compact + ".json"
}

// Write writes the report into dir without overwriting an earlier one (two boots in
// the same second, or a clock stuck at the epoch) and syncs it to the medium.
func Write(dir string, r *selftest.Report) (string, error) {
	js, err := selftest.Encode(r)
	if err != nil {
		return "", err
	}
	base := strings.TrimSuffix(FileName(r.StartedAt), ".json")
	for i := 0; i < 1000; i++ {
		name := base + ".json"
		if i > 0 {
			name = fmt.Sprintf("%s-%d.json", base, i)
		}
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("writing report: %w", err)
		}
		if _, err := f.Write(js); err != nil {
			f.Close()
			return "", fmt.Errorf("writing report: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return "", fmt.Errorf("syncing report: %w", err)
		}
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("writing report: %w", err)
		}
		return p, nil
	}
	return "", fmt.Errorf("writing report: 1000 reports named %s* already", base)
}
