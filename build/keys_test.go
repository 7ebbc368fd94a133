package build

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/recipe"
)

// Key completeness, from the schema rather than a hand list: every leaf of the
// recipe is changed in turn, and exactly the stages that declare it (in Fields,
// DataFields, or through the inputs a lock field picks, or the build clock)
// and everything downstream of them change key. A new recipe field that no
// stage declares and that is not a lock field fails here; so does a declared
// field whose change the key does not see.
//
// The config and image stages declare the whole recipe ("*"), which covers
// every field: counting that as a declaration would let any new field pass.
// So "*" does not count; a field read only through the whole recipe is named
// in wholeRecipeOnly, with why, by hand (no -update rewrites it).
func TestKeyCompleteness(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	body := strings.NewReplacer("%s", strings.Repeat("a", 64)).Replace(planRecipe) + `
[sign]
module_key = "file:module.key"
module_cert = "file:module.crt"
`
	write("t.toml", body)
	for _, f := range []string{"local.config", "extra.config", "0001-local.patch", "0002-extra.patch", "init", "p2pcheck"} {
		write(f, f+" v1\n")
	}
	write("module.crt", testCert(t, 1))
	write("other.crt", testCert(t, 2))
	write("module.key", "key v1")
	write("other.key", "key v2")
	write("pcr.key", testRSAKey(t))
	base, err := recipe.Load(filepath.Join(dir, "t.toml"))
	if err != nil {
		t.Fatal(err)
	}
	tools := Tools{Init: filepath.Join(dir, "init"), P2PCheck: filepath.Join(dir, "p2pcheck")}
	baseKeys, baseIns, baseUn := keysOf(t, base, tools)

	// Values that must name real files, so a change is a change of bytes the plan reads.
	fileValues := map[string]any{
		"kernel.fragments": []string{"base.config", "./local.config", "./extra.config"},
		"kernel.patches":   []string{"./0002-extra.patch"},
		"driver.patches":   []string{"./0001-local.patch", "./0002-extra.patch"},
		"sign.module_cert": "file:other.crt",
		"sign.module_key":  "file:other.key",
		"sign.pcr_key":     "file:pcr.key",
	}
	defs := pipeline()
	for _, leaf := range RecipeLeaves() {
		t.Run(leaf, func(t *testing.T) {
			var declared []StageName
			for _, d := range defs {
				if slices.ContainsFunc(append(slices.Clone(d.Fields), d.DataFields...), func(f string) bool { return covers(f, leaf) && f != wholeRecipe }) {
					declared = append(declared, d.Name)
				}
			}
			isLock := slices.ContainsFunc(LockFields, func(f string) bool { return covers(f, leaf) })
			if err := undeclared(defs, leaf); err != nil {
				t.Fatal(err)
			}
			r := *base
			r.Recipe = cloneRecipe(t, base.Recipe)
			v, _ := fieldByPath(reflect.ValueOf(&r.Recipe).Elem(), leaf)
			if fv, ok := fileValues[leaf]; ok {
				v.Set(reflect.ValueOf(fv))
			} else {
				mutate(t, v)
			}
			sum := sha256.Sum256(r.Canonical())
			r.Digest = "sha256:" + hex.EncodeToString(sum[:])
			keys, ins, un := keysOf(t, &r, tools)

			// What should move: the declaring stages, the stages whose inputs
			// the change re-picked, the clocked stages when the clock moved,
			// the whole-recipe stages when the digest moved; then downstream.
			want := map[StageName]bool{}
			for _, n := range declared {
				want[n] = true
			}
			changedRoles := map[string]bool{}
			for _, role := range []string{lock.RoleKernelSource, lock.RoleDriverSource, lock.RoleUserspace, lock.RoleInstaller, lock.RoleEFIStub} {
				if !reflect.DeepEqual(byRole(baseIns, role), byRole(ins, role)) || !reflect.DeepEqual(unresolvedOf(baseUn, role), unresolvedOf(un, role)) {
					changedRoles[role] = true
				}
			}
			clockMoved := func(k clockKind) bool {
				a, _ := clockItem(base, k, baseIns)
				b, _ := clockItem(&r, k, ins)
				return a != b
			}
			for _, d := range defs {
				for _, role := range d.Roles {
					want[d.Name] = want[d.Name] || changedRoles[role]
				}
				if clockMoved(d.Clock) || slices.Contains(d.Fields, wholeRecipe) && r.Digest != base.Digest {
					want[d.Name] = true
				}
				for _, dep := range d.Deps {
					want[d.Name] = want[d.Name] || want[dep]
				}
			}
			for _, d := range defs {
				moved := keys[d.Name] != baseKeys[d.Name]
				if moved != want[d.Name] {
					t.Errorf("stage %s: key moved %v, want %v (declared by %v, lock field %v, roles %v, clock moved %v)",
						d.Name, moved, want[d.Name], declared, isLock, changedRoles, clockMoved(d.Clock))
				}
			}
		})
	}
}

// wholeRecipeOnly are the recipe fields (a table covers its leaves) that no
// stage declares by name, each with where it is read: through the recipe the
// config layer copies into the image (the init and the self-test read it
// there) or the image stage, both of which key the whole recipe.
var wholeRecipeOnly = map[string]string{
	"name":              "os-release and the image's recipe copy (image, config)",
	"description":       "the image's recipe copy only (config)",
	"env":               "etc/profile.d/peerboot-env.sh (generatedFiles: config)",
	"driver.p2p":        "the recipe copy: the self-test's P2P expectation (config)",
	"driver.params":     "etc/modprobe.d options (generatedFiles: config)",
	"kernel.cmdline":    "the UKI's .cmdline (image)",
	"outputs.formats":   "which outputs the image stage writes (image)",
	"outputs.disk_size": "the disk image's size (image)",
	"source_date_epoch": "the build clock of clocked stages, and the recipe copy (config, image)",
	"platform":          "the self-test's expected node, from the recipe copy (config)",
	"selftest":          "the self-test's thresholds and deadlines, from the recipe copy (config)",
	"boot":              "the init's on-pass/on-fail and report URL, from the recipe copy (config)",
	"sign.artifact_key": "peerboot sign, after the build; in the recipe copy (config)",
	"sign.db_cert":      "peerboot sign, after the build; in the recipe copy (config)",
	"sign.db_key":       "peerboot sign, after the build; in the recipe copy (config)",
}

// undeclared says why leaf is declared nowhere: no stage names it (the
// whole-recipe "*" does not count), it is no lock field, and wholeRecipeOnly
// does not list it.
func undeclared(defs []*stage, leaf string) error {
	for _, d := range defs {
		if slices.ContainsFunc(append(slices.Clone(d.Fields), d.DataFields...), func(f string) bool { return f != wholeRecipe && covers(f, leaf) }) {
			return nil
		}
	}
	if slices.ContainsFunc(LockFields, func(f string) bool { return covers(f, leaf) }) {
		return nil
	}
	for f := range wholeRecipeOnly {
		if covers(f, leaf) {
			return nil
		}
	}
	return fmt.Errorf("no stage declares recipe field %s: add it to the Fields or DataFields of the stages that read it, to LockFields if only the lock reads it, or to wholeRecipeOnly (with where it is read) if only the recipe copied into the image carries it", leaf)
}

// The completeness check can fail: a field no list names is reported, and
// every wholeRecipeOnly entry is needed (it covers a leaf that nothing else
// declares), so the hand list cannot grow stale.
func TestKeyCompletenessCatchesUndeclared(t *testing.T) {
	defs := pipeline()
	if err := undeclared(defs, "kernel.invented_field"); err == nil || !strings.Contains(err.Error(), "no stage declares recipe field kernel.invented_field") {
		t.Fatalf("an undeclared field: %v", err)
	}
	for _, f := range slices.Sorted(maps.Keys(wholeRecipeOnly)) {
		needed := false
		for _, leaf := range RecipeLeaves() {
			if !covers(f, leaf) {
				continue
			}
			saved := wholeRecipeOnly[f]
			delete(wholeRecipeOnly, f)
			needed = needed || undeclared(defs, leaf) != nil
			wholeRecipeOnly[f] = saved
		}
		if !needed {
			t.Errorf("wholeRecipeOnly lists %s, but a stage or lock field declares it (or no recipe field is that): remove it", f)
		}
	}
}

func byRole(ins []lock.Input, role string) []lock.Input {
	var out []lock.Input
	for _, in := range ins {
		if in.Role == role {
			out = append(out, in)
		}
	}
	return out
}

func unresolvedOf(un []lock.Unresolved, role string) []lock.Unresolved {
	var out []lock.Unresolved
	for _, u := range un {
		if u.Role == role {
			out = append(out, u)
		}
	}
	return out
}

// cloneRecipe deep-copies a recipe (its maps and slices are shared otherwise).
func cloneRecipe(t *testing.T, r recipe.Recipe) recipe.Recipe {
	var out recipe.Recipe
	deepCopy(reflect.ValueOf(&out).Elem(), reflect.ValueOf(r))
	return out
}

func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Struct:
		for i := 0; i < src.NumField(); i++ {
			deepCopy(dst.Field(i), src.Field(i))
		}
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeSlice(src.Type(), src.Len(), src.Len()))
		for i := 0; i < src.Len(); i++ {
			deepCopy(dst.Index(i), src.Index(i))
		}
	case reflect.Map:
		if src.IsNil() {
			return
		}
		dst.Set(reflect.MakeMap(src.Type()))
		for _, k := range src.MapKeys() {
			v := reflect.New(src.Type().Elem()).Elem()
			deepCopy(v, src.MapIndex(k))
			dst.SetMapIndex(k, v)
		}
	default:
		dst.Set(src)
	}
}

// mutate changes v to another value of its type.
func mutate(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeOf(recipe.Duration(0)) {
			v.SetInt(v.Int() + int64(time.Second))
			return
		}
		v.SetInt(v.Int() + 1)
	case reflect.Float64:
		v.SetFloat(v.Float() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Map:
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		e := reflect.New(v.Type().Elem()).Elem()
		if e.Kind() == reflect.Map {
			e.Set(reflect.MakeMap(e.Type()))
		}
		v.SetMapIndex(reflect.ValueOf("mutated"), e)
	default:
		t.Fatalf("the key test cannot change a %s: teach mutate", v.Type())
	}
}

// The run sees only what the key covers: in each stage's view of a recipe with
// every leaf set, the leaves the stage does not declare are zero. A field added
// to the schema tomorrow is zero in every view but the whole-recipe ones until a
// stage declares it, so this cannot go stale either.
func TestRunSeesOnlyDeclaredFields(t *testing.T) {
	var full recipe.Resolved
	for _, leaf := range RecipeLeaves() {
		v, _ := fieldByPath(reflect.ValueOf(&full.Recipe).Elem(), leaf)
		mutate(t, v)
	}
	for _, d := range pipeline() {
		view, err := project(&full, d.Fields)
		if err != nil {
			t.Fatal(err)
		}
		for _, leaf := range RecipeLeaves() {
			seen := slices.ContainsFunc(d.Fields, func(f string) bool { return covers(f, leaf) })
			v, _ := fieldByPath(reflect.ValueOf(&view.Recipe).Elem(), leaf)
			if v.IsZero() == seen {
				t.Errorf("stage %s: field %s visible %v, declared %v", d.Name, leaf, !v.IsZero(), seen)
			}
		}
	}
}
