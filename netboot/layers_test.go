package netboot

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayers fails when the report pipeline's packages reach past their
// interfaces (docs/design.md, "serve's report pipeline"): SQL (database/sql
// and its drivers) is sqldb's alone, and the module's internal/pgtest, which
// starts the tests' PostgreSQL; sqldb is opened only by cmd/peerboot, never by
// a handler or a stage; the stages and the records speak no HTTP; and only
// the command imports the server (its client shares netboot/api, not netboot).
func TestLayers(t *testing.T) {
	const mod = "github.com/peerboot/peerboot/"
	type rule struct {
		imp     func(path string) bool
		allowed []string // package dirs, relative to the module root
		why     string
	}
	sql := func(p string) bool {
		return p == "database/sql" || strings.HasPrefix(p, "github.com/jackc/pgx") || p == "modernc.org/sqlite"
	}
	rules := []rule{
		{sql, []string{"netboot/fleetdb/sqldb", "internal/pgtest"}, "SQL lives in netboot/fleetdb/sqldb"},
		{func(p string) bool { return p == mod+"netboot/fleetdb/sqldb" }, []string{"cmd/peerboot"},
			"handlers and stages take fleetdb's interfaces; only the command opens the database"},
		{func(p string) bool { return p == "net/http" }, nil, "the stages and the records speak no HTTP"},
		{func(p string) bool { return p == mod+"netboot" }, []string{"cmd/peerboot"},
			"the server is started by the command alone; its client (netboot/client) and the API's types (netboot/api) stand apart from it"},
	}
	// The third rule concerns these packages only.
	noHTTP := map[string]bool{"netboot/fleetdb": true, "netboot/fleetdb/sqldb": true, "netboot/attestation": true, "netboot/vote": true, "rollout": true}
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
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			for i, r := range rules {
				if !r.imp(path) || (i == 2 && !noHTTP[rel]) {
					continue
				}
				ok := false
				for _, a := range r.allowed {
					ok = ok || a == rel
				}
				if !ok {
					t.Errorf("%s imports %s: %s", fset.Position(is.Pos()), path, r.why)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files: is the module root %s?", checked, root)
	}
}
