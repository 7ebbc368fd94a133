package sqldb

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/peerboot/peerboot/internal/testguard"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/selftest"
)

// Retention on both stores, each on a fresh database: per-node count, total bytes
// (each node's latest report last), boots per node and nodes that never reported.
func TestRetentionSQLite(t *testing.T) {
	s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "reports.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testRetention(t, s)
}

func TestRetentionPostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	s, err := Open(context.Background(), postgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testRetention(t, s)
}

func testRetention(t *testing.T, s *DB) {
	ctx := context.Background()
	t0 := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	body := func(node string, i int) string {
		return fmt.Sprintf(`{"node":%q,"i":%d,"pad":%q}`, node, i, strings.Repeat("x", 1000))
	}
	for i := 0; i < 12; i++ {
		if _, err := s.AddReport(ctx, report("ret-a", body("ret-a", i), t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(ctx, "ret-a", fleetdb.Retention{ReportsPerNode: 5})
	if err != nil || n != 7 {
		t.Fatalf("per-node prune deleted %d (%v), want 7", n, err)
	}
	hist, _ := s.Reports(ctx, "ret-a", 0)
	if len(hist) != 5 || !strings.Contains(mustBody(t, s, hist[0].ID), `"i":11`) || !strings.Contains(mustBody(t, s, hist[4].ID), `"i":7`) {
		t.Fatalf("kept %d reports, want the newest 5 (i 7..11)", len(hist))
	}
	if n, _ := s.Prune(ctx, "ret-a", fleetdb.Retention{ReportsPerNode: 5}); n != 0 {
		t.Errorf("a second prune deleted %d", n)
	}
	// Three more nodes, one report each; then a byte bound that holds six reports:
	// ret-a's older ones go first, every node keeps its latest.
	for _, node := range []string{"ret-b", "ret-c", "ret-d"} {
		if _, err := s.AddReport(ctx, report(node, body(node, 0), t0.Add(time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	size := int64(len(body("ret-a", 0)))
	// i 10 and 11 are a byte longer.
	if n, err := s.Prune(ctx, "", fleetdb.Retention{ReportBytes: 6*size + 2}); err != nil || n != 2 {
		t.Fatalf("byte prune deleted %d (%v), want 2", n, err)
	}
	if hist, _ := s.Reports(ctx, "ret-a", 0); len(hist) != 3 {
		t.Errorf("ret-a kept %d, want 3", len(hist))
	}
	// A bound below the latest reports themselves: the oldest latest goes too.
	if n, err := s.Prune(ctx, "", fleetdb.Retention{ReportBytes: 2 * size}); err != nil || n != 4 {
		t.Fatalf("tight byte prune deleted %d (%v), want 4", n, err)
	}
	for _, node := range []string{"ret-a", "ret-b"} {
		if hist, _ := s.Reports(ctx, node, 0); len(hist) != 0 {
			t.Errorf("%s kept %d reports", node, len(hist))
		}
	}
	// Boots per node, and nodes known only from script fetches.
	for i := 0; i < 30; i++ {
		if err := s.RecordBoot(ctx, fleetdb.Boot{NodeID: fmt.Sprintf("ghost-%02d", i), At: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 8; i++ {
		s.RecordBoot(ctx, fleetdb.Boot{NodeID: "ret-c", At: t0.Add(time.Hour + time.Duration(i)*time.Second)})
	}
	if _, err := s.Prune(ctx, "ret-c", fleetdb.Retention{BootsPerNode: 3, UnreportedNodes: 10}); err != nil {
		t.Fatal(err)
	}
	nodes, _ := s.Nodes(ctx)
	ghosts := 0
	for _, n := range nodes {
		if strings.HasPrefix(n.ID, "ghost-") {
			ghosts++
		}
	}
	// ret-a, ret-b lost their reports and count as unreported too: 10 in all remain,
	// the most recently seen.
	if ghosts+2 < 10 || ghosts > 10 {
		t.Errorf("%d ghost nodes kept, want 8 to 10 (unreported bound 10)", ghosts)
	}
	if _, err := s.Node(ctx, "ghost-00"); err == nil {
		t.Error("the least recently seen ghost was kept")
	}
	if _, err := s.Node(ctx, "ghost-29"); err != nil {
		t.Errorf("the newest ghost was dropped: %v", err)
	}
}

func mustBody(t *testing.T, s *DB, id int64) string {
	t.Helper()
	r, err := s.Report(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return string(r.Body)
}

// TestStoreUpgrade (issue 15 item 7): a database written by the schema before the
// summary columns opens, keeps its reports, and gets their summaries, so the fleet
// page shows them without reading a body.
func TestStoreUpgrade(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "reports.db")
	q := url.Values{}
	q.Add("_pragma", "foreign_keys(1)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	old := &DB{db: db, d: sqliteDialect}
	if err := old.migrateTo(ctx, migrations[:2]); err != nil {
		t.Fatal(err)
	}
	body, _ := selftest.Encode(netboot.DemoReport(netboot.Xeon8GPU, 0, true))
	if _, err := db.Exec(`INSERT INTO nodes (id, first_seen, last_seen) VALUES ('n1', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO reports (node_id, received_at, recipe, build, verdict, sha256, remote, body) VALUES ('n1', 2, 'xeon-8gpu', 'b', 'fail', 'aa', 'r', $1)`, body); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := s.Node(ctx, "n1")
	if err != nil || n.Latest == nil {
		t.Fatalf("after the upgrade: %+v %v", n, err)
	}
	if n.Latest.GPUs != 8 || n.Latest.Size != int64(len(body)) || n.Latest.BusBWAtMax == 0 || len(n.Latest.Failing) == 0 || n.Latest.Failing[0].ID != "copy.corrupt" {
		t.Errorf("summary after the upgrade: %+v", n.Latest)
	}
	if got := mustBody(t, s, n.Latest.ID); got != string(body) {
		t.Errorf("body changed by the upgrade: %d bytes, want %d", len(got), len(body))
	}
}

// TestStoreFileMode (issue 15 item 9): the database holds the token secret; it and
// its WAL files were created 0644.
func TestStoreFileMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "reports.db")
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Secret(context.Background(), func() ([]byte, error) { return []byte("0123456789abcdef"), nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v, want no group or other access", filepath.Base(p), fi.Mode().Perm())
		}
	}
	s.Close()
	// An existing database readable by others is narrowed when opened.
	os.Chmod(path, 0o644)
	s, err = OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("reopened database is %v, want 0600", fi.Mode().Perm())
	}
}
