package image

import (
	"errors"
	"testing"

	"github.com/peerboot/peerboot/image/fat"
)

// StandardISO's ESP holds the UKI whatever its size (FAT32's tables outgrew
// the fixed 1 MiB slack past ~64 MiB: a UKI with .pcrsig hit it), and grows
// past its first guess only as far as needed.
func TestStandardISOFits(t *testing.T) {
	const mib = 1 << 20
	for _, n := range []int{1000, 64*mib - 1, 70*mib + 900<<10, 80*mib + 800<<10, 83*mib + 700<<10, 99*mib + 1000<<10} {
		uki := make([]byte, n)
		iso := StandardISO("sha256:seed", 1700000000, uki)
		p := fat.Params{Size: iso.ESP.Size, Type: fat.Auto, Label: iso.ESP.Label, Files: iso.ESP.Files}
		if _, err := fat.Write(discardAt{}, p); err != nil {
			t.Errorf("UKI of %d bytes: ESP of %d MiB: %v", n, iso.ESP.Size/mib, err)
			continue
		}
		first := max(int64(n)+int64(n)/64+isoSlack, 64<<20) // StandardISO's first guess
		first = (first + mib - 1) &^ (mib - 1)
		if iso.ESP.Size > first {
			p.Size = iso.ESP.Size - mib
			if _, err := fat.Write(discardAt{}, p); !errors.Is(err, fat.ErrNoSpace) {
				t.Errorf("UKI of %d bytes: ESP of %d MiB is not the smallest that fits", n, iso.ESP.Size/mib)
			}
		}
	}
}
