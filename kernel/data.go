// Package kernel is the kernel stage: it unpacks the pinned source, merges the config
// fragments in configs/, and compiles bzImage and modules reproducibly.
package kernel

import "embed"

// Configs holds the config fragments recipes name in kernel.fragments.
//
//go:embed configs/*.config
var Configs embed.FS

// ConfigsDir is the directory inside Configs.
const ConfigsDir = "configs"
