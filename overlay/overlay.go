// Package overlay holds the static files laid into every image (after the
// packages, before the files generated from the recipe).
package overlay

import (
	"embed"
	"io/fs"
)

//go:embed all:etc
var files embed.FS

// FS is the overlay tree, rooted at the image root.
func FS() fs.FS { return files }
