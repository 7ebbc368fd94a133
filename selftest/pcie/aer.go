package pcie

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/selftest"
)

// The kernel's AER statistics per device (drivers/pci/pcie/aer.c, Linux 5.2+): one
// file per severity, each a line "NAME COUNT" per error the kernel knows and a
// TOTAL_ERR_* line, counted since boot.
var aerFiles = []struct {
	file, kind, total string
}{
	{"aer_dev_correctable", "correctable", "TOTAL_ERR_COR"},
	{"aer_dev_nonfatal", "nonfatal", "TOTAL_ERR_NONFATAL"},
	{"aer_dev_fatal", "fatal", "TOTAL_ERR_FATAL"},
}

// ErrNoAER says a device has no AER statistics in sysfs: a kernel without
// CONFIG_PCIEAER, AER off (pci=noaer, or the firmware kept it), or a device or port
// without the AER capability.
var ErrNoAER = errors.New("no AER statistics in sysfs")

// maxAERFile bounds what is read of one statistics file: the kernel writes about
// 20 short lines.
const maxAERFile = 16 << 10

// ReadAER reads the AER counters of the PCI device bdf under root (normally "/").
func ReadAER(root, bdf string) (selftest.AERCounts, error) {
	dir := filepath.Join(root, "sys", "bus", "pci", "devices", bdf)
	c := selftest.AERCounts{}
	found := 0
	for _, f := range aerFiles {
		b, err := readBounded(filepath.Join(dir, f.file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return selftest.AERCounts{}, fmt.Errorf("reading %s's %s: %w", bdf, f.file, err)
		}
		counts, total, err := ParseAERStats(b, f.total)
		if err != nil {
			return selftest.AERCounts{}, fmt.Errorf("%s's %s: %w", bdf, f.file, err)
		}
		found++
		switch f.kind {
		case "correctable":
			c.Correctable = total
		case "nonfatal":
			c.NonFatal = total
		case "fatal":
			c.Fatal = total
		}
		for name, n := range counts {
			if n == 0 {
				continue
			}
			if c.Detail == nil {
				c.Detail = map[string]int64{}
			}
			c.Detail[f.kind+" "+name] = n
		}
	}
	if found == 0 {
		return selftest.AERCounts{}, fmt.Errorf("%s: %w", bdf, ErrNoAER)
	}
	return c, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAERFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAERFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxAERFile)
	}
	return b, nil
}

// ParseAERStats parses one aer_dev_* file: the per-error counts by name and the
// value of its total line. A total the file lacks is the sum of its counts (kernels
// before 5.4 had no TOTAL_ERR_* line); a line that is not "NAME COUNT" is an error.
func ParseAERStats(b []byte, totalName string) (map[string]int64, int64, error) {
	counts := map[string]int64{}
	total, haveTotal := int64(0), false
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return nil, 0, fmt.Errorf("line %d: want NAME COUNT, got %q", line, text)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || n < 0 {
			return nil, 0, fmt.Errorf("line %d: want a count, got %q", line, f[1])
		}
		if f[0] == totalName {
			total, haveTotal = n, true
			continue
		}
		counts[f[0]] = n
	}
	if err := sc.Err(); err != nil {
		return nil, 0, err
	}
	if !haveTotal {
		for _, n := range counts {
			total += min(n, math.MaxInt64-total) // saturate: a garbled file must not wrap negative
		}
	}
	return counts, total, nil
}

// AERDevices are the devices whose AER counters speak for a GPU's path: each GPU and
// every port above it, root port first, each once (a switch's port above two GPUs
// is listed for the first). Of names each: "GPU1", "port above GPU1".
func AERDevices(gpus []selftest.GPU) (bdfs, of []string) {
	seen := map[string]bool{}
	for i, g := range gpus {
		for _, br := range g.Upstream {
			if br.BDF != "" && !seen[br.BDF] {
				seen[br.BDF] = true
				bdfs, of = append(bdfs, br.BDF), append(of, fmt.Sprintf("port above GPU%d", i))
			}
		}
		if !seen[g.BDF] {
			seen[g.BDF] = true
			bdfs, of = append(bdfs, g.BDF), append(of, fmt.Sprintf("GPU%d", i))
		}
	}
	return bdfs, of
}
