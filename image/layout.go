package image

import (
	"fmt"

	"github.com/peerboot/peerboot/bootproto"
)

// The one disk layout peerboot writes (the report partition's label and
// directory are the node's contract, bootproto's): the image stage, `sign` (which rebuilds
// the disk around the signed UKI), `run --efi`, `flash --grow-reports` and the
// init all take it from here.
const (
	// ESPLabel names the EFI System Partition.
	ESPLabel = "ESP"
	// ReportsSize is the report partition's size.
	ReportsSize = 32 << 20
	// DiskOverhead is the GPT, the alignment and the backup table.
	DiskOverhead = 2 << 20
	// UKIPath is where the firmware's removable-media path finds the UKI.
	UKIPath = "EFI/BOOT/BOOTX64.EFI"
	// espSlack is what the ESP keeps free beyond the UKI.
	espSlack = 8 << 20
)

// StandardDisk is the disk around uki: the ESP fills size but for the report
// partition and the GPT overhead; GUIDs and volume ids derive from seed (the
// recipe digest), timestamps are epoch.
func StandardDisk(seed string, size, epoch int64, uki []byte) (Disk, error) {
	espSize := size - ReportsSize - DiskOverhead
	if int64(len(uki)) > espSize-espSlack {
		return Disk{}, fmt.Errorf("a %d MiB disk is too small for a %.0f MiB UKI plus the %d MiB report partition", size>>20, float64(len(uki))/(1<<20), ReportsSize>>20)
	}
	return Disk{
		Size: size, DiskGUID: DeriveGUID(seed, "disk"), Epoch: epoch,
		ESP: Partition{Size: espSize, GUID: DeriveGUID(seed, "esp"), Label: ESPLabel,
			VolumeID: DeriveVolumeID(seed, "esp"), Files: map[string][]byte{UKIPath: uki}},
		Reports: Partition{Size: ReportsSize, GUID: DeriveGUID(seed, "reports"), Label: bootproto.ReportsLabel,
			VolumeID: DeriveVolumeID(seed, "reports"), Files: map[string][]byte{bootproto.ReportsDir + "/": nil}},
	}, nil
}

// MinDiskSize is a disk StandardDisk accepts for a UKI of ukiSize bytes: its
// ESP is at least 64 MiB (FAT32 needs ~33 MiB), rounded up to whole MiB.
func MinDiskSize(ukiSize int64) int64 {
	n := max(ukiSize+espSlack, 64<<20) + ReportsSize + DiskOverhead
	return (n + (1 << 20) - 1) &^ ((1 << 20) - 1)
}
