package recipe

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ReadData reads a data file a recipe names (a kernel fragment, a patch): a bare name
// comes from the stage's built-in files (builtin, under dir), a "./" or "../" path is
// relative to the recipe file. It returns the bytes and where they came from.
func (r *Resolved) ReadData(name string, builtin fs.FS, dir string) ([]byte, string, error) {
	if strings.HasPrefix(name, "./") || strings.HasPrefix(name, "../") {
		p := filepath.Join(filepath.Dir(r.Path), name)
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, p, fmt.Errorf("%s: %w", r.Path, err)
		}
		return data, p, nil
	}
	p := path.Join(dir, name)
	data, err := fs.ReadFile(builtin, p)
	if err != nil {
		var have []string
		entries, _ := fs.ReadDir(builtin, dir)
		for _, e := range entries {
			have = append(have, e.Name())
		}
		if len(have) == 0 {
			return nil, p, fmt.Errorf("%s: no built-in file %s: peerboot ships none there; name it as a ./path relative to the recipe", r.Path, p)
		}
		return nil, p, fmt.Errorf("%s: no built-in file %s (have: %s)", r.Path, p, strings.Join(have, ", "))
	}
	return data, p, nil
}
