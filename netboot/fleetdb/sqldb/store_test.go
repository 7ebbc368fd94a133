package sqldb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// Both stores pass the same tests: open returns a store on a fresh database, and
// reopen a second handle on the same database (to check migrations and durability).
func TestStoreSQLite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reports.db")
	testStore(t, func() (*DB, error) { return Open(context.Background(), path) })
}

func TestStorePostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	testStore(t, func() (*DB, error) { return Open(context.Background(), dsn) })
}

func report(node, body string, at time.Time) *fleetdb.StoredReport {
	sum := sha256.Sum256([]byte(body))
	return &fleetdb.StoredReport{NodeID: node, ReceivedAt: at, Recipe: "default", Build: "b1", Verdict: "pass",
		SHA256: hex.EncodeToString(sum[:]), Remote: "127.0.0.1:1", Body: []byte(body)}
}

func testStore(t *testing.T, open func() (*DB, error)) {
	ctx := context.Background()
	s, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	t.Run("boot then reports, history newest first", func(t *testing.T) {
		if err := s.RecordBoot(ctx, fleetdb.Boot{NodeID: "52-54-00-00-00-01", MAC: "52:54:00:00:00:01", Hostname: "n1", Serial: "S1", Recipe: "default", Build: "b1", At: t0}); err != nil {
			t.Fatal(err)
		}
		// A later boot without a hostname keeps the one known.
		if err := s.RecordBoot(ctx, fleetdb.Boot{NodeID: "52-54-00-00-00-01", MAC: "52:54:00:00:00:01", At: t0.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			r := report("52-54-00-00-00-01", fmt.Sprintf(`{"n":%d}`, i), t0.Add(time.Duration(i+2)*time.Second))
			if i == 2 {
				r.Verdict = "fail"
			}
			if id, err := s.AddReport(ctx, r); err != nil || id == 0 {
				t.Fatalf("AddReport %d: %d, %v", i, id, err)
			}
		}
		hist, err := s.Reports(ctx, "52-54-00-00-00-01", 0)
		if err != nil || len(hist) != 3 || hist[0].Verdict != "fail" || hist[0].ID <= hist[1].ID {
			t.Fatalf("history %+v, %v", hist, err)
		}
		if two, _ := s.Reports(ctx, "52-54-00-00-00-01", 2); len(two) != 2 {
			t.Errorf("limit 2 gave %d", len(two))
		}
		for _, key := range []string{"52-54-00-00-00-01", "52:54:00:00:00:01", "n1", "S1"} {
			n, err := s.Node(ctx, key)
			if err != nil {
				t.Fatalf("Node(%s): %v", key, err)
			}
			if n.Hostname != "n1" || n.Serial != "S1" || n.Boots != 2 || n.Reports != 3 || n.Latest == nil || n.Latest.Verdict != "fail" || n.Latest.Body != nil || n.Latest.Size != int64(len(`{"n":2}`)) {
				t.Errorf("Node(%s) = %+v", key, n)
			}
			if !n.FirstSeen.Equal(t0) {
				t.Errorf("first seen %v, want %v", n.FirstSeen, t0)
			}
		}
		got, err := s.Report(ctx, hist[2].ID)
		if err != nil || string(got.Body) != `{"n":0}` || !got.ReceivedAt.Equal(t0.Add(2*time.Second)) || got.Recipe != "default" || got.Build != "b1" {
			t.Errorf("Report = %+v, %v", got, err)
		}
	})

	t.Run("replay refused, nothing changes", func(t *testing.T) {
		before, _ := s.Count(ctx)
		_, err := s.AddReport(ctx, report("52-54-00-00-00-01", `{"n":1}`, t0.Add(time.Hour)))
		if !errors.Is(err, fleetdb.ErrDuplicate) {
			t.Fatalf("replay: %v, want ErrDuplicate", err)
		}
		after, _ := s.Count(ctx)
		n, _ := s.Node(ctx, "n1")
		if after != before || n.LastSeen.After(t0.Add(time.Minute)) {
			t.Errorf("count %d -> %d, last seen %v", before, after, n.LastSeen)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		if _, err := s.Node(ctx, "nope"); !errors.Is(err, fleetdb.ErrNotFound) {
			t.Errorf("Node: %v", err)
		}
		if _, err := s.Report(ctx, 99999); !errors.Is(err, fleetdb.ErrNotFound) {
			t.Errorf("Report: %v", err)
		}
	})

	t.Run("concurrent posts", func(t *testing.T) {
		before, _ := s.Count(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				// Every body twice: exactly one of each pair is stored.
				for j := 0; j < 2; j++ {
					_, err := s.AddReport(ctx, report(fmt.Sprintf("node-%d", i%10), fmt.Sprintf(`{"c":%d}`, i), t0))
					if err != nil && !errors.Is(err, fleetdb.ErrDuplicate) {
						errs <- err
					}
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		after, _ := s.Count(ctx)
		if after-before != 50 {
			t.Errorf("stored %d, want 50", after-before)
		}
		nodes, err := s.Nodes(ctx)
		if err != nil || len(nodes) != 11 {
			t.Fatalf("Nodes: %d, %v", len(nodes), err)
		}
		for _, n := range nodes {
			if n.Latest == nil {
				t.Errorf("node %s has no latest report", n.ID)
			}
		}
	})

	t.Run("secret and reopen", func(t *testing.T) {
		calls := 0
		mk := func() ([]byte, error) { calls++; return []byte{1, 2, 3, byte(calls)}, nil }
		a, err := s.Secret(ctx, mk)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := s.Secret(ctx, mk)
		if !bytes.Equal(a, b) || calls != 1 {
			t.Errorf("secret changed: %x %x (%d calls)", a, b, calls)
		}
		before, _ := s.Count(ctx)
		s.Close()
		s, err = open() // migrations run again and find nothing to do
		if err != nil {
			t.Fatal(err)
		}
		c, _ := s.Secret(ctx, mk)
		after, _ := s.Count(ctx)
		if !bytes.Equal(a, c) || after != before {
			t.Errorf("after reopen: secret %x vs %x, count %d vs %d", c, a, after, before)
		}
	})
}
