package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/selftest"
)

// reportLabel is the FAT volume label of the partition that receives reports
// (the image stage's layout).
const reportLabel = image.ReportsLabel

// fatLabel returns the volume label in a FAT boot sector (FAT12/16 or FAT32), or false
// if the sector is not one. It checks the signature, a sane sector size and the extended
// boot signature, so an MBR or a GPT protective MBR (which also end in 55 AA) is refused.
func fatLabel(sector []byte) (string, bool) {
	if len(sector) < 512 || sector[510] != 0x55 || sector[511] != 0xAA {
		return "", false
	}
	switch binary.LittleEndian.Uint16(sector[11:13]) {
	case 512, 1024, 2048, 4096:
	default:
		return "", false
	}
	if sector[13] == 0 { // sectors per cluster
		return "", false
	}
	sigOff, labelOff := 0x26, 0x2B // FAT12/16 extended BPB
	if binary.LittleEndian.Uint16(sector[0x16:0x18]) == 0 {
		sigOff, labelOff = 0x42, 0x47 // FAT32: sectors per FAT moved to the FAT32 BPB
	}
	if sector[sigOff] != 0x29 {
		return "", false
	}
	return strings.TrimRight(string(sector[labelOff:labelOff+11]), " \x00"), true
}

// blockDevices lists /dev/<name> for every line of /proc/partitions, whole disks
// included: a USB stick may be formatted FAT without a partition table.
func blockDevices(proc, dev string) ([]string, error) {
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

// findLabeled returns the first device whose FAT label is label.
func findLabeled(devices []string, label string) (string, error) {
	for _, d := range devices {
		f, err := os.Open(d)
		if err != nil {
			continue
		}
		sector := make([]byte, 512)
		_, err = io.ReadFull(f, sector)
		f.Close()
		if err != nil {
			continue
		}
		if l, ok := fatLabel(sector); ok && strings.EqualFold(l, label) {
			return d, nil
		}
	}
	return "", fmt.Errorf("no FAT volume labelled %s among %d block device(s)", label, len(devices))
}

// reportFileName is report-<started_at without separators>.json, e.g.
// report-20250601T120000Z.json: sortable and FAT-safe (no colons).
func reportFileName(startedAt string) string {
	compact := strings.NewReplacer("-", "", ":", "").Replace(startedAt)
	if compact == "" {
		compact = "unknown"
	}
	return "report-" + compact + ".json"
}

// writeReport writes the report into dir without overwriting an earlier one (two boots
// in the same second, or a clock stuck at the epoch) and syncs it to the medium.
func writeReport(dir string, r *selftest.Report) (string, error) {
	js, err := selftest.Encode(r)
	if err != nil {
		return "", err
	}
	base := strings.TrimSuffix(reportFileName(r.StartedAt), ".json")
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

// waitForLabeled retries discovery for a short while: USB and NVMe disks may still be
// probing when PID 1 starts, and a missed report partition loses the boot's evidence.
func waitForLabeled(list func() ([]string, error), label string, wait time.Duration, sleep func(time.Duration)) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		devs, err := list()
		if err == nil {
			var d string
			if d, err = findLabeled(devs, label); err == nil {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			return "", err
		}
		sleep(250 * time.Millisecond)
	}
}
