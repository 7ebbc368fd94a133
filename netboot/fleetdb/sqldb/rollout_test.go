package sqldb

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/testguard"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/rollout"
)

func TestRolloutStoreSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reports.db")
	testRolloutStore(t, func() (*DB, error) { return Open(context.Background(), path) })
}

func TestRolloutStorePostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	testRolloutStore(t, func() (*DB, error) { return Open(context.Background(), dsn) })
}

// Two stores over one database, as two replicas are: concurrent PASS verdicts for
// one build make exactly one promotion.
func TestRolloutConcurrentSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reports.db")
	testRolloutConcurrent(t, func() (*DB, error) { return Open(context.Background(), path) })
}

func TestRolloutConcurrentPostgres(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	testRolloutConcurrent(t, func() (*DB, error) { return Open(context.Background(), dsn) })
}

func testPolicy() rollout.Policy {
	return rollout.Policy{Recipe: "default", Channels: []string{"canary", "stable"}, PromoteAfter: 2, Window: 6 * time.Hour}
}

func rv(node, ch, build, v string, at time.Time) fleetdb.RolloutVerdict {
	return fleetdb.RolloutVerdict{Recipe: "default", Build: build, Node: node, Channel: ch, Verdict: v,
		SHA256: fmt.Sprintf("%s-%s-%s-%d", node, build, v, at.UnixNano()), At: at}
}

func kinds(evs []rollout.Event) string {
	s := ""
	for _, e := range evs {
		s += string(e.Kind) + ":" + e.From + ">" + e.To + " "
	}
	return s
}

func testRolloutStore(t *testing.T, open func() (*DB, error)) {
	ctx := context.Background()
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := fleetdb.RolloutStore(st)
	p := testPolicy()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	chans := func() string {
		s, err := rs.RolloutStatus(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return s.Channels[0].Build + "," + s.Channels[1].Build
	}
	must := func(o *fleetdb.VerdictOutcome, err error) *fleetdb.VerdictOutcome {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return o
	}

	if evs, err := rs.SeeBuild(ctx, p, "A", at(0)); err != nil || kinds(evs) != "enter:>canary enter:>stable " {
		t.Fatalf("bootstrap: %s %v", kinds(evs), err)
	}
	if evs, err := rs.SeeBuild(ctx, p, "A", at(1)); err != nil || len(evs) != 0 {
		t.Fatalf("seen again: %s %v", kinds(evs), err)
	}
	if evs, err := rs.SeeBuild(ctx, p, "B", at(2)); err != nil || kinds(evs) != "enter:>canary " || chans() != "B,A" {
		t.Fatalf("second build: %s %v %s", kinds(evs), err, chans())
	}
	// Two canary nodes pass A on stable... no: n1 and n2 are canary nodes; n9 is stable's.
	must(rs.RecordVerdict(ctx, p, rv("n1", "stable", "A", "pass", at(1))))
	must(rs.RecordVerdict(ctx, p, rv("n2", "stable", "A", "pass", at(1))))
	v1 := rv("n1", "canary", "B", "pass", at(10))
	if o := must(rs.RecordVerdict(ctx, p, v1)); o.Replay || len(o.Events) != 0 {
		t.Fatalf("one pass: %+v", o)
	}
	if o := must(rs.RecordVerdict(ctx, p, v1)); !o.Replay {
		t.Fatalf("a replayed report is not a replay: %+v", o)
	}
	if o := must(rs.RecordVerdict(ctx, p, rv("n2", "canary", "B", "pass", at(11)))); kinds(o.Events) != "promote:canary>stable " || o.Events[0].Reason != "2 passes" {
		t.Fatalf("second pass: %s", kinds(o.Events))
	}
	if chans() != "B,B" {
		t.Fatalf("after promotion: %s", chans())
	}

	// C fails on n1 (B passed on it before): the rollout halts and n1 is held on B.
	rs.SeeBuild(ctx, p, "C", at(20))
	o := must(rs.RecordVerdict(ctx, p, rv("n1", "canary", "C", "fail", at(21))))
	if kinds(o.Events) != "halt:> hold:> " || o.Events[1].Build != "B" {
		t.Fatalf("fail: %s %+v", kinds(o.Events), o.Events)
	}
	c, err := rs.ServeBuild(ctx, p, "canary", "n1")
	if err != nil || c.Build != "B" || c.ChannelBuild != "C" || c.Hold == nil || c.Hold.Failed != "C" {
		t.Fatalf("held node: %+v %v", c, err)
	}
	if c, _ := rs.ServeBuild(ctx, p, "canary", "n2"); c.Build != "C" || c.Hold != nil {
		t.Fatalf("other canary node: %+v", c)
	}
	if c, _ := rs.ServeBuild(ctx, p, "", "n9"); c.Build != "B" || c.Channel != "stable" {
		t.Fatalf("default channel: %+v", c)
	}
	// Halted: passes do not promote.
	must(rs.RecordVerdict(ctx, p, rv("n2", "canary", "C", "pass", at(22))))
	must(rs.RecordVerdict(ctx, p, rv("n3", "canary", "C", "pass", at(23))))
	s, err := rs.RolloutStatus(ctx, p)
	if err != nil || !s.Halted || s.HaltReason != "FAIL from node n1 on build C" || len(s.HeldBack) != 1 || s.HeldBack[0].Node != "n1" || chans() != "C,B" {
		t.Fatalf("halted status: %+v %v", s, err)
	}
	if len(s.Builds) != 3 || s.Builds[2].Build != "C" || s.Builds[2].Pass != 2 || s.Builds[2].Fail != 1 || s.Builds[1].Pass != 2 {
		t.Fatalf("builds: %+v", s.Builds)
	}
	if _, err := rs.Halt(ctx, p, "", at(24)); !errors.Is(err, fleetdb.ErrRolloutState) {
		t.Fatalf("halting a halted rollout: %v", err)
	}
	if _, err := rs.Resume(ctx, p, at(25)); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Resume(ctx, p, at(25)); !errors.Is(err, fleetdb.ErrRolloutState) {
		t.Fatalf("resuming a running rollout: %v", err)
	}
	if _, err := rs.Promote(ctx, p, "Z", at(26)); !errors.Is(err, fleetdb.ErrNotFound) {
		t.Fatalf("promoting an unknown build: %v", err)
	}
	if ev, err := rs.Promote(ctx, p, "", at(26)); err != nil || ev.Build != "C" || ev.To != "stable" || ev.Reason != "manual" || chans() != "C,C" {
		t.Fatalf("manual promotion: %+v %v %s", ev, err, chans())
	}
	if _, err := rs.Promote(ctx, p, "C", at(27)); !errors.Is(err, fleetdb.ErrRolloutState) {
		t.Fatalf("promoting past the last channel: %v", err)
	}

	// The operator clears n1; a hold also ends when a newer build passes.
	if _, err := rs.ClearHold(ctx, "n1", at(30)); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.ClearHold(ctx, "n1", at(30)); !errors.Is(err, fleetdb.ErrNotFound) {
		t.Fatalf("clearing twice: %v", err)
	}
	rs.SeeBuild(ctx, p, "D", at(40))
	o = must(rs.RecordVerdict(ctx, p, rv("n2", "canary", "D", "fail", at(41))))
	if kinds(o.Events) != "halt:> hold:> " || o.Events[1].Build != "C" {
		t.Fatalf("n2 fails D: %s %+v", kinds(o.Events), o.Events)
	}
	if o := must(rs.RecordVerdict(ctx, p, rv("n2", "canary", "C", "pass", at(42)))); len(o.Events) != 0 {
		t.Fatalf("passing on the rollback build: %s", kinds(o.Events))
	}
	rs.SeeBuild(ctx, p, "E", at(50))
	if o := must(rs.RecordVerdict(ctx, p, rv("n2", "canary", "E", "pass", at(51)))); kinds(o.Events) != "clear:> " {
		t.Fatalf("a newer build passing: %s", kinds(o.Events))
	}

	if err := st.RecordBoot(ctx, fleetdb.Boot{NodeID: "n2", Recipe: "default", Build: "E", At: at(52)}); err != nil {
		t.Fatal(err)
	}
	if nr, err := rs.NodeRollout(ctx, "n2"); err != nil || nr.LastServedBuild != "E" || nr.HeldBack {
		t.Fatalf("node rollout: %+v %v", nr, err)
	}

	// The state is in the database: a second handle (a restart) sees it.
	st2, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	s2, err := st2.RolloutStatus(ctx, p)
	if err != nil || !s2.Halted || len(s2.Builds) != 5 || s2.Channels[1].Build != "C" {
		t.Fatalf("after reopening: %+v %v", s2, err)
	}
	promotions := 0
	for _, e := range s2.Events {
		if e.Kind == rollout.Promote {
			promotions++
		}
	}
	if promotions != 2 {
		t.Fatalf("%d promotions recorded, want 2: %+v", promotions, s2.Events)
	}
}

func testRolloutConcurrent(t *testing.T, open func() (*DB, error)) {
	ctx := context.Background()
	var stores [2]*DB
	for i := range stores {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	p := testPolicy()
	p.PromoteAfter = 5
	t0 := time.Now()
	a, b := fleetdb.RolloutStore(stores[0]), fleetdb.RolloutStore(stores[1])
	if _, err := a.SeeBuild(ctx, p, "A", t0); err != nil {
		t.Fatal(err)
	}
	// Both replicas see B at once: it enters canary once.
	var wg sync.WaitGroup
	for _, rs := range []fleetdb.RolloutStore{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rs.SeeBuild(ctx, p, "B", t0.Add(time.Second)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := []fleetdb.RolloutStore{a, b}[i%2]
			_, err := rs.RecordVerdict(ctx, p, rv(fmt.Sprintf("n%02d", i), "canary", "B", "pass", t0.Add(time.Duration(2+i)*time.Second)))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := a.RolloutStatus(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	count := map[rollout.EventKind]int{}
	for _, e := range s.Events {
		count[e.Kind]++
	}
	if count[rollout.Promote] != 1 || count[rollout.Enter] != 3 || s.Channels[1].Build != "B" || s.Builds[1].Pass != 20 {
		t.Fatalf("want one promotion, three entries, B on stable, 20 passes; got %v %+v %+v", count, s.Channels, s.Builds)
	}
}
