package vote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
	"github.com/peerboot/peerboot/rollout"
)

// TestCast: which stored reports vote, on a real store. A vote is recorded
// with its consequences (a PASS of the canary's build promotes it); a report
// that does not vote moves nothing and says why, once, however often it is
// cast.
func TestCast(t *testing.T) {
	const (
		listed, pinned, onRecord, stranger = "52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:03", "52:54:00:00:00:99"
		buildA, buildB                     = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	)
	p := rollout.Policy{Recipe: "default", Channels: []string{"canary", "stable"}, PromoteAfter: 1, Window: 6 * time.Hour}
	inventory := map[string]Listing{
		listed:   {Recipe: "default", Channel: "canary"},
		pinned:   {Recipe: "default", Channel: "canary", MustAttest: "its TPM is pinned in the inventory"},
		onRecord: {Recipe: "default", Channel: "canary"},
	}
	for _, c := range []struct {
		name     string
		node     string
		attested bool
		counted  bool
		why      string
	}{
		{"a listed canary", listed, false, true, ""},
		{"a node not listed by MAC", stranger, false, false, "not in the inventory by MAC"},
		{"a pinned node, unattested", pinned, false, false, "its TPM is pinned"},
		{"a pinned node, attested", pinned, true, true, ""},
		{"a node with an AK on record, unattested", onRecord, false, false, "has AK"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "r.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			for i, b := range []string{buildA, buildB} {
				if _, err := st.SeeBuild(ctx, p, b, now.Add(time.Duration(i)*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.RecordAK(ctx, fleetdb.NodeAK{NodeID: onRecord, AKName: "000bak", AKPublic: []byte{1}, RecordedAt: now}); err != nil {
				t.Fatal(err)
			}
			body := []byte(`{"node":"` + c.node + `"}`)
			sum := sha256.Sum256(body)
			sr := &fleetdb.StoredReport{NodeID: c.node, ReceivedAt: now.Add(time.Hour), Recipe: "default", Build: buildB, Verdict: "pass",
				SHA256: hex.EncodeToString(sum[:]), Remote: "127.0.0.1", Body: body}
			if c.attested {
				// As the attest stage leaves it: the store spends the nonce with the report.
				sr.Attestation, sr.AKName, sr.Nonce, sr.NonceBuild, sr.NonceExpires = fleetdb.Attested, "000bak", "n1", buildB, now.Add(2*time.Hour)
			}
			if sr.ID, err = st.AddReport(ctx, sr); err != nil {
				t.Fatal(err)
			}
			s := New(Config{Store: st})
			l, listed := inventory[c.node]
			for range 2 { // a retry of the report decides nothing new
				s.Cast(ctx, sr, Facts{Recipe: "default", Policy: p, HasPolicy: true, Listing: l, Listed: listed})
			}
			votes, err := st.Votes(ctx, []int64{sr.ID})
			if err != nil {
				t.Fatal(err)
			}
			v, ok := votes[sr.ID]
			if !ok || v.Counted != c.counted || !strings.Contains(v.Reason, c.why) {
				t.Errorf("vote %+v (recorded %t), want counted %t with %q", v, ok, c.counted, c.why)
			}
			status, err := st.RolloutStatus(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if promoted := status.Channels[1].Build == buildB; promoted != c.counted {
				t.Errorf("B promoted to stable: %t, want %t (channels %+v)", promoted, c.counted, status.Channels)
			}
		})
	}
}
