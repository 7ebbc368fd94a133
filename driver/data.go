// Package driver is the nvidia-open stage: it unpacks the pinned driver source, applies
// the patch series in patches/<driver version>/, and builds the kernel modules against
// the kernel stage's output.
package driver

import "embed"

// Patches holds peerboot's patch series, one directory per NVIDIA driver version.
//
//go:embed patches
var Patches embed.FS

// PatchDir is the directory of a driver version's patches inside Patches.
func PatchDir(version string) string { return "patches/" + version }
