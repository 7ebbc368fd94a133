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

func TestProgressStopSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reports.db")
	testProgressStop(t, func() (*DB, error) { return Open(context.Background(), path) })
}

func TestProgressStopPostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	testProgressStop(t, func() (*DB, error) { return Open(context.Background(), dsn) })
}

// testProgressStop: a stop request is recorded on a running burn-in only, once (the
// first request's time and author stay), survives a reopen and the burn-in's further
// progress including its final state, and is dropped when a new burn-in starts (the
// stored one had ended, or the elapsed time went back: a reboot).
func testProgressStop(t *testing.T, open func() (*DB, error)) {
	ctx := context.Background()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	set := func(node, state string, elapsed int64) {
		t.Helper()
		if err := s.SetProgress(ctx, fleetdb.Progress{NodeID: node, ReceivedAt: t0, State: state, ElapsedMS: elapsed, RequestedMS: 3600000, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(node string) fleetdb.Progress {
		t.Helper()
		p, err := s.Progress(ctx, node)
		if err != nil || p == nil {
			t.Fatalf("progress of %s: %+v, %v", node, p, err)
		}
		return *p
	}
	if p, rec, err := s.RequestStop(ctx, "nobody", t0, "10.0.0.9", ""); p != nil || rec || err != nil {
		t.Fatalf("stopping a node without progress: %+v, %v, %v; want nil, false, nil", p, rec, err)
	}
	set("done", "finished", 60000)
	if p, rec, err := s.RequestStop(ctx, "done", t0, "10.0.0.9", ""); err != nil || p == nil || rec || !p.StopAt.IsZero() || p.State != "finished" {
		t.Fatalf("stopping a finished burn-in: %+v, %v, %v; want it unchanged", p, rec, err)
	}
	set("n1", "running", 60000)
	if p := get("n1"); !p.StopAt.IsZero() {
		t.Fatalf("a stop nobody asked for: %+v", p)
	}
	asked := t0.Add(time.Minute)
	p, rec, err := s.RequestStop(ctx, "n1", asked, "10.0.0.9", "rack 4 power work")
	if err != nil || p == nil || !rec || !p.StopAt.Equal(asked) || p.StopBy != "10.0.0.9" || p.StopReason != "rack 4 power work" {
		t.Fatalf("stop: %+v, %v", p, err)
	}
	if p, rec, err := s.RequestStop(ctx, "n1", asked.Add(time.Hour), "10.0.0.10", "again"); err != nil || rec || !p.StopAt.Equal(asked) || p.StopBy != "10.0.0.9" {
		t.Fatalf("a second stop replaced the first: %+v, %v, %v", p, rec, err)
	}
	s.Close()
	if s, err = open(); err != nil {
		t.Fatal(err)
	}
	set("n1", "running", 120000)
	if p := get("n1"); !p.StopAt.Equal(asked) || p.StopReason != "rack 4 power work" {
		t.Errorf("the stop went with the burn-in's next progress: %+v", p)
	}
	if all, err := s.Progresses(ctx); err != nil || !all["n1"].StopAt.Equal(asked) || all["n1"].StopBy != "10.0.0.9" {
		t.Errorf("Progresses without the stop: %+v, %v", all["n1"], err)
	}
	set("n1", "stopped", 125000)
	if p := get("n1"); !p.StopAt.Equal(asked) {
		t.Errorf("the final progress dropped the stop: %+v", p)
	}
	set("n1", "running", 1000) // the next burn-in
	if p := get("n1"); !p.StopAt.IsZero() || p.StopBy != "" || p.StopReason != "" {
		t.Errorf("a new burn-in kept the old one's stop: %+v", p)
	}
	// A reboot mid-burn-in (elapsed goes back while the stored one runs) is a new one too.
	if _, rec, err := s.RequestStop(ctx, "n1", asked, "10.0.0.9", ""); err != nil || !rec {
		t.Fatal(err)
	}
	set("n1", "running", 500)
	if p := get("n1"); !p.StopAt.IsZero() {
		t.Errorf("a burn-in after a reboot kept the old one's stop: %+v", p)
	}
}
