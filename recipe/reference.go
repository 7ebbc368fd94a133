package recipe

import (
	"bytes"
	_ "embed"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// typesSource is the schema's own source: the reference takes each key's text from the
// doc comment of its field, so the comment is the one place a key is documented.
//
//go:embed types.go
var typesSource []byte

// Key is one leaf of the recipe schema as the reference lists it.
type Key struct {
	Path    string // as written in a recipe: "platform.bar1", "repo[].suite", "env.<NAME>"
	Type    string // string, integer, float, bool, size, duration, or [T] for an array
	Default string // the built-in default as a recipe writes it (recipe/defaults.toml); "" none
	Doc     string // the field's doc comment
	Section string // the top-level table ("" for top-level keys)
}

// Section is one top-level table of the schema with its type's doc comment.
type Section struct {
	Name string // "platform", "repo", ...; "" for the top-level keys
	Doc  string
	Keys []Key
}

// Reference walks the schema from Recipe, in field order, and returns every leaf key
// with its type, built-in default and doc comment. A field without a doc comment is an
// error naming it, so a new key cannot reach the reference undocumented.
func Reference() ([]Section, error) {
	docs, err := schemaDocs()
	if err != nil {
		return nil, err
	}
	var defaults map[string]any
	if _, err := toml.Decode(string(defaultsTOML), &defaults); err != nil {
		return nil, fmt.Errorf("recipe/defaults.toml: %w", err)
	}
	w := &refWalker{docs: docs, defaults: defaults}
	top := Section{Doc: docs.types["Recipe"]}
	var sections []Section
	rt := reflect.TypeFor[Recipe]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := tomlName(f)
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && !isLeaf(ft):
			s := Section{Name: name, Doc: docs.types[ft.Name()]}
			w.walk(&s, ft, name, name)
			sections = append(sections, s)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			s := Section{Name: name, Doc: docs.types[ft.Elem().Name()]}
			w.walk(&s, ft.Elem(), name+"[]", "")
			sections = append(sections, s)
		case ft.Kind() == reflect.Map:
			s := Section{Name: name, Doc: docs.field("Recipe", f.Name)}
			w.leaf(&s, "Recipe", f, name, name)
			sections = append(sections, s)
		default:
			w.leaf(&top, "Recipe", f, name, name)
		}
	}
	if len(w.missing) > 0 {
		return nil, fmt.Errorf("recipe/types.go: no doc comment for %s: the recipe reference is generated from them", strings.Join(w.missing, ", "))
	}
	return append([]Section{top}, sections...), nil
}

type refWalker struct {
	docs     *schemaDoc
	defaults map[string]any
	missing  []string
}

// walk adds t's leaves under path; defPath is the key path in defaults.toml ("" when
// the table can have no default, as inside an array of tables).
func (w *refWalker) walk(s *Section, t reflect.Type, path, defPath string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name := tomlName(f)
		p, dp := path+"."+name, ""
		if defPath != "" {
			dp = defPath + "." + name
		}
		ft := f.Type
		if ft.Kind() == reflect.Struct && !isLeaf(ft) {
			w.table(s, t.Name(), f, ft, p, "table")
			w.walk(s, ft, p, dp)
			continue
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			w.table(s, t.Name(), f, ft.Elem(), p, "[table]")
			w.walk(s, ft.Elem(), p+"[]", "")
			continue
		}
		w.leaf(s, t.Name(), f, p, dp)
	}
}

// table adds the row of a nested table (kernel.source, selftest.deadlines): its field's
// doc comment, else its type's.
func (w *refWalker) table(s *Section, owner string, f reflect.StructField, t reflect.Type, path, typ string) {
	doc := w.docs.field(owner, f.Name)
	if doc == "" {
		doc = w.docs.types[t.Name()]
	}
	if doc == "" {
		w.missing = append(w.missing, owner+"."+f.Name)
	}
	s.Keys = append(s.Keys, Key{Path: path, Type: typ, Doc: doc, Section: s.Name})
}

// leaf adds one key; maps become placeholders (env.<NAME>, driver.params.<module>.<param>,
// selftest.thresholds.<class>.KEY).
func (w *refWalker) leaf(s *Section, owner string, f reflect.StructField, path, defPath string) {
	doc := w.docs.field(owner, f.Name)
	if doc == "" {
		w.missing = append(w.missing, owner+"."+f.Name)
	}
	ft := f.Type
	if ft.Kind() == reflect.Map {
		ph := mapPlaceholder[owner+"."+f.Name]
		if ph == "" {
			ph = "<KEY>"
		}
		path += "." + ph
		ft = ft.Elem()
		if ft.Kind() == reflect.Map { // driver.params: module -> parameter -> value
			path += ".<param>"
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct { // selftest.thresholds.<class>: one key per field
			for i := range ft.NumField() {
				sf := ft.Field(i)
				sd := w.docs.field(ft.Name(), sf.Name)
				if sd == "" {
					w.missing = append(w.missing, ft.Name()+"."+sf.Name)
				}
				s.Keys = append(s.Keys, Key{Path: path + "." + tomlName(sf), Type: typeName(sf.Type),
					Doc: joinDoc(doc, sd), Section: s.Name})
			}
			return
		}
		s.Keys = append(s.Keys, Key{Path: path, Type: typeName(ft), Doc: doc, Section: s.Name})
		return
	}
	k := Key{Path: path, Type: typeName(ft), Doc: doc, Section: s.Name}
	if defPath != "" {
		if v, ok := lookup(w.defaults, defPath); ok {
			k.Default = tomlValue(v)
		}
	}
	s.Keys = append(s.Keys, k)
}

// mapPlaceholder names the free key of each map-valued field.
var mapPlaceholder = map[string]string{
	"Recipe.Env":          "<NAME>",
	"Driver.Params":       "<module>",
	"Selftest.Thresholds": "<class>",
}

func joinDoc(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return strings.TrimSuffix(a, ".") + ": " + b
}

// isLeaf says whether a struct type is written as one value (a size, a duration).
func isLeaf(t reflect.Type) bool {
	return t == reflect.TypeFor[Size]() || t == reflect.TypeFor[Duration]()
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

func typeName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Size]():
		return "size"
	case reflect.TypeFor[Duration]():
		return "duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "float"
	case reflect.Bool:
		return "bool"
	case reflect.Slice:
		return "[" + typeName(t.Elem()) + "]"
	case reflect.Pointer: // optional with a default other than the zero value (check_valid_until)
		return typeName(t.Elem())
	}
	return t.String()
}

func lookup(m map[string]any, path string) (any, bool) {
	var v any = m
	for _, seg := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = mm[seg]; !ok {
			return nil, false
		}
	}
	return v, true
}

// tomlValue writes a decoded defaults.toml value as a recipe writes it.
func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		s := strconv.FormatFloat(v, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	case bool:
		return strconv.FormatBool(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = tomlValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// schemaDoc holds the doc comments of types.go: per type, and per type.field.
type schemaDoc struct {
	types  map[string]string
	fields map[string]string
}

func (d *schemaDoc) field(typ, name string) string { return d.fields[typ+"."+name] }

func schemaDocs() (*schemaDoc, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "types.go", typesSource, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("recipe/types.go: %w", err)
	}
	d := &schemaDoc{types: map[string]string{}, fields: map[string]string{}}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			doc := ts.Doc
			if doc == nil && len(gd.Specs) == 1 {
				doc = gd.Doc
			}
			d.types[ts.Name.Name] = dropSubject(commentText(doc, ""), ts.Name.Name, true)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, fl := range st.Fields.List {
				text := commentText(fl.Doc, "")
				if line := commentText(fl.Comment, ""); line != "" {
					text = joinSentences(text, line)
				}
				for _, n := range fl.Names {
					d.fields[ts.Name.Name+"."+n.Name] = dropSubject(text, n.Name, false)
				}
			}
		}
	}
	return d, nil
}

// commentText is a comment group as one line of prose.
func commentText(g *ast.CommentGroup, name string) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// dropSubject turns Go's "Name is a thing" / "Name does a thing" into "a thing" /
// "does a thing" (capitalised for a section's text), which reads right under a key.
func dropSubject(text, name string, capital bool) string {
	rest, ok := strings.CutPrefix(text, name+" ")
	if !ok {
		return text
	}
	for _, verb := range []string{"is ", "are "} {
		if r, ok := strings.CutPrefix(rest, verb); ok {
			rest = r
			break
		}
	}
	if capital && rest != "" {
		rest = strings.ToUpper(rest[:1]) + rest[1:]
	}
	return rest
}

func joinSentences(a, b string) string {
	if a == "" {
		return b
	}
	if !strings.HasSuffix(a, ".") {
		a += "."
	}
	return a + " " + b
}

// ReferenceMarkdown renders the reference as docs/recipe-reference.md.
func ReferenceMarkdown(regenerate string) ([]byte, error) {
	sections, err := Reference()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated from recipe/types.go and recipe/defaults.toml by `%s`: do not edit. -->\n\n", regenerate)
	b.WriteString("# Recipe reference\n\n")
	b.WriteString("Every key a recipe may set, generated from the recipe schema (the field comments of\n")
	b.WriteString("`recipe/types.go`) and the built-in defaults (`recipe/defaults.toml`, the lowest layer\n")
	b.WriteString("under every recipe). `[]` in a path marks an array of tables (`[[repo]]`, or an inline\n")
	b.WriteString("`[{...}]`); `<...>` a name of your choice. Sizes take binary units only (`\"256MiB\"`,\n")
	b.WriteString("`\"32GiB\"`); durations are Go durations (`\"90s\"`, `\"2m\"`). How layers merge, and the\n")
	b.WriteString("recipes shipped: [recipes.md](recipes.md).\n")
	for _, s := range sections {
		title := "Top-level keys"
		if s.Name != "" {
			title = "`" + s.Name + "`"
		}
		fmt.Fprintf(&b, "\n## %s\n\n", title)
		if s.Doc != "" && s.Name != "" && s.Name != "env" {
			b.WriteString(s.Doc + "\n\n")
		}
		b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
		for _, k := range s.Keys {
			def := ""
			if k.Default != "" {
				def = "`" + k.Default + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k.Path, k.Type, def, mdCell(k.Doc))
		}
	}
	return b.Bytes(), nil
}

// mdCell keeps a doc comment inside one table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// Keys lists every key path of the reference, sorted (for tests and tools).
func Keys() ([]string, error) {
	sections, err := Reference()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range sections {
		for _, k := range s.Keys {
			out = append(out, k.Path)
		}
	}
	slices.Sort(out)
	return out, nil
}
