// Package literals walks the module's non-test Go files: for the string
// literals they spell (bootproto's and output's TestOneHome, which hold a
// concept to its owning package) and for their imports (netboot's TestLayers).
// One walker, so each test says only what it checks.
package literals

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Lit is one string literal: where it stands, its package directory relative to
// the module root (slash-separated), its source spelling and its value.
type Lit struct {
	Pos    token.Position
	Dir    string
	Quoted string
	Value  string
}

// Each calls fn for every string literal in the module's non-test Go files
// outside the package directory owner (relative to the module root).
func Each(t *testing.T, owner string, fn func(Lit)) {
	t.Helper()
	Files(t, parser.SkipObjectResolution, func(fset *token.FileSet, dir string, f *ast.File) {
		if dir == owner {
			return
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if s, err := strconv.Unquote(lit.Value); err == nil {
				fn(Lit{Pos: fset.Position(lit.Pos()), Dir: dir, Quoted: lit.Value, Value: s})
			}
			return true
		})
	})
}

// Files calls fn for every non-test Go file of the module (whose root is the
// parent of the calling test's directory), parsed with mode, with its package
// directory relative to the root (slash-separated); it skips hidden
// directories, testdata, out and bin. It fails the test when it finds fewer
// than 100 files: a walk that saw almost nothing would pass without checking.
func Files(t *testing.T, mode parser.Mode, fn func(fset *token.FileSet, dir string, f *ast.File)) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "out" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		f, err := parser.ParseFile(fset, p, nil, mode)
		if err != nil {
			return err
		}
		checked++
		fn(fset, filepath.ToSlash(rel), f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files under %s: not the module's tree", checked, root)
	}
}
