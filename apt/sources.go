package apt

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SourceEntry is one (URI, suite) pair that an apt sources file enables for
// binary packages.
type SourceEntry struct {
	URI        string
	Suite      string
	Components []string
}

// ParseSourcesList parses the one-line format of sources.list files.
// Only "deb" lines count: deb-src serves no binaries.
func ParseSourcesList(data []byte) []SourceEntry {
	var out []SourceEntry
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		words := strings.Fields(line)
		if len(words) == 0 || words[0] != "deb" {
			continue
		}
		words = words[1:]
		// Options may be written "[ a=b c=d ]" with blanks inside the brackets.
		if len(words) > 0 && strings.HasPrefix(words[0], "[") {
			end := -1
			for i, w := range words {
				if strings.HasSuffix(w, "]") {
					end = i
					break
				}
			}
			if end < 0 {
				continue
			}
			words = words[end+1:]
		}
		if len(words) < 2 {
			continue
		}
		out = append(out, SourceEntry{URI: words[0], Suite: words[1], Components: words[2:]})
	}
	return out
}

// ParseDeb822Sources parses the deb822 format of *.sources files. A stanza
// with "Enabled: no" or without the "deb" type is skipped. A malformed file
// yields an error so that SystemMirror can name it.
func ParseDeb822Sources(data []byte) ([]SourceEntry, error) {
	var out []SourceEntry
	err := readParagraphs(bytes.NewReader(data), nil, true, func(p *paragraph) error {
		if v, ok := p.Get("Enabled"); ok && strings.EqualFold(strings.TrimSpace(v), "no") {
			return nil
		}
		types, _ := p.Get("Types")
		if !contains(strings.Fields(types), "deb") {
			return nil
		}
		uris, _ := p.Get("URIs")
		suites, _ := p.Get("Suites")
		comps, _ := p.Get("Components")
		for _, u := range strings.Fields(uris) {
			for _, s := range strings.Fields(suites) {
				out = append(out, SourceEntry{URI: u, Suite: s, Components: strings.Fields(comps)})
			}
		}
		return nil
	})
	return out, err
}

// debianCodenames are the suite names (before any "-updates" style suffix)
// that identify the Debian archive itself, so that a third-party repository
// on the same machine is never mistaken for a Debian mirror.
func isDebianSuite(suite string) bool {
	base, _, _ := strings.Cut(suite, "-")
	switch base {
	case "stable", "oldstable", "oldoldstable", "testing", "unstable", "experimental", "sid",
		"buzz", "rex", "bo", "hamm", "slink", "potato", "woody", "sarge", "etch", "lenny",
		"squeeze", "wheezy", "jessie", "stretch", "buster", "bullseye", "bookworm",
		"trixie", "forky", "duke":
		return true
	}
	return false
}

// SystemMirror returns the archive root URL serving suite, read from the
// machine's apt sources under aptDir (normally "/etc/apt"). An entry listing
// exactly suite wins; otherwise a "-security" suite borrows the URI of an
// entry serving another "*-security" suite and any other suite borrows the
// URI of an entry serving a Debian suite. The first match in apt's own file
// order (sources.list, then sources.list.d sorted by name) is returned.
func SystemMirror(aptDir, suite string) (string, error) {
	files := []string{filepath.Join(aptDir, "sources.list")}
	dir := filepath.Join(aptDir, "sources.list.d")
	names, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("reading apt sources directory: %w", err)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].Name() < names[j].Name() })
	for _, n := range names {
		// apt itself ignores other suffixes; farms disable files by renaming them.
		if !n.IsDir() && (strings.HasSuffix(n.Name(), ".list") || strings.HasSuffix(n.Name(), ".sources")) {
			files = append(files, filepath.Join(dir, n.Name()))
		}
	}
	var (
		entries []SourceEntry
		read    []string
	)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading apt sources: %w", err)
		}
		read = append(read, f)
		if strings.HasSuffix(f, ".sources") {
			es, err := ParseDeb822Sources(data)
			if err != nil {
				return "", fmt.Errorf("parsing apt sources file %s: %w", f, err)
			}
			entries = append(entries, es...)
		} else {
			entries = append(entries, ParseSourcesList(data)...)
		}
	}
	if u, ok := PickMirror(entries, suite); ok {
		return u, nil
	}
	if len(read) == 0 {
		return "", fmt.Errorf("no mirror for suite %q: no apt sources files found under %s", suite, aptDir)
	}
	return "", fmt.Errorf("no mirror for suite %q: none of %s lists it or a Debian suite it could be derived from",
		suite, strings.Join(read, ", "))
}

// PickMirror applies SystemMirror's preference rules to parsed entries.
// Only http and https URIs qualify, since those are what Client can fetch.
func PickMirror(entries []SourceEntry, suite string) (string, bool) {
	security := strings.HasSuffix(suite, "-security")
	pick := func(match func(SourceEntry) bool) (string, bool) {
		for _, e := range entries {
			if (strings.HasPrefix(e.URI, "http://") || strings.HasPrefix(e.URI, "https://")) && match(e) {
				return strings.TrimRight(e.URI, "/"), true
			}
		}
		return "", false
	}
	if u, ok := pick(func(e SourceEntry) bool { return e.Suite == suite }); ok {
		return u, true
	}
	if security {
		return pick(func(e SourceEntry) bool {
			return strings.HasSuffix(e.Suite, "-security") && isDebianSuite(e.Suite)
		})
	}
	return pick(func(e SourceEntry) bool {
		return !strings.HasSuffix(e.Suite, "-security") && isDebianSuite(e.Suite)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
