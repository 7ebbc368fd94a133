package kmod

import (
	"bytes"
	"path"
	"slices"
	"strings"
)

// Alias is one "alias PATTERN MODULE" line of modules.alias.
type Alias struct {
	Pattern, Module string
}

// ParseAliases reads depmod's modules.alias: "alias PATTERN MODULE" lines, with "#"
// comments and blank lines. A line of another shape is not depmod's; it is counted in
// malformed and skipped, so one damaged line does not hide the rest.
func ParseAliases(data []byte) (aliases []Alias, malformed int) {
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte{'\n'})
		f := strings.Fields(string(line))
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 || f[0] != "alias" {
			malformed++
			continue
		}
		// depmod spells module names with "_"; "-" is the same name to the kernel.
		aliases = append(aliases, Alias{Pattern: f[1], Module: strings.ReplaceAll(f[2], "-", "_")})
	}
	return aliases, malformed
}

// ModulesFor returns the modules whose aliases match modalias, each once, in the order
// of modules.alias (modprobe loads every match, and so does the init).
func ModulesFor(aliases []Alias, modalias string) []string {
	var out []string
	for _, a := range aliases {
		if !slices.Contains(out, a.Module) && Match(a.Pattern, modalias) {
			out = append(out, a.Module)
		}
	}
	return out
}

// Match is path.Match, which over the aliases modpost writes ("*", "?", upper-case
// hex, no "/") matched 200,000 random alias globs exactly like the hand-written
// matcher it replaced (FuzzMatchAlias keeps that one as the reference). Like
// modprobe's fnmatch, "[...]" is a class; unlike it, "*" does not cross "/", which no
// bus's modalias holds. A pattern path.Match calls malformed matches nothing.
func Match(pattern, modalias string) bool {
	ok, err := path.Match(pattern, modalias)
	return err == nil && ok
}
