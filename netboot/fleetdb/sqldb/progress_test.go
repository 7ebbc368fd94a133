package sqldb

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

func TestProgressSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reports.db")
	testProgress(t, func() (*DB, error) { return Open(context.Background(), path) })
}

func TestProgressPostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	testProgress(t, func() (*DB, error) { return Open(context.Background(), dsn) })
}

// testProgress: the latest progress per node replaces the one before, survives a
// reopen (a restarted serve still shows a burn-in under way), lists without bodies,
// makes its node known, and goes with the node when retention deletes it.
func testProgress(t *testing.T, open func() (*DB, error)) {
	ctx := context.Background()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if p, err := s.Progress(ctx, "n1"); p != nil || err != nil {
		t.Fatalf("a node without progress: %+v, %v; want nil, nil", p, err)
	}
	for i, p := range []fleetdb.Progress{
		{NodeID: "n1", ReceivedAt: t0, Recipe: "r", Build: "b1", Remote: "10.0.0.1", State: "running", ElapsedMS: 60000, RequestedMS: 3600000, Rounds: 30, Body: []byte(`{"first":1}`)},
		{NodeID: "n1", ReceivedAt: t0.Add(time.Minute), Recipe: "r", Build: "b1", Remote: "10.0.0.1", State: "failed", ElapsedMS: 120000, RequestedMS: 3600000, Rounds: 61, Faulty: 1, FirstFault: "round 61: corrupt", Body: []byte(`{"second":2}`)},
		{NodeID: "n2", ReceivedAt: t0, State: "skipped", Body: []byte(`{}`)},
	} {
		if err := s.SetProgress(ctx, p); err != nil {
			t.Fatalf("progress %d: %v", i, err)
		}
	}
	s.Close()
	if s, err = open(); err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	p, err := s.Progress(ctx, "n1")
	if err != nil || p == nil {
		t.Fatalf("after a reopen: %+v, %v", p, err)
	}
	if string(p.Body) != `{"second":2}` || p.State != "failed" || p.Rounds != 61 || p.Faulty != 1 || p.FirstFault != "round 61: corrupt" || !p.ReceivedAt.Equal(t0.Add(time.Minute)) || p.Remote != "10.0.0.1" {
		t.Errorf("n1's progress %+v (body %s), want the second", p, p.Body)
	}
	all, err := s.Progresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all["n1"].State != "failed" || all["n2"].State != "skipped" || all["n1"].Body != nil {
		t.Errorf("Progresses %+v, want n1 failed and n2 skipped, no bodies", all)
	}
	nodes, err := s.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes %+v, %v; want the two that posted progress", nodes, err)
	}
	// Retention: n2 and n1 have no report; keeping one unreported node deletes the
	// least recently seen (n2) and its progress.
	if _, err := s.Prune(ctx, "", fleetdb.Retention{UnreportedNodes: 1}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Progress(ctx, "n2"); p != nil || err != nil {
		t.Errorf("n2's progress outlived its node: %+v, %v", p, err)
	}
	if p, err := s.Progress(ctx, "n1"); p == nil || err != nil {
		t.Errorf("n1's progress went: %v", err)
	}
}
