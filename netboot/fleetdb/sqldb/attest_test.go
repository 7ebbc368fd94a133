package sqldb

import (
	"context"
	"errors"
	"github.com/peerboot/peerboot/internal/testguard"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// storeKinds opens a fresh store of each kind the collector runs on: SQLite
// and PostgreSQL (which replicas share).
var storeKinds = []struct {
	name string
	open func(t *testing.T) *DB
}{
	{"sqlite", func(t *testing.T) *DB {
		st, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "r.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"postgres", func(t *testing.T) *DB {
		st, err := OpenPostgres(context.Background(), postgresDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
}

// TestNonceSpentWithReport: an attested report's nonce is spent in the report's own
// transaction, so a POST that does not store its report (a replica killed before the
// commit; here, a report refused by the store) leaves the nonce for the node's retry,
// and a second report under a spent nonce stores nothing. SQLite and PostgreSQL.
func TestNonceSpentWithReport(t *testing.T) {
	for _, tc := range storeKinds {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "postgres" {
				testguard.Short(t, "starts PostgreSQL")
			}
			st := tc.open(t)
			defer st.Close()
			as := st
			ctx := context.Background()
			now := t0()
			attested := func(body, nonce string) *fleetdb.StoredReport {
				r := report("node", body, now.Add(time.Minute))
				r.Attestation, r.AKName, r.Nonce, r.NonceBuild, r.NonceExpires = fleetdb.Attested, "ak", nonce, "b1", now.Add(time.Hour)
				return r
			}
			spent := func(nonce string) bool {
				n, err := as.LookupNonce(ctx, nonce, "node")
				if err != nil && err != fleetdb.ErrNotFound {
					t.Fatal(err)
				}
				return err == nil && !n.UsedAt.IsZero()
			}
			if _, err := st.AddReport(ctx, attested(`{"a":1}`, "nA")); err != nil {
				t.Fatal(err)
			}
			if !spent("nA") {
				t.Fatal("the stored report's nonce is unspent")
			}
			// A second body under nA: refused, nothing stored.
			if _, err := st.AddReport(ctx, attested(`{"a":2}`, "nA")); !errors.Is(err, fleetdb.ErrNonceSpent) {
				t.Errorf("a second report under a spent nonce: %v, want ErrNonceSpent", err)
			}
			// A report the store does not take (a duplicate body) spends nothing.
			if _, err := st.AddReport(ctx, attested(`{"a":1}`, "nB")); !errors.Is(err, fleetdb.ErrDuplicate) {
				t.Fatalf("duplicate: %v", err)
			}
			if spent("nB") {
				t.Error("a report not stored spent its nonce: a retry after a crash would be refused")
			}
			if _, err := st.AddReport(ctx, attested(`{"a":3}`, "nB")); err != nil {
				t.Errorf("the retry with nB: %v", err)
			}
			if n, _ := st.Count(ctx); n != 2 {
				t.Errorf("%d reports stored, want 2", n)
			}
		})
	}
}

// TestNonceSpentOnce: of concurrent spenders of one nonce exactly one wins, on
// SQLite and on PostgreSQL (replicas share the database).
func TestNonceSpentOnce(t *testing.T) {
	for _, tc := range storeKinds {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.open(t)
			defer st.Close()
			as := st
			ctx := context.Background()
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			n2 := fleetdb.Nonce{Nonce: "n2", NodeID: "node", Build: "b", PCR11: "00", UsedAt: now.Add(time.Minute), Expires: now.Add(time.Hour)}
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins := 0
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := as.SpendNonce(ctx, n2)
					if err != nil {
						t.Error(err)
					}
					if ok {
						mu.Lock()
						wins++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if wins != 1 {
				t.Errorf("%d spenders won, want 1", wins)
			}
			if ok, _ := as.SpendNonce(ctx, fleetdb.Nonce{Nonce: "n3", NodeID: "node", UsedAt: now.Add(2 * time.Hour), Expires: now.Add(time.Hour)}); ok {
				t.Error("an expired nonce was spent")
			}
			if n, err := as.LookupNonce(ctx, "n2", "node"); err != nil || n.UsedAt.IsZero() {
				t.Errorf("spent nonce reads unspent: %+v %v", n, err)
			}
			if _, err := as.LookupNonce(ctx, "n2", "other"); err != fleetdb.ErrNotFound {
				t.Errorf("another node's spent nonce found: %v", err)
			}
			// Spent nonces are kept until they expire, then dropped by the next spend.
			if ok, _ := as.SpendNonce(ctx, fleetdb.Nonce{Nonce: "n4", NodeID: "node", UsedAt: now.Add(90 * time.Minute), Expires: now.Add(3 * time.Hour)}); !ok {
				t.Error("n4 not spent")
			}
			if _, err := as.LookupNonce(ctx, "n2", "node"); err != fleetdb.ErrNotFound {
				t.Errorf("an expired spent nonce is kept: %v", err)
			}
			// TOFU: the first AK recorded stays.
			a, _ := as.RecordAK(ctx, fleetdb.NodeAK{NodeID: "node", AKName: "first", AKPublic: []byte{1}, RecordedAt: now})
			b, _ := as.RecordAK(ctx, fleetdb.NodeAK{NodeID: "node", AKName: "second", AKPublic: []byte{2}, RecordedAt: now})
			if a == nil || b == nil || a.AKName != "first" || b.AKName != "first" {
				t.Errorf("AK records %+v %+v", a, b)
			}
			for i := range 5 {
				if err := as.AddRefusal(ctx, fleetdb.AttestRefusal{NodeID: "node", At: now, Reason: string(rune('a' + i))}, 3); err != nil {
					t.Fatal(err)
				}
			}
			rs, err := as.Refusals(ctx, "node", 10)
			if err != nil || len(rs) != 3 || rs[0].Reason != "e" {
				t.Errorf("refusals kept %+v %v", rs, err)
			}
		})
	}
}
