package netboot

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/literals"
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
	literals.Files(t, parser.ImportsOnly, func(fset *token.FileSet, rel string, f *ast.File) {
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			for i, r := range rules {
				if !r.imp(path) || (i == 2 && !noHTTP[rel]) {
					continue
				}
				if !slices.Contains(r.allowed, rel) {
					t.Errorf("%s imports %s: %s", fset.Position(is.Pos()), path, r.why)
				}
			}
		}
	})
}
