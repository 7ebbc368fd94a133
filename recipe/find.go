package recipe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/peerboot/peerboot/internal/didyoumean"
)

// ErrNotFound is a recipe that Find could not find, by name or path.
var ErrNotFound = errors.New("no such recipe")

// IsName says whether arg names a recipe rather than a file: no directory part
// and no .toml suffix ("xeon-8gpu", not "recipes/xeon-8gpu.toml").
func IsName(arg string) bool {
	return arg != "" && !strings.ContainsRune(arg, filepath.Separator) && !strings.HasSuffix(arg, ".toml")
}

// Find resolves what a user typed as a recipe. A path (with a directory part or
// a .toml suffix) is taken as it is when the file exists; a name is NAME.toml
// in the first of dirs that holds it. When neither is found the error wraps
// ErrNotFound and names the nearest recipe there is, for a typo.
func Find(arg string, dirs []string) (string, error) {
	if !IsName(arg) {
		if _, err := os.Stat(arg); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return arg, nil // Load reports what else may be wrong with it
		}
		dir := filepath.Dir(arg)
		msg := fmt.Sprintf("%s: no such file", arg)
		names, _ := List(dir)
		if s := didyoumean.Closest(strings.TrimSuffix(filepath.Base(arg), ".toml"), names); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", filepath.Join(dir, s+".toml"))
		}
		return "", &notFound{msg}
	}
	var all, looked []string
	missing := false
	for _, d := range dirs {
		p := filepath.Join(d, arg+".toml")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			missing = true
			looked = append(looked, d+" (no such directory here)")
			continue
		}
		looked = append(looked, d)
		names, _ := List(d)
		all = append(all, names...)
	}
	msg := fmt.Sprintf("%s: %v", arg, ErrNotFound)
	if len(looked) > 0 {
		msg += " in " + strings.Join(looked, ", ")
	}
	if s := didyoumean.Closest(arg, all); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	} else if len(all) > 0 {
		msg += fmt.Sprintf("; there are %s", strings.Join(all, ", "))
	}
	if missing || len(dirs) == 0 {
		msg += ": run from the repository root, give the recipe's path, or set PEERBOOT_RECIPES to its directory"
	}
	return "", &notFound{msg}
}

// notFound is Find's error: its own words, and errors.Is(err, ErrNotFound).
type notFound struct{ msg string }

func (e *notFound) Error() string        { return e.msg }
func (e *notFound) Is(target error) bool { return target == ErrNotFound }

// List names the recipes in dir: its *.toml files without the suffix, sorted.
// Included files (drivers/, shared/) live in subdirectories and are not listed.
func List(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".toml"))
	}
	sort.Strings(names)
	return names, nil
}
