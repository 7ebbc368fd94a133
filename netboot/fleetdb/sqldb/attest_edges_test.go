package sqldb

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// The attestation tables read back what was written, on SQLite: a build's PCR 11
// prediction (the first one stays), refusals (kept per node, all of them with
// keep 0) and their counts, and a stored report's attestation.
func TestAttestTablesRoundTrip(t *testing.T) {
	ctx := context.Background()
	st, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

	if _, _, ok, err := st.Prediction(ctx, "b1"); ok || err != nil {
		t.Fatalf("prediction of an unknown build: found %t, %v", ok, err)
	}
	if err := st.SavePrediction(ctx, "b1", "ab12", "", now); err != nil {
		t.Fatal(err)
	}
	if err := st.SavePrediction(ctx, "b1", "ffff", "later", now); err != nil {
		t.Fatal(err)
	}
	if pcr, why, ok, err := st.Prediction(ctx, "b1"); pcr != "ab12" || why != "" || !ok || err != nil {
		t.Fatalf("prediction of b1: %q %q %t %v, want the first one saved", pcr, why, ok, err)
	}

	const a, b = "52:54:00:00:00:01", "52:54:00:00:00:02"
	for i := range 3 {
		if err := st.AddRefusal(ctx, fleetdb.AttestRefusal{NodeID: a, At: now.Add(time.Duration(i) * time.Second), Reason: "r", ReportSHA256: "x", Remote: "127.0.0.1"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.AddRefusal(ctx, fleetdb.AttestRefusal{NodeID: b, At: now, Reason: "r", ReportSHA256: "x", Remote: "127.0.0.1"}, 2); err != nil {
		t.Fatal(err)
	}
	counts, err := st.RefusalCounts(ctx)
	if err != nil || counts[a] != 3 || counts[b] != 1 || len(counts) != 2 {
		t.Fatalf("refusal counts %v (%v), want %s 3 (keep 0 keeps all), %s 1", counts, err, a, b)
	}

	body := []byte(`{}`)
	sr := &fleetdb.StoredReport{NodeID: a, ReceivedAt: now, Recipe: "default", Build: "b1", Verdict: "pass",
		SHA256: strings.Repeat("0", 64), Remote: "127.0.0.1", Body: body,
		Attestation: fleetdb.Attested, AKName: "000bak", Nonce: "n1", NonceBuild: "b1", NonceExpires: now.Add(time.Hour)}
	id, err := st.AddReport(ctx, sr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Attestations(ctx, []int64{id})
	if err != nil || got[id].Status != fleetdb.Attested || got[id].AKName != "000bak" || got[id].Nonce != "n1" {
		t.Fatalf("attestation of report %d: %+v (%v), want attested by 000bak with n1", id, got, err)
	}
}
