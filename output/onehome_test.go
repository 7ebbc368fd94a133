package output

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

// TestOneHome fails when a string literal in the module's code spells one of the
// output directory's file names outside this package, alone or as a path segment
// ("pxe/initrd.img", "%s/SHA256SUMS"): a copy a rename here would miss. Allowed,
// by rule rather than by list: tests (a test may spell the file it expects, so
// that a rename is seen), and prose (literals with spaces: help texts and
// messages are docs, held by TestHelpGolden and TestDocsGenerated).
func TestOneHome(t *testing.T) {
	values := []string{
		ManifestFile, SumsFile, SumsSigFile, ProvenanceFile, PublicKeyFile,
		UKIFile, DiskFile, ISOFile, InitrdFile, PXEKernel, PXEScript,
		PXEKernelPath, PXEInitrdPath, PXEScriptPath,
	}
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
		rel = filepath.ToSlash(rel)
		if rel == "output" {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			if strings.ContainsAny(s, " \t\n") {
				return true // prose: a help text or message, docs
			}
			for _, v := range values {
				if s == v || strings.HasSuffix(s, "/"+v) || strings.HasPrefix(s, v+"/") || strings.Contains(s, "/"+v+"/") {
					t.Errorf("%s: %s spells output's %q: use the constant", fset.Position(lit.Pos()), lit.Value, v)
					break
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files under %s: not the module's tree", checked, root)
	}
}
