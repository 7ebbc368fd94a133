package attestation

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
)

// raceStore is a real store whose NodeAK answers "none yet" once, as when
// another replica records the node's AK between this POST's read and write.
type raceStore struct {
	*sqldb.DB
	hide bool
}

func (r *raceStore) NodeAK(ctx context.Context, node string) (*fleetdb.NodeAK, error) {
	if r.hide {
		return nil, nil
	}
	return r.DB.NodeAK(ctx, node)
}

// TestTrustAK: which AK a quote may carry, on a real store, and what each
// decision leaves behind: the AK on record, a conflict listed, the node's
// enrollment window closed after its one AK, nothing logged as an error.
func TestTrustAK(t *testing.T) {
	const node, akA, akB = "52:54:00:00:00:01", "000baaaa", "000bbbbb"
	for _, c := range []struct {
		name      string
		pinned    string // the inventory's ak_name
		recorded  string // on record before
		window    bool   // the node's own enrollment window open
		race      string // recorded by "another replica" after the read
		ak        string // the quote's AK
		refused   bool
		after     string // the AK on record after
		conflicts int
		windowOut bool // the window still open after
	}{
		{name: "no record, no window", ak: akA, refused: true, conflicts: 1},
		{name: "window: first AK recorded, window closed", window: true, ak: akA, after: akA},
		{name: "the AK on record", recorded: akA, ak: akA, after: akA},
		{name: "another AK than on record", recorded: akA, ak: akB, refused: true, after: akA, conflicts: 1},
		{name: "pinned, window stays for later", pinned: akA, window: true, ak: akA, after: akA, windowOut: true},
		{name: "window, another replica recorded first", window: true, race: akB, ak: akA, refused: true, after: akB, conflicts: 1, windowOut: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "r.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			st := &raceStore{DB: db}
			for _, ak := range []string{c.recorded, c.race} {
				if ak != "" {
					if _, err := db.RecordAK(ctx, fleetdb.NodeAK{NodeID: node, AKName: ak, AKPublic: []byte{1}, RecordedAt: now}); err != nil {
						t.Fatal(err)
					}
				}
			}
			st.hide = c.race != ""
			if c.window {
				if err := db.OpenEnrollment(ctx, node, now, now.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			var log bytes.Buffer
			s := New(Config{Secret: []byte("secret"), Store: st, Now: func() time.Time { return now }, Log: slog.New(slog.NewTextHandler(&log, nil))})
			err = s.trustAK(ctx, Report{Node: node, Remote: "127.0.0.1", PinnedAK: c.pinned}, &attest.Result{AKName: c.ak, EKName: "000beeee"}, []byte{2})
			var ref *Refusal
			if c.refused != (err != nil) || (err != nil && (!errors.As(err, &ref) || ref.Kind != Forbidden)) {
				t.Fatalf("trustAK: %v, want refused (Forbidden) %t", err, c.refused)
			}
			got, err := db.NodeAK(ctx, node)
			if err != nil {
				t.Fatal(err)
			}
			if name := ""; got != nil || c.after != "" {
				if got != nil {
					name = got.AKName
				}
				if name != c.after {
					t.Errorf("AK on record %q, want %q", name, c.after)
				}
			}
			cs, err := db.AKConflicts(ctx, node)
			if err != nil || len(cs) != c.conflicts {
				t.Errorf("conflicts %+v (%v), want %d", cs, err, c.conflicts)
			}
			if open, err := db.Enrolling(ctx, node, now); err != nil || open != c.windowOut {
				t.Errorf("window open after: %t (%v), want %t", open, err, c.windowOut)
			}
			if strings.Contains(log.String(), "level=ERROR") {
				t.Errorf("logged an error: %s", log.String())
			}
		})
	}
}
