package recipe

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/peerboot/peerboot/internal/located"
)

//go:embed defaults.toml
var defaultsTOML []byte

const defaultsFile = "(defaults)"

// maxIncludeDepth stops runaway include chains early with a readable error.
const maxIncludeDepth = 16

// atomicTables are replaced whole by an override instead of merged key by key: a
// source given as a URL must not inherit a "deb" key from the layer below.
var atomicTables = map[string]bool{
	"kernel.source": true, "driver.source": true, "outputs.efi_stub": true, "userspace.installer": true,
}

// Resolved is a loaded recipe with defaults and includes applied, plus where each key came from.
type Resolved struct {
	Recipe
	Path   string   // the recipe file asked for
	Files  []string // every file merged, lowest layer first
	Digest string   // sha256 of Canonical()
	// Warnings name items of a cumulative key (kernel.cmdline,
	// kernel.fragments) that an include set and a higher layer's value
	// dropped: what the replace-whole merge rule would otherwise do silently.
	Warnings Errors

	origin map[string]string    // key path -> file that set it
	lines  map[string]lineIndex // file -> its key lines
}

// Error is one problem in a recipe, located at file:line and a key path: the
// module's one located-error type, which the serve inventory reports too.
type Error = located.Error

// Errors is every problem found, sorted by file and line.
type Errors = located.Errors

type layer struct {
	file  string
	data  map[string]any
	lines lineIndex
}

// Load reads a recipe, merges its includes over the defaults, validates it and
// computes its digest. Problems come back as Errors naming file:line and key.
//
// Override rules. The layers, lowest first, are the built-in defaults, then each
// file in include (in the order listed, each preceded by its own includes, paths
// relative to the including file, or absolute), then the recipe itself; Files lists them in
// that order. A higher layer wins over a lower one, so:
//   - the including file wins over everything it includes;
//   - a later include wins over an earlier one;
//   - tables merge key by key (a layer that sets platform.gpus keeps the lower
//     layers' platform.sockets), maps such as env and driver.params included;
//   - arrays, arrays of tables ([[repo]], userspace.exclude) and scalars are
//     replaced whole: a recipe that lists one [[repo]] has exactly that one;
//     there is no append. When the final kernel.cmdline or kernel.fragments
//     lacks an item a lower layer other than the defaults set, Warnings says
//     so at both places (an include's amd_iommu=on would otherwise vanish);
//   - kernel.source, driver.source and outputs.efi_stub are replaced whole: a url
//     source laid over a deb source does not keep its deb or version keys.
//
// An include cycle, or an include that cannot be read, is an error at the include
// line. A syntax, type or unknown-key error is reported at the file and line it is
// in, included or not; a validation error is reported where the offending key was
// last set, or, for a key no layer sets, in the recipe asked for.
func Load(path string) (*Resolved, error) {
	r, err := LoadAll(path)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// LoadAll is Load that goes on past the first class of problem, so that one run
// names every problem of a file: syntax errors aside (nothing more can be read
// from that file), the wrong types, unknown keys and include errors of every
// layer, and the values that fail validation in what remains once the bad keys
// are left out. With errors it also returns, when one could be made, the recipe
// merged from the valid keys, so that callers can check the files it names
// (patches, fragments) in the same run; that recipe has no digest and must not
// be built.
func LoadAll(path string) (*Resolved, error) {
	layers := []layer{}
	defaults, err := parseLayer(defaultsFile, defaultsTOML)
	if err != nil {
		return nil, fmt.Errorf("built-in defaults: %w", err)
	}
	layers = append(layers, defaults)
	var errs Errors
	if err := collect(path, nil, 0, &layers, &errs); err != nil {
		return nil, err
	}
	if len(layers) == 1 { // the recipe itself could not be parsed
		located.Sort(errs)
		return nil, errs
	}
	r := &Resolved{Path: path, origin: map[string]string{}, lines: map[string]lineIndex{}}
	merged := map[string]any{}
	var replaced []setting
	for _, l := range layers {
		r.Files = append(r.Files, l.file)
		r.lines[l.file] = l.lines
		mergeInto(merged, l.data, "", l.file, r.origin, func(key, lower string, old, _ any) {
			if lower != defaultsFile && cumulative[key] {
				replaced = append(replaced, setting{key, lower, old})
			}
		})
	}
	r.Warnings = r.droppedItems(merged, replaced)
	if w := r.serialNotLast(merged); w != nil {
		r.Warnings = append(r.Warnings, w)
	}
	delete(merged, "include")
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(merged); err != nil {
		return nil, fmt.Errorf("%s: re-encoding merged recipe: %w", path, err)
	}
	if _, err := toml.Decode(buf.String(), &r.Recipe); err != nil {
		return nil, fmt.Errorf("%s: decoding merged recipe: %w", path, err)
	}
	if r.Name == "" {
		r.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	for i := range r.Repos {
		if r.Repos[i].Name == "" {
			r.Repos[i].Name = r.Repos[i].Suite
		}
		if r.Repos[i].Architecture == "" {
			r.Repos[i].Architecture = "amd64"
		}
	}
	if verrs := validate(&r.Recipe); len(verrs) > 0 {
		layerErrs := slices.Clone(errs)
		for _, e := range r.locate(verrs) {
			// A key left out for its type, or missing because its name has a
			// typo, is reported once, as that.
			if !reportedUnder(layerErrs, e.Key) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		located.Sort(errs)
		return r, errs
	}
	sum := sha256.Sum256(r.Canonical())
	r.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return r, nil
}

// collect appends path's includes (depth first, in order) and then path itself.
// stack holds the including files, the last one naming path at line incLine.
// Problems in a file are added to errs and the file's valid keys still merged;
// only a recipe file that cannot be read at all is returned as an error.
func collect(path string, stack []string, incLine int, layers *[]layer, errs *Errors) error {
	incErr := func(format string, args ...any) *Error {
		return &Error{File: stack[len(stack)-1], Line: incLine, Key: "include", Msg: fmt.Sprintf(format, args...)}
	}
	for _, p := range stack {
		if p == path {
			*errs = append(*errs, incErr("include cycle: %s", strings.Join(append(stack, path), " -> ")))
			return nil
		}
	}
	if len(stack) >= maxIncludeDepth {
		*errs = append(*errs, incErr("includes nested deeper than %d", maxIncludeDepth))
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if len(stack) > 0 {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			*errs = append(*errs, incErr("cannot read %s: %v", path, err))
			return nil
		}
		return fmt.Errorf("reading recipe: %w", err)
	}
	addErr := func(err error) error {
		var es Errors
		var e *Error
		switch {
		case errors.As(err, &es):
			*errs = append(*errs, es...)
		case errors.As(err, &e):
			*errs = append(*errs, e)
		default:
			return err
		}
		return nil
	}
	// A layer with wrong types or unknown keys is merged without them, and still
	// names its includes: their problems are reported with its own.
	l, layerErr := parseLayer(path, data)
	if layerErr != nil {
		if err := addErr(layerErr); err != nil {
			return err
		}
	}
	if l.data == nil {
		return nil // a syntax error: nothing more can be read from this file
	}
	includes, err := includeList(l)
	if err != nil {
		if err := addErr(err); err != nil {
			return err
		}
	}
	for i, inc := range includes {
		line := l.lines.line(fmt.Sprintf("include[%d]", i))
		// Relative to the including file (not the current directory), or absolute:
		// a site's shared file under /etc, say.
		incPath := inc
		if !filepath.IsAbs(inc) {
			incPath = filepath.Join(filepath.Dir(path), inc)
		}
		if err := collect(incPath, append(stack[:len(stack):len(stack)], path), line, layers, errs); err != nil {
			return err
		}
	}
	*layers = append(*layers, l)
	return nil
}

// reportedUnder says whether errs already has a problem at key, at a table
// holding it, or at a key inside it.
func reportedUnder(errs Errors, key string) bool {
	for _, e := range errs {
		if e.Key == "" {
			continue
		}
		if e.Meant == key {
			return true
		}
		if e.Key == key || strings.HasPrefix(key, e.Key+".") || strings.HasPrefix(key, e.Key+"[") ||
			strings.HasPrefix(e.Key, key+".") || strings.HasPrefix(e.Key, key+"[") {
			return true
		}
	}
	return false
}

func includeList(l layer) ([]string, error) {
	raw, ok := l.data["include"]
	if !ok {
		return nil, nil
	}
	list, _ := raw.([]any)
	var out []string
	for _, v := range list {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, &Error{File: l.file, Line: l.lines.line("include"), Key: "include", Msg: "want a list of file names"}
		}
		out = append(out, s)
	}
	return out, nil
}

// parseLayer decodes one file twice: into the Recipe type, to catch wrong types and
// unknown keys with their positions, and into a map for merging.
func parseLayer(file string, data []byte) (layer, error) {
	l := layer{file: file, lines: indexLines(data)}
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return l, tomlError(file, data, l.lines, err) // syntax: nothing more can be read
	}
	var errs Errors
	var typed Recipe
	md, err := toml.Decode(string(data), &typed)
	if err != nil {
		terrs := typeErrors(file, raw, l.lines)
		if len(terrs) == 0 {
			return l, tomlError(file, data, l.lines, err) // not one leaf's type: give up on the file
		}
		errs = append(errs, terrs...)
		// The unknown keys are those of the document without the wrong types.
		for _, e := range terrs {
			deletePath(raw, strings.Split(e.Key, "."))
		}
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(raw); err != nil {
			l.data = raw
			located.Sort(errs)
			return l, errs
		}
		typed = Recipe{}
		if md, err = toml.Decode(buf.String(), &typed); err != nil {
			l.data = raw
			located.Sort(errs)
			return l, errs
		}
	}
	seen := map[string]int{}
	for _, k := range md.Undecoded() {
		path := keyPath(k)
		line, at := l.lines.lineUnindexed(path, seen[path])
		seen[path]++
		e := &Error{File: file, Line: line, Key: at, Msg: "unknown key" + suggestion(path)}
		if near := nearestKey(path); near != "" {
			e.Meant = join(parent(at), near[strings.LastIndexByte(near, '.')+1:])
		}
		errs = append(errs, e)
	}
	for _, k := range md.Undecoded() {
		deletePath(raw, k)
	}
	l.data = raw
	if len(errs) > 0 {
		located.Sort(errs)
		return l, errs
	}
	return l, nil
}

// deletePath removes the key at path from m, from every table of an array of
// tables on the way (a toml.Key of such an array has no index).
func deletePath(m map[string]any, path []string) {
	if len(path) == 0 {
		return
	}
	if len(path) == 1 {
		delete(m, path[0])
		return
	}
	switch v := m[path[0]].(type) {
	case map[string]any:
		deletePath(v, path[1:])
	case []map[string]any:
		for _, e := range v {
			deletePath(e, path[1:])
		}
	case []any:
		for _, e := range v {
			if sub, ok := e.(map[string]any); ok {
				deletePath(sub, path[1:])
			}
		}
	}
}

// typeErrors finds every value of the wrong type in a layer, not only the
// first (the decoder stops there): each leaf is decoded on its own into the
// Recipe type. Arrays of tables are decoded whole.
func typeErrors(file string, raw map[string]any, lines lineIndex) Errors {
	var errs Errors
	var walk func(m map[string]any, prefix []string)
	walk = func(m map[string]any, prefix []string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			path := append(slices.Clone(prefix), k)
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
				walk(sub, path)
				continue
			}
			// The document holding only this leaf, under its tables.
			var doc any = m[k]
			for i := len(path) - 1; i >= 0; i-- {
				doc = map[string]any{path[i]: doc}
			}
			var buf bytes.Buffer
			if err := toml.NewEncoder(&buf).Encode(doc); err != nil {
				continue
			}
			var typed Recipe
			if _, err := toml.Decode(buf.String(), &typed); err != nil {
				key := strings.Join(path, ".")
				e := tomlError(file, buf.Bytes(), lines, err)
				var te *Error
				if !errors.As(e, &te) {
					continue
				}
				errs = append(errs, &Error{File: file, Line: lines.line(key), Key: key, Msg: te.Msg})
			}
		}
	}
	walk(raw, nil)
	located.Sort(errs)
	return errs
}

// keyPath renders a toml.Key as our path syntax. Array-of-table indexes are not in
// toml.Key, so such paths point at the array; lines fall back to it.
func keyPath(k toml.Key) string { return strings.Join(k, ".") }

// tomlError locates a TOML decoder error in file; a type error the decoder
// gave no line for is placed at its key's line.
func tomlError(file string, data []byte, lines lineIndex, err error) error {
	e := located.TOML(file, data, err)
	if e.Line == 0 && e.Key != "" {
		e.Line = lines.line(e.Key)
	}
	return e
}

// mergeInto lays src over dst: tables merge key by key, everything else (scalars,
// arrays, arrays of tables, atomic tables) is replaced whole. replaced is told of
// every value a higher layer replaces, with the file that had set it.
func mergeInto(dst, src map[string]any, prefix, file string, origin map[string]string, replaced func(key, lower string, old, new any)) {
	keys := make([]string, 0, len(src))
	for k := range src {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := src[k]
		path := join(prefix, k)
		sub, isTable := v.(map[string]any)
		old, oldIsTable := dst[k].(map[string]any)
		if isTable && oldIsTable && !atomicTables[path] {
			mergeInto(old, sub, path, file, origin, replaced)
			continue
		}
		if prev, had := dst[k]; had && replaced != nil && origin[path] != "" && origin[path] != file {
			replaced(path, origin[path], prev, v)
		}
		for p := range origin {
			if strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
				delete(origin, p)
			}
		}
		dst[k] = v
		origin[path] = file
	}
}

// cumulative are the keys whose items add up in a reader's mind though the
// merge replaces them whole: kernel arguments, config fragments. When the final
// recipe lacks an item a lower layer (other than the defaults) gave one of them,
// Load warns, naming both places.
var cumulative = map[string]bool{"kernel.cmdline": true, "kernel.fragments": true}

// setting is a value of key that file set and a higher layer replaced.
type setting struct {
	key, file string
	value     any
}

// droppedItems warns of each replaced setting whose items the final value lacks.
func (r *Resolved) droppedItems(merged map[string]any, replaced []setting) Errors {
	var warns Errors
	for _, s := range replaced {
		final := valueAt(merged, s.key)
		gone := missingWords(s.value, final)
		if len(gone) == 0 {
			continue
		}
		file := r.origin[s.key]
		warns = append(warns, &Error{File: file, Line: r.lines[file].line(s.key), Key: s.key,
			Msg: fmt.Sprintf("warning: replaces the value %s set, dropping %s: a list is replaced whole, not appended to; repeat what should stay",
				r.location(s.file, s.key), strings.Join(gone, " "))})
	}
	located.Sort(warns)
	return warns
}

// serialNotLast warns when kernel.cmdline names a serial console but a console=
// after it: the kernel makes the last console= /dev/console, where the init's
// output and the self-test's report go, and on a headless box that must be the
// serial line (the BMC's serial-over-LAN).
func (r *Resolved) serialNotLast(merged map[string]any) *Error {
	cmdline, _ := valueAt(merged, "kernel.cmdline").(string)
	var consoles []string
	for _, w := range strings.Fields(cmdline) {
		if c, ok := strings.CutPrefix(w, "console="); ok {
			consoles = append(consoles, c)
		}
	}
	serial := slices.IndexFunc(consoles, func(c string) bool { return strings.HasPrefix(c, "ttyS") })
	if serial < 0 || strings.HasPrefix(consoles[len(consoles)-1], "ttyS") {
		return nil
	}
	file := r.origin["kernel.cmdline"]
	return &Error{File: file, Line: r.lines[file].line("kernel.cmdline"), Key: "kernel.cmdline",
		Msg: fmt.Sprintf("warning: console=%s comes after the serial console=%s: the last console= is /dev/console, where the self-test's report goes; put the serial console last", consoles[len(consoles)-1], consoles[serial])}
}

// valueAt finds a dotted key in a merged document.
func valueAt(m map[string]any, key string) any {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			return nil
		}
		m = sub
	}
	return m[parts[len(parts)-1]]
}

// missingWords lists the items of old (a list of strings, or a command line's
// words) that new lacks.
func missingWords(old, new any) []string {
	words := func(v any) []string {
		switch x := v.(type) {
		case string:
			return strings.Fields(x)
		case []any:
			var out []string
			for _, e := range x {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		return nil
	}
	have := words(new)
	var gone []string
	for _, w := range words(old) {
		if !slices.Contains(have, w) {
			gone = append(gone, w)
		}
	}
	return gone
}

// location is "file:line" of key in file, or the file alone.
func (r *Resolved) location(file, key string) string {
	if line := r.lines[file].line(key); line > 0 {
		return fmt.Sprintf("%s:%d", file, line)
	}
	return file
}

// locate fills File and Line of validation errors from where each key was set.
func (r *Resolved) locate(errs Errors) Errors {
	for _, e := range errs {
		// A key set somewhere is reported where it was set; a missing key is reported
		// in the recipe asked for, at its nearest enclosing table.
		file := r.Path
		if f, ok := r.origin[e.Key]; ok {
			file = f
		} else if f := r.setIn(e.Key); f != "" {
			file = f
		} else {
			for p := parent(e.Key); p != ""; p = parent(p) {
				if f, ok := r.origin[p]; ok && strings.Contains(p, "[") {
					file = f // inside an array of tables: the file that set the array
					break
				}
			}
		}
		if file == defaultsFile {
			// A default the recipe does not fit: "(defaults):47" is no file the user
			// can open, and the recipe is where it is changed.
			set := e.Key
			if p := parent(e.Key); p != "" {
				set = p
			}
			file = r.Path
			e.Msg += fmt.Sprintf(" (a default: set %s in the recipe to change it)", set)
		}
		e.File = file
		e.Line = r.lines[file].line(e.Key)
		if e.Line == 0 {
			// A key no layer sets, in no table the file has: the top of the file, so
			// the message still starts with file:line for editors.
			e.Line = 1
		}
	}
	located.Sort(errs)
	return errs
}

// setIn is the file that wrote key itself inside a table or array it set whole
// (userspace.packages[1] of a [userspace] only an include has); "" if none did.
func (r *Resolved) setIn(key string) string {
	for p := parent(key); p != ""; p = parent(p) {
		if f, ok := r.origin[p]; ok {
			if _, wrote := r.lines[f][key]; wrote {
				return f
			}
			return ""
		}
	}
	return ""
}

// Merge joins lists of problems into one, sorted by file and line, for a
// caller that found more (the data files a recipe names) to report them as one.
func Merge(lists ...Errors) Errors {
	var all Errors
	for _, l := range lists {
		all = append(all, l...)
	}
	located.Sort(all)
	return all
}

// Canonical is the resolved recipe as TOML with sorted keys: the input of its digest
// and what golden files and `peerboot recipe show` print.
func (r *Resolved) Canonical() []byte {
	c := r.Recipe
	c.Include = nil
	c.Cache = Cache{} // where outputs are shared, not what they are
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		// Encoding a decoded struct of plain types cannot fail; a panic here is a bug.
		panic(fmt.Sprintf("encoding resolved recipe: %v", err))
	}
	return buf.Bytes()
}

// KeyLocation is where a key path was set, "file:line", for messages by later stages.
func (r *Resolved) KeyLocation(path string) string {
	e := r.locate(Errors{{Key: path}})[0]
	if e.Line == 0 {
		return e.File
	}
	return fmt.Sprintf("%s:%d", e.File, e.Line)
}

// ErrorAt is a problem with key path found after loading (a data file that cannot
// be read, a key that cannot be parsed), located where the key was set.
func (r *Resolved) ErrorAt(key, format string, args ...any) *Error {
	return r.locate(Errors{{Key: key, Msg: fmt.Sprintf(format, args...)}})[0]
}
