package sqldb

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
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
