package vote

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/rollout"
)

const (
	edgeNode  = "52:54:00:00:00:02"
	edgeBuild = "bbbbbbbbbbbbbbbb"
)

// edgeStore is a real store with builds A and B seen by the canary policy;
// the stage logs into the returned buffer.
func edgeStore(t *testing.T) (*sqldb.DB, rollout.Policy, *Stage, *bytes.Buffer, time.Time) {
	t.Helper()
	ctx := context.Background()
	st, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p := rollout.Policy{Recipe: "default", Channels: []string{"canary", "stable"}, PromoteAfter: 1, Window: 6 * time.Hour}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, b := range []string{"aaaaaaaaaaaaaaaa", edgeBuild} {
		if _, err := st.SeeBuild(ctx, p, b, now.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var log bytes.Buffer
	return st, p, New(Config{Store: st, Log: slog.New(slog.NewTextHandler(&log, nil))}), &log, now
}

func promoted(t *testing.T, st *sqldb.DB, p rollout.Policy) bool {
	t.Helper()
	status, err := st.RolloutStatus(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return status.Channels[1].Build == edgeBuild
}

var pinnedListing = Listing{Recipe: "default", Channel: "canary", MustAttest: "its TPM is pinned in the inventory"}

// A report without a build, or a recipe without a rollout policy, is no
// vote: nothing is recorded, nothing moves.
func TestCastNeedsBuildAndPolicy(t *testing.T) {
	for _, c := range []struct {
		name      string
		build     string
		hasPolicy bool
	}{
		{"no build", "", true},
		{"no policy", edgeBuild, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st, p, s, log, now := edgeStore(t)
			sr := &fleetdb.StoredReport{NodeID: edgeNode, ReceivedAt: now.Add(time.Hour), Recipe: "default", Build: c.build, Verdict: "pass",
				SHA256: strings.Repeat("0", 64), Remote: "127.0.0.1", Body: []byte(`{}`)}
			var err error
			if sr.ID, err = st.AddReport(ctx, sr); err != nil {
				t.Fatal(err)
			}
			s.Cast(ctx, sr, Facts{Recipe: "default", Policy: p, HasPolicy: c.hasPolicy, Listing: Listing{Recipe: "default", Channel: "canary"}, Listed: true})
			if votes, err := st.Votes(ctx, []int64{sr.ID}); err != nil || len(votes) != 0 {
				t.Errorf("votes %+v (%v), want none recorded", votes, err)
			}
			if promoted(t, st, p) {
				t.Error("the build was promoted by a report that is no vote")
			}
			if log.Len() != 0 {
				t.Errorf("logged %q, want nothing", log)
			}
		})
	}
}

// A report the store has not given an id (ID 0) is judged by its own
// attestation (there is nothing to read back) and records no vote row.
func TestCastUnstoredReport(t *testing.T) {
	for _, c := range []struct {
		name     string
		status   string
		promotes bool
	}{
		{"attested", fleetdb.Attested, true},
		{"unattested", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st, p, s, log, now := edgeStore(t)
			sr := &fleetdb.StoredReport{NodeID: edgeNode, ReceivedAt: now.Add(time.Hour), Recipe: "default", Build: edgeBuild, Verdict: "pass",
				SHA256: strings.Repeat("0", 64), Attestation: c.status}
			s.Cast(ctx, sr, Facts{Recipe: "default", Policy: p, HasPolicy: true, Listing: pinnedListing, Listed: true})
			if got := promoted(t, st, p); got != c.promotes {
				t.Errorf("promoted %t, want %t (log %s)", got, c.promotes, log)
			}
			if votes, err := st.Votes(ctx, []int64{0}); err != nil || len(votes) != 0 {
				t.Errorf("votes of report 0: %+v (%v), want none", votes, err)
			}
			if strings.Contains(log.String(), "level=ERROR") {
				t.Errorf("logged an error: %s", log)
			}
		})
	}
}

// A retry carries no attestation of its own: the stage reads the stored
// report's back, so a pinned node's attested report still counts.
func TestCastRetryReadsStoredAttestation(t *testing.T) {
	ctx := context.Background()
	st, p, s, log, now := edgeStore(t)
	sr := &fleetdb.StoredReport{NodeID: edgeNode, ReceivedAt: now.Add(time.Hour), Recipe: "default", Build: edgeBuild, Verdict: "pass",
		SHA256: strings.Repeat("0", 64), Remote: "127.0.0.1", Body: []byte(`{}`),
		Attestation: fleetdb.Attested, AKName: "000bak", Nonce: "n1", NonceBuild: edgeBuild, NonceExpires: now.Add(2 * time.Hour)}
	id, err := st.AddReport(ctx, sr)
	if err != nil {
		t.Fatal(err)
	}
	retry := &fleetdb.StoredReport{ID: id, NodeID: edgeNode, ReceivedAt: sr.ReceivedAt, Recipe: "default", Build: edgeBuild, Verdict: "pass", SHA256: sr.SHA256}
	s.Cast(ctx, retry, Facts{Recipe: "default", Policy: p, HasPolicy: true, Listing: pinnedListing, Listed: true})
	if !promoted(t, st, p) {
		t.Errorf("the stored attested report did not count on its retry (log %s)", log)
	}
}
