package build

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/peerboot/peerboot/recipe"
)

// A stage sees the recipe only through its fields: the run gets a copy of the
// resolved recipe holding the declared fields and nothing else, and the key
// hashes exactly those values. So a stage cannot read a field its key does
// not cover; it would read a zero value, which the stage's tests would see.

// wholeRecipe as a stage's only field means the stage writes the resolved
// recipe itself (the config layer copies it into the image), so every field
// and the digest are in its key.
const wholeRecipe = "*"

// sharingTable is the recipe's [cache] table: where stage outputs are fetched
// from and pushed to, never what they are. recipe.Canonical leaves it out, so
// it is in no key, and no stage sees it.
const sharingTable = "cache"

// LockFields reach the build only through the lock: they choose the pinned
// inputs, whose digests the stages that read them key. No stage's run sees them.
var LockFields = []string{"include", "repo", "kernel.source", "driver.source", "userspace", "outputs.efi_stub"}

// project returns r with only the fields named kept (dotted TOML key paths,
// a table's path keeping the whole table). Path, Files and Digest are kept only
// for wholeRecipe: the recipe's location is the plan's business, not the run's.
func project(r *recipe.Resolved, fields []string) (*recipe.Resolved, error) {
	if len(fields) == 1 && fields[0] == wholeRecipe {
		c := *r
		c.Cache = recipe.Cache{} // how outputs are shared: no stage reads it
		return &c, nil
	}
	out := &recipe.Resolved{}
	src, dst := reflect.ValueOf(&r.Recipe).Elem(), reflect.ValueOf(&out.Recipe).Elem()
	for _, f := range fields {
		s, err := fieldByPath(src, f)
		if err != nil {
			return nil, err
		}
		d, _ := fieldByPath(dst, f)
		d.Set(s)
	}
	return out, nil
}

// fieldValue is the key line's value for one field: its JSON encoding (maps
// with sorted keys, so the same recipe always gives the same line).
func fieldValue(r *recipe.Resolved, path string) (string, error) {
	v, err := fieldByPath(reflect.ValueOf(&r.Recipe).Elem(), path)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v.Interface())
	return string(b), err
}

// fieldByPath finds a field of a recipe struct by its dotted TOML key path.
func fieldByPath(v reflect.Value, path string) (reflect.Value, error) {
	for _, name := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("recipe field %q: %s is not a table", path, name)
		}
		f, ok := fieldByTag(v, name)
		if !ok {
			return reflect.Value{}, fmt.Errorf("recipe field %q: no key %s", path, name)
		}
		v = f
	}
	return v, nil
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if tomlName(t.Field(i)) == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func tomlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	return name
}

// RecipeLeaves lists every leaf key path of the recipe schema (tables are
// walked, everything else — scalars, arrays, maps — is a leaf), in schema order.
// The key-completeness test walks it, so a new recipe field is covered by a
// stage, or is a lock field, or fails that test.
func RecipeLeaves() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			p := prefix + tomlName(f)
			if p == sharingTable {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 {
				walk(f.Type, p+".")
				continue
			}
			out = append(out, p)
		}
	}
	walk(reflect.TypeOf(recipe.Recipe{}), "")
	return out
}

// covers says whether a declared field path (a table or a leaf) covers leaf.
func covers(declared, leaf string) bool {
	return declared == wholeRecipe || declared == leaf || strings.HasPrefix(leaf, declared+".")
}

// FieldTOML is a recipe field's value as a recipe writes it (TOML inline
// syntax: "256MiB" quoted, arrays in brackets, tables as { key = value }), for
// `plan -v`. The key itself hashes fieldValue's JSON; this is only for people.
func FieldTOML(r *recipe.Resolved, path string) (string, error) {
	v, err := fieldByPath(reflect.ValueOf(&r.Recipe).Elem(), path)
	if err != nil {
		return "", err
	}
	return tomlInline(v), nil
}

func tomlInline(v reflect.Value) string {
	if m, ok := v.Interface().(encoding.TextMarshaler); ok && v.Kind() != reflect.Struct {
		b, err := m.MarshalText()
		if err == nil {
			return strconv.Quote(string(b))
		}
	}
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = tomlInline(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		var parts []string
		for _, k := range keys {
			parts = append(parts, tomlKey(k.String())+" = "+tomlInline(v.MapIndex(k)))
		}
		return inlineTable(parts)
	case reflect.Struct:
		var parts []string
		for i := 0; i < v.NumField(); i++ {
			if name := tomlName(v.Type().Field(i)); name != "" {
				parts = append(parts, name+" = "+tomlInline(v.Field(i)))
			}
		}
		return inlineTable(parts)
	}
	return fmt.Sprint(v.Interface())
}

func inlineTable(parts []string) string {
	if len(parts) == 0 {
		return "{}"
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func tomlKey(k string) string {
	if bareKey.MatchString(k) {
		return k
	}
	return strconv.Quote(k)
}
