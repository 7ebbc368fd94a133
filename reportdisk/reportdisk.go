// Package reportdisk reads, on the host, the self-test reports a booted stick or
// disk collected: it finds the PEERBOOT partition (by GPT, or a stick formatted
// FAT without a partition table), reads it with image/fatread and decodes each
// report. What `peerboot reports` lists and shows; node/reportpart is the node's
// side, which writes them.
package reportdisk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/selftest"
)

// Found is one report file on a PEERBOOT partition.
type Found struct {
	Path     string // on the partition, e.g. report-20250601T120000Z.json
	Size     int64
	Modified time.Time
	Raw      []byte
	Report   *selftest.Report // nil when Err is set
	Err      error            // the file is not a report this peerboot can read
}

// Read finds the PEERBOOT partition on a disk or disk image (GPT, or a
// stick formatted FAT without a partition table) and returns the self-test
// reports on it: *.json in its root and in reports/, oldest name first (the
// names carry the boot's start time). Only reads.
func Read(p string) ([]Found, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	// Two sectors: the least a GPT (protective MBR and header) or a FAT boot
	// sector fits in; a shorter file would only say "EOF".
	if size < 1024 {
		return nil, fmt.Errorf("%s: not a disk image: %d bytes, too small for a partition table or a FAT volume", p, size)
	}
	var fsys *fatread.FS
	g, err := image.ReadGPT(f)
	switch {
	case err == nil:
		part, ok := g.Find(bootproto.ReportsLabel)
		if !ok {
			return nil, fmt.Errorf("%s: no partition named %s in its GPT (%d partitions): not a peerboot disk", p, bootproto.ReportsLabel, len(g.Partitions))
		}
		if part.Offset()+part.Size() > size {
			return nil, fmt.Errorf("%s: the %s partition ends past the end of the disk (%d bytes)", p, bootproto.ReportsLabel, size)
		}
		if fsys, err = fatread.Open(io.NewSectionReader(f, part.Offset(), part.Size()), part.Size()); err != nil {
			return nil, fmt.Errorf("%s: %s partition: %w", p, bootproto.ReportsLabel, err)
		}
	case errors.Is(err, image.ErrNoGPT):
		if fsys, err = fatread.Open(f, size); err != nil {
			return nil, fmt.Errorf("%s: neither a GPT disk nor a FAT volume: %w", p, err)
		}
		if !strings.EqualFold(fsys.Label(), bootproto.ReportsLabel) {
			return nil, fmt.Errorf("%s: FAT volume labelled %q, not %s", p, fsys.Label(), bootproto.ReportsLabel)
		}
	default:
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	var out []Found
	for _, dir := range []string{"", bootproto.ReportsDir} {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			if dir != "" && fatread.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, e := range ents {
			if e.Dir || !strings.HasSuffix(strings.ToLower(e.Name), ".json") {
				continue
			}
			fp := path.Join(dir, e.Name)
			fd := Found{Path: fp, Size: e.Size, Modified: e.Modified}
			if fd.Raw, fd.Err = fsys.ReadFile(fp); fd.Err == nil {
				fd.Report, fd.Err = selftest.Decode(fd.Raw)
			}
			out = append(out, fd)
		}
	}
	sort.Slice(out, func(i, j int) bool { return path.Base(out[i].Path) < path.Base(out[j].Path) })
	return out, nil
}
