package kernel

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
)

// CopyHeaders copies from a built kernel tree what out-of-tree modules need
// (the content of a linux-headers package): the top Makefile, .config,
// Module.symvers, System.map, include/, scripts/ (with its host tools), the x86
// arch Makefiles and headers, objtool, and every Kconfig/Makefile/Kbuild file.
func CopyHeaders(src, dst string) error {
	whole := []string{"include", "scripts", "arch/x86/include", "tools/objtool/objtool",
		"arch/x86/kernel/asm-offsets.s", "arch/x86/Makefile", "arch/x86/Makefile_32.cpu",
		"Makefile", ".config", "Module.symvers", "System.map"}
	for _, w := range whole {
		p := filepath.Join(src, w)
		if _, err := os.Lstat(p); err != nil {
			continue // optional parts (objtool, Makefile_32.cpu) may be absent
		}
		if err := fsutil.CopyTree(p, filepath.Join(dst, w), scratchRecord); err != nil {
			return err
		}
	}
	// objtool is built by tools/'s own makefiles, which leave the build directory in
	// its debug info (and so in its build id): drop both; nothing reads them.
	if objtool := filepath.Join(dst, "tools/objtool/objtool"); exists(objtool) {
		if out, err := exec.Command("objcopy", "--strip-debug", "--remove-section=.note.gnu.build-id", objtool).CombinedOutput(); err != nil {
			return fmt.Errorf("objcopy %s: %w: %s", objtool, err, out)
		}
	}
	// Build-system files everywhere, so `make M=...` finds every Kconfig it sources.
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if rel == ".git" || rel == ".peerboot" || rel == "Documentation" {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, "Kconfig") || strings.HasPrefix(name, "Makefile") || name == "Kbuild" {
			if _, err := os.Lstat(filepath.Join(dst, rel)); err == nil {
				return nil
			}
			return fsutil.CopyFile(path, filepath.Join(dst, rel), 0)
		}
		return nil
	})
}

// scratchRecord matches kbuild's .*.cmd files: they record the scratch path of
// each build step and nothing needs them to build modules.
func scratchRecord(rel string) bool {
	return strings.HasSuffix(rel, ".cmd") && strings.HasPrefix(filepath.Base(rel), ".")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
