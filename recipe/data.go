package recipe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// ReadData reads a data file a recipe names (a kernel fragment, a patch): a bare name
// comes from the stage's built-in files (builtin, under dir), a "./" or "../" path is
// relative to the recipe file. It returns the bytes and where they came from. Its
// errors name the file, not the recipe: callers locate them with ErrorAt.
func (r *Resolved) ReadData(name string, builtin fs.FS, dir string) ([]byte, string, error) {
	if strings.HasPrefix(name, "./") || strings.HasPrefix(name, "../") {
		p := filepath.Join(filepath.Dir(r.Path), name)
		data, err := os.ReadFile(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, p, fmt.Errorf("no file %s", p)
			}
			return nil, p, err
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
			return nil, p, fmt.Errorf("no built-in file %s: peerboot ships none there; name it as a ./path relative to the recipe", p)
		}
		return nil, p, fmt.Errorf("no built-in file %s (have: %s)", p, strings.Join(have, ", "))
	}
	return data, p, nil
}
