package sqldb

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/rollout"
)

// A verdict that carries its stored report's id (the vote stage's) counts as
// one without: two canary passes promote, and a retry is a replay.
func TestVerdictWithReportIDCounts(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := fleetdb.RolloutStore(st)
	p := testPolicy()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i, b := range []string{"A", "B"} {
		if _, err := rs.SeeBuild(ctx, p, b, t0.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var last *fleetdb.VerdictOutcome
	for i, node := range []string{"n1", "n2"} {
		v := rv(node, "canary", "B", "pass", t0.Add(time.Duration(10+i)*time.Minute))
		id, err := st.AddReport(ctx, report(node, fmt.Sprintf(`{"n":%d}`, i), v.At))
		if err != nil {
			t.Fatal(err)
		}
		v.ReportID = id
		if last, err = rs.RecordVerdict(ctx, p, v); err != nil {
			t.Fatal(err)
		}
		if last.Replay {
			t.Fatalf("%s's first verdict taken for a replay", node)
		}
		if i == 1 {
			if o, err := rs.RecordVerdict(ctx, p, v); err != nil || !o.Replay {
				t.Fatalf("a retry: %+v %v, want a replay", o, err)
			}
		}
	}
	if kinds(last.Events) != "promote:canary>stable " {
		t.Fatalf("two canary passes with report ids: events %q, want the promotion", kinds(last.Events))
	}
}

// What the store writes for people to read: a hold's reason says which build
// the node keeps or that none passed on it before, a halt without a reason is
// "manual", and the status lists each build's channels ([] for none).
func TestRolloutReasonsAndStatus(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := fleetdb.RolloutStore(st)
	p := testPolicy()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	for i, b := range []string{"A", "B", "C"} {
		if _, err := rs.SeeBuild(ctx, p, b, at(i)); err != nil {
			t.Fatal(err)
		}
	}
	reason := func(v fleetdb.RolloutVerdict) string {
		t.Helper()
		o, err := rs.RecordVerdict(ctx, p, v)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range o.Events {
			if e.Kind == rollout.Held {
				return e.Reason
			}
		}
		return ""
	}
	if r := reason(rv("n1", "canary", "C", "fail", at(10))); r != "FAIL on build C: no build passed on it before, served its channel's" {
		t.Errorf("a first fail: hold reason %q", r)
	}
	reason(rv("n2", "stable", "A", "pass", at(11)))
	if r := reason(rv("n2", "stable", "C", "fail", at(12))); r != "FAIL on build C: served A" {
		t.Errorf("a fail after a pass on A: hold reason %q", r)
	}
	s, err := rs.RolloutStatus(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, b := range s.Builds {
		if b.Channels == nil {
			t.Errorf("build %s: channels nil, want a list", b.Build)
		}
		got[b.Build] = b.Channels
	}
	if fmt.Sprint(got) != "map[A:[stable] B:[] C:[canary]]" {
		t.Errorf("the builds' channels: %v", got)
	}
	// Every event of a verdict is in the log, not only its first.
	holds := 0
	for _, e := range s.Events {
		if e.Kind == rollout.Held {
			holds++
		}
	}
	if holds != 2 {
		t.Errorf("the status's events: %d holds, want 2 (n1 and n2): %+v", holds, s.Events)
	}
	// A manual clear says what it cleared, and a second one finds nothing.
	ev, err := rs.ClearHold(ctx, "n2", at(15))
	if err != nil || ev.Kind != rollout.Cleared || ev.Node != "n2" || ev.Build != "C" || ev.Reason != "manual" {
		t.Errorf("ClearHold(n2): %+v %v, want the cleared hold of n2 on C", ev, err)
	}
	if _, err := rs.ClearHold(ctx, "n2", at(16)); !errors.Is(err, fleetdb.ErrNotFound) {
		t.Errorf("ClearHold(n2) again: %v, want ErrNotFound", err)
	}
	if s.Halted { // the canary's fail halted it
		if _, err := rs.Resume(ctx, p, at(19)); err != nil {
			t.Fatal(err)
		}
	}
	for in, want := range map[string]string{"": "manual", "bad firmware": "bad firmware"} {
		ev, err := rs.Halt(ctx, p, in, at(20))
		if err != nil || ev.Reason != want {
			t.Errorf("Halt(%q): %+v %v, want the reason %q", in, ev, err, want)
		}
		if _, err := rs.Resume(ctx, p, at(21)); err != nil {
			t.Fatal(err)
		}
	}
}
