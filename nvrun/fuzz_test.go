package nvrun

import (
	"strings"
	"testing"

	"github.com/peerboot/peerboot/nvrun/nvruntest"
)

// Header bytes come from a downloaded file: never a panic, and an accepted header
// says where a payload after its own block starts.
func FuzzParseHeader(f *testing.F) {
	b, _ := nvruntest.Build(nvruntest.Spec{Version: "595.45.04"})
	f.Add(b[:min(len(b), 2048)])
	f.Add([]byte("#! /bin/sh\nskip=3\n\n"))
	f.Add([]byte("#! /bin/sh\nCRCsum=1\nMD5=00000000000000000000000000000000\nskip=99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		if h.Skip <= h.Lines || h.Skip > maxSkip || (h.CheckFrom != 0 && h.CheckFrom > h.Lines+1) {
			t.Fatalf("accepted an impossible header: %+v", h)
		}
	})
}

// The manifest comes from the payload: never a panic, and every accepted entry
// stays inside the payload.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(nvruntest.Manifest("580.142")))
	f.Add([]byte("d\n1.2\n\n\n\n\n\n\nx 0755 FIRMWARE INHERIT_PATH_DEPTH:0\n"))
	f.Add([]byte("d\n1.2\n\n\n\n\n\n\nl 0000 CUDA_SYMLINK NATIVE / t\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			return
		}
		for _, e := range m.Entries {
			if !safePath(e.File) || strings.HasPrefix(e.Target, "/") || strings.Contains(e.Target, "..") || strings.HasPrefix(e.InstallPath(), "/") {
				t.Fatalf("accepted an unsafe entry: %+v", e)
			}
		}
	})
}
