package flash

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/peerboot/peerboot/bootproto"
	"github.com/peerboot/peerboot/image"
	"github.com/peerboot/peerboot/image/fat"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/progress"
)

// maxFATSectors is the most 512-byte sectors a FAT filesystem's boot sector
// can count.
const maxFATSectors = 0xFFFFFFFF

// GrowResult says what GrowReports did.
type GrowResult struct {
	OldSize, NewSize int64
	Type             fat.Type
	Kept             int // files carried over
}

// GrowReports grows the PEERBOOT partition of a flashed disk (device or image
// file) to the end of the disk and re-creates its filesystem at the new size.
//
// A FAT16 filesystem cannot simply be extended: its FAT is sized for the
// clusters it has, FAT16 stops near 4 GiB, and a stick wants FAT32 past
// 33 MiB anyway. So the existing files (reports of earlier boots) are read
// into memory first, then the GPT is rewritten (backup table at the new end
// of the disk, then the primary), then a fresh filesystem with the same label
// and volume id is written with those files in it. The files keep their
// contents and names; their timestamps become the time of the grow.
func GrowReports(path string, log io.Writer) (*GrowResult, error) {
	if log == nil {
		log = io.Discard
	}
	// O_EXCL: on a block device the kernel refuses it while mounted (Linux
	// ignores it for a plain image file).
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0)
	if err != nil {
		return nil, fmt.Errorf("growing the report partition: %w", err)
	}
	defer f.Close()
	res, err := growReports(f, path, log)
	if err != nil {
		return nil, err
	}
	rereadPartitions(f, path)
	return res, nil
}

// growReports is GrowReports on a disk already open read-write (flash's own
// descriptor, so the grow lands on the disk that was checked and written).
func growReports(f *os.File, path string, log io.Writer) (*GrowResult, error) {
	if log == nil {
		log = io.Discard
	}
	// The GPT and FAT code reads and writes unaligned buffers.
	if err := setDirect(f, false); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	g, err := image.ReadGPT(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p, ok := g.Find(bootproto.ReportsLabel)
	if !ok {
		return nil, fmt.Errorf("%s has no %s partition to grow", path, bootproto.ReportsLabel)
	}
	for _, o := range g.Partitions {
		if o.FirstLBA > p.FirstLBA {
			return nil, fmt.Errorf("%s: partition %d (%s) lies after %s, which therefore cannot grow", path, o.Index+1, o.Name, bootproto.ReportsLabel)
		}
	}
	sizeLBA := uint64(size / 512)
	// End on a 1 MiB boundary, as the image's own partitions do, and no
	// further than a FAT32 can count (32-bit sectors: 2 TiB); the rest of a
	// larger disk stays unpartitioned.
	end := (image.LastUsableLBA(sizeLBA) + 1) / 2048 * 2048
	end = min(end, (p.FirstLBA+maxFATSectors)/2048*2048)
	newLast := end - 1
	res := &GrowResult{OldSize: p.Size()}
	if newLast <= p.LastLBA {
		res.NewSize = p.Size()
		fmt.Fprintf(log, "%s: the %s partition already fills the disk (%s)\n", path, bootproto.ReportsLabel, progress.Bytes(p.Size()))
		return res, nil
	}

	// 1. Everything on the old filesystem, into memory (it is small).
	old, err := fatread.Open(io.NewSectionReader(f, p.Offset(), p.Size()), p.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %s partition: %w", path, bootproto.ReportsLabel, err)
	}
	files, err := old.Files()
	if err != nil {
		return nil, fmt.Errorf("%s: reading the files on the %s partition: %w", path, bootproto.ReportsLabel, err)
	}
	label, volID := old.Label(), old.VolumeID()
	if label == "" {
		label = bootproto.ReportsLabel
	}
	for k := range files {
		if k[len(k)-1] != '/' {
			res.Kept++
		}
	}

	// 2. The partition table for the whole disk; the old backup header (now
	// inside the partition) is erased so nothing mistakes it for a table.
	oldBackup := int64(g.SizeLBA-1) * 512
	if err := g.SetLastLBA(p.Index, newLast); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := g.Write(f, sizeLBA); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if oldBackup > p.Offset() && oldBackup < size-512 {
		if _, err := f.WriteAt(make([]byte, 512), oldBackup); err != nil {
			return nil, fmt.Errorf("%s: erasing the old backup GPT: %w", path, err)
		}
	}

	// 3. A fresh filesystem over the grown partition, with the files back in.
	grown, _ := g.Find(bootproto.ReportsLabel)
	typ, err := fat.Write(io.NewOffsetWriter(f, grown.Offset()), fat.Params{
		Size: grown.Size(), Type: fat.Auto, Label: label, VolumeID: volID,
		Epoch: time.Now().Unix(), HiddenSectors: uint32(grown.FirstLBA), Files: files,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: writing the grown %s filesystem (its %d file(s) were read first and are lost if this failed): %w", path, bootproto.ReportsLabel, res.Kept, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("flushing %s: %w", path, err)
	}
	res.NewSize, res.Type = grown.Size(), typ
	fmt.Fprintf(log, "%s: %s partition grown from %s to %s (%v), %d file(s) kept\n", path, bootproto.ReportsLabel, progress.Bytes(res.OldSize), progress.Bytes(res.NewSize), typ, res.Kept)
	return res, nil
}
