package image

import (
	"errors"
	"fmt"
	"io"

	"github.com/peerboot/peerboot/image/fat"
	"github.com/peerboot/peerboot/image/fatread"
	"github.com/peerboot/peerboot/image/iso9660"
)

// The ISO for BMC virtual media: an El Torito UEFI entry whose image is a FAT
// ESP holding the UKI at UKIPath, the image stage's other layout.
const (
	// ISOVolumeID is the ISO's volume identifier, fixed so that two builds
	// of one recipe give the same bytes.
	ISOVolumeID = "PEERBOOT"
	// ISOImageName is the ESP image's file name in the ISO's root.
	ISOImageName = "EFIBOOT.IMG"
	// isoSlack is what the ESP keeps free beyond the UKI and the FAT tables
	// (the reserved sectors and the directories fit in it many times over).
	isoSlack = 1 << 20
)

// ISO describes the CD image WriteISO produces.
type ISO struct {
	ESP   Partition // FAT; Size a multiple of 2048
	Epoch int64     // Unix seconds: ISO dates and FAT directory entries
}

// StandardISO is the ISO around uki: the smallest whole-MiB ESP holding it
// (at least the 64 MiB FAT32 needs with room to spare), its volume id
// derived from seed (the recipe digest), every date epoch. FAT32 below 260
// MiB has 512-byte clusters, so its two tables take 8 bytes per 512 of the
// UKI (len/64): 1.3 MiB for an 85 MiB UKI, more than isoSlack alone.
func StandardISO(seed string, epoch int64, uki []byte) ISO {
	size := max(int64(len(uki))+int64(len(uki))/64+isoSlack, 64<<20)
	size = (size + (1 << 20) - 1) &^ ((1 << 20) - 1)
	files := map[string][]byte{UKIPath: uki}
	// FAT32 with one-sector clusters (up to 260 MiB) spends 1/64 of the
	// volume on its two FATs, more than isoSlack past ~64 MiB: grow by whole
	// MiB until the UKI fits. Sizes that fitted before are kept as they were.
	for {
		_, err := fat.Write(discardAt{}, fat.Params{Size: size, Type: fat.Auto, Label: ESPLabel, Files: files})
		if !errors.Is(err, fat.ErrNoSpace) {
			break // fits, or fails for a reason WriteISO will report
		}
		size += 1 << 20
	}
	return ISO{Epoch: epoch, ESP: Partition{Size: size, Label: ESPLabel,
		VolumeID: DeriveVolumeID(seed, "iso-esp"), Files: files}}
}

// discardAt is an io.WriterAt that keeps nothing, for sizing a FAT.
type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// WriteISO writes the ISO to f, truncating it first; the result depends on
// iso alone and holes stay sparse.
func WriteISO(f Target, iso ISO) error {
	if iso.ESP.Size <= 0 || iso.ESP.Size%iso9660.SectorSize != 0 {
		return fmt.Errorf("iso: ESP size %d is not a positive multiple of %d", iso.ESP.Size, iso9660.SectorSize)
	}
	p := iso9660.Params{
		VolumeID: ISOVolumeID, Epoch: iso.Epoch, ImageName: ISOImageName, ImageSize: iso.ESP.Size,
		WriteImage: func(w io.WriterAt) error {
			_, err := fat.Write(w, fat.Params{
				Size: iso.ESP.Size, Type: fat.Auto, Label: iso.ESP.Label, VolumeID: iso.ESP.VolumeID,
				Epoch: iso.Epoch, HiddenSectors: iso9660.ImageOffset / lbaSize, Files: iso.ESP.Files,
			})
			return err
		},
	}
	for _, n := range []int64{0, iso9660.Size(p)} {
		if err := f.Truncate(n); err != nil {
			return fmt.Errorf("iso: %w", err)
		}
	}
	return iso9660.Write(f, p)
}

// ISOUKI reads the UKI back out of an ISO WriteISO wrote: the UEFI boot
// entry's FAT image, its UKIPath. `verify` compares it with peerboot.efi.
func ISOUKI(r io.ReaderAt, size int64) ([]byte, error) {
	v, err := iso9660.Open(r, size)
	if err != nil {
		return nil, err
	}
	off, n, err := v.EFIImage()
	if err != nil {
		return nil, err
	}
	fs, err := fatread.Open(io.NewSectionReader(r, off, n), n)
	if err != nil {
		return nil, fmt.Errorf("the UEFI boot image: %w", err)
	}
	b, err := fs.ReadFile(UKIPath)
	if fatread.IsNotExist(err) {
		return nil, errors.New("the UEFI boot image has no " + UKIPath)
	}
	return b, err
}
