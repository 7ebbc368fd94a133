package netboot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// storeKinds opens a fresh store of each kind the collector runs on: SQLite
// and PostgreSQL (which replicas share).
var storeKinds = []struct {
	name string
	open func(t *testing.T) Store
}{
	{"sqlite", func(t *testing.T) Store {
		st, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "r.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}},
	{"postgres", func(t *testing.T) Store {
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
			if tc.name == "postgres" && testing.Short() {
				t.Skip("starts PostgreSQL")
			}
			st := tc.open(t)
			defer st.Close()
			as := st.(AttestStore)
			ctx := context.Background()
			now := t0()
			attested := func(body, nonce string) *StoredReport {
				r := report("node", body, now.Add(time.Minute))
				r.Attestation, r.AKName, r.Nonce, r.NonceBuild, r.NonceExpires = Attested, "ak", nonce, "b1", now.Add(time.Hour)
				return r
			}
			spent := func(nonce string) bool {
				n, err := as.LookupNonce(ctx, nonce, "node")
				if err != nil && err != ErrNotFound {
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
			if _, err := st.AddReport(ctx, attested(`{"a":2}`, "nA")); !errors.Is(err, ErrNonceSpent) {
				t.Errorf("a second report under a spent nonce: %v, want ErrNonceSpent", err)
			}
			// A report the store does not take (a duplicate body) spends nothing.
			if _, err := st.AddReport(ctx, attested(`{"a":1}`, "nB")); !errors.Is(err, ErrDuplicate) {
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

// TestAttestedRaceOneNonce: two different reports quoted with one nonce, POSTed at
// once: both pass the checks, one is stored, the other refused 409 when its
// transaction finds the nonce spent.
func TestAttestedRaceOneNonce(t *testing.T) {
	e := newEnv(t, Options{PredictPCR11: stubPCR11, RateBurst: 100, SourceBurst: 100, EnrollAll: time.Hour})
	const mac = "52:54:00:aa:00:07"
	b := e.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(b.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tok := e.srv.Token(b.ID, mac)
	tp := swtpmtest.Start(t)
	nonce := e.bootNonce(t, mac)
	measureBoot(t, tp, uki)
	var bodies [2][]byte
	var hdrs [2]string
	for i := range bodies {
		bodies[i] = reportBody(t, Epyc4GPU, 10+i, false)
		_, hdrs[i] = quoted(t, tp, nonce, bodies[i])
	}
	var wg sync.WaitGroup
	var codes [2]int
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := e.postAttested(t, "/reports?node="+mac, tok, hdrs[i], bodies[i])
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	if !(codes[0] == 201 && codes[1] == 409 || codes[0] == 409 && codes[1] == 201) {
		t.Errorf("answers %v, want one 201 and one 409", codes)
	}
	if n, _ := e.store.Count(context.Background()); n != 1 {
		t.Errorf("%d reports stored, want 1", n)
	}
}
