package sqldb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

func t0() time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC) }

// Replicas are several stores (each its own connection pool, as two `peerboot serve`
// processes have) over one PostgreSQL database. These tests open them at once on an
// empty database and make them write the same rows at once.

// TestReplicasPGStartTogether: four replicas start at once on an empty database. The
// migrations run once (none fails on a table another is creating), and all four get
// the same token secret, the one stored.
func TestReplicasPGStartTogether(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	for round := 0; round < 3; round++ {
		dsn := postgresDSN(t)
		const n = 4
		stores := make([]*DB, n)
		secrets := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				st, err := OpenPostgres(context.Background(), dsn)
				if err != nil {
					errs[i] = err
					return
				}
				stores[i] = st
				secrets[i], errs[i] = st.Secret(context.Background(), func() ([]byte, error) {
					return []byte(fmt.Sprintf("secret of replica %d", i)), nil
				})
			}(i)
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: replica %d: %v", round, i, err)
			}
		}
		for i := 1; i < n; i++ {
			if !bytes.Equal(secrets[i], secrets[0]) {
				t.Errorf("round %d: replica %d has secret %q, replica 0 %q", round, i, secrets[i], secrets[0])
			}
		}
		var applied int
		if err := stores[0].db.QueryRow(`SELECT COUNT(*) FROM schema_migrations`).Scan(&applied); err != nil || applied != len(migrations) {
			t.Errorf("round %d: %d migrations recorded, want %d (%v)", round, applied, len(migrations), err)
		}
		for _, st := range stores {
			st.Close()
		}
	}
}

// TestReplicasPGSameReport: the same report arrives at two replicas at once (a node
// that retried against the other): it is stored once, and both calls name its id, one
// as stored and one as a duplicate. The same body under another node stays a replay
// (ErrDuplicate with no id).
func TestReplicasPGSameReport(t *testing.T) {
	stores := pgReplicas(t)
	a, b := stores[0], stores[1]
	ctx := context.Background()
	const reports = 100
	for i := 0; i < reports; i++ {
		node := fmt.Sprintf("node-%d", i%7)
		body := fmt.Sprintf(`{"retry":%d}`, i)
		ids := make([]int64, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for j, st := range []*DB{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[j], errs[j] = st.AddReport(ctx, report(node, body, t0()))
			}()
		}
		wg.Wait()
		dups := 0
		for j := range errs {
			switch {
			case errors.Is(errs[j], fleetdb.ErrDuplicate):
				dups++
			case errs[j] != nil:
				t.Fatalf("report %d, replica %d: %v", i, j, errs[j])
			}
		}
		if dups != 1 || ids[0] == 0 || ids[0] != ids[1] {
			t.Fatalf("report %d: ids %v, errors %v: want one stored, one duplicate, the same id", i, ids, errs)
		}
		if i == 0 {
			id, err := b.AddReport(ctx, report("another-node", body, t0()))
			if !errors.Is(err, fleetdb.ErrDuplicate) || id != 0 {
				t.Errorf("the body under another node: id %d, %v; want 0, ErrDuplicate", id, err)
			}
		}
	}
	if n, err := a.Count(ctx); err != nil || n != reports {
		t.Errorf("%d reports stored, want %d (%v)", n, reports, err)
	}
}

// pgReplicas opens two stores on one fresh PostgreSQL database, as two
// replicas do, closed at cleanup. -short skips: it starts PostgreSQL.
func pgReplicas(t *testing.T) [2]*DB {
	t.Helper()
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	var stores [2]*DB
	for i := range stores {
		st, err := OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	return stores
}

// TestReplicasPGPruneTogether: two replicas apply retention to the same node at once,
// over and over, while reports arrive at both: no prune fails, and the node ends with
// exactly its bound.
func TestReplicasPGPruneTogether(t *testing.T) {
	stores := pgReplicas(t)
	ctx := context.Background()
	ret := fleetdb.Retention{ReportsPerNode: 5, BootsPerNode: 5}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		deleted int64
		failed  []error
	)
	const each = 60
	for r, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := st.AddReport(ctx, report("shared", fmt.Sprintf(`{"replica":%d,"i":%d}`, r, i), t0())); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
				if err := st.RecordBoot(ctx, fleetdb.Boot{NodeID: "shared", Recipe: "default", Build: "b1"}); err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
				n, err := st.Prune(ctx, "shared", ret)
				mu.Lock()
				deleted += n
				if err != nil {
					failed = append(failed, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range failed {
		t.Error(err)
	}
	n, err := stores[0].Prune(ctx, "shared", ret)
	if err != nil {
		t.Fatal(err)
	}
	deleted += n
	hist, err := stores[0].Reports(ctx, "shared", 0)
	if err != nil || len(hist) != ret.ReportsPerNode {
		t.Fatalf("%d reports kept, want %d (%v)", len(hist), ret.ReportsPerNode, err)
	}
	// Each report deleted once: what both replicas counted is what went.
	total, _ := stores[0].Count(ctx)
	if deleted+total != 2*each {
		t.Errorf("%d deleted + %d kept, want %d", deleted, total, 2*each)
	}
	var boots int
	stores[0].db.QueryRow(`SELECT COUNT(*) FROM boots WHERE node_id = 'shared'`).Scan(&boots)
	if boots != ret.BootsPerNode {
		t.Errorf("%d boots kept, want %d", boots, ret.BootsPerNode)
	}
}

// TestReplicasPGPruneUnreported: two replicas record boots of new nodes and reports of
// some of them while both bound the nodes that never reported: no prune fails, no
// report is lost, and the bound holds.
func TestReplicasPGPruneUnreported(t *testing.T) {
	stores := pgReplicas(t)
	ctx := context.Background()
	ret := fleetdb.Retention{UnreportedNodes: 3}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []error
		stored int
	)
	note := func(err error) {
		if err != nil {
			mu.Lock()
			failed = append(failed, err)
			mu.Unlock()
		}
	}
	const each = 80
	for _, st := range stores {
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					// Both replicas see the same nodes boot: node i of goroutine g.
					node := fmt.Sprintf("n-%d-%d", g, i)
					note(st.RecordBoot(ctx, fleetdb.Boot{NodeID: node, Recipe: "default", Build: "b1"}))
					if i%4 == 0 {
						_, err := st.AddReport(ctx, report(node, fmt.Sprintf(`{"g":%d,"i":%d}`, g, i), t0()))
						if errors.Is(err, fleetdb.ErrDuplicate) {
							err = nil
						} else if err == nil {
							mu.Lock()
							stored++
							mu.Unlock()
						}
						note(err)
					}
					_, err := st.Prune(ctx, "", ret)
					note(err)
				}
			}()
		}
	}
	wg.Wait()
	for i, err := range failed {
		if i < 5 {
			t.Error(err)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d calls failed", len(failed))
	}
	if n, _ := stores[0].Count(ctx); n != int64(stored) {
		t.Errorf("%d reports in the database, %d stored", n, stored)
	}
	if _, err := stores[1].Prune(ctx, "", ret); err != nil {
		t.Fatal(err)
	}
	var unreported int
	stores[0].db.QueryRow(`SELECT COUNT(*) FROM nodes n WHERE NOT EXISTS (SELECT 1 FROM reports r WHERE r.node_id = n.id)`).Scan(&unreported)
	if unreported != ret.UnreportedNodes {
		t.Errorf("%d nodes without reports kept, want %d", unreported, ret.UnreportedNodes)
	}
}
