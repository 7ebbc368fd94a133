package attestation

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
)

// TestVerifyRefusals: each check before the quote's refuses with its own
// Kind, which the HTTP layer answers (400, 403, 409), on a real store. The
// quote itself is attest's to test; the swtpm runs are netboot's.
func TestVerifyRefusals(t *testing.T) {
	ctx := context.Background()
	st, err := sqldb.OpenSQLite(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	predict := func([]byte) ([32]byte, error) { return [32]byte{1}, nil }
	s := New(Config{Secret: []byte("secret"), Store: st, PredictPCR11: predict, Now: clock})
	const node, other = "52:54:00:00:00:01", "52:54:00:00:00:02"
	withUKI := Build{ID: "0123456789abcdef", Recipe: "r", UKI: func() ([]byte, error) { return []byte("uki"), nil }}
	noUKI := Build{ID: "fedcba9876543210", Recipe: "r"}
	issue := func(node string, b Build) string {
		n, _, err := s.Issue(ctx, node, b)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	good, noPred, others, spent := issue(node, withUKI), issue(node, noUKI), issue(other, withUKI), issue(node, withUKI)
	if ok, err := st.SpendNonce(ctx, fleetdb.Nonce{Nonce: spent, NodeID: node, UsedAt: now, Expires: now.Add(time.Hour)}); !ok || err != nil {
		t.Fatalf("spending: %v %v", ok, err)
	}
	expired := ""
	func() {
		was := now
		now = now.Add(-3 * time.Hour)
		defer func() { now = was }()
		expired = issue(node, withUKI)
	}()
	evidence := func(nonce string) string {
		pcr := strings.Repeat("00", 32)
		h, err := attest.Encode(&attest.Evidence{Version: attest.Version, Nonce: nonce, ReportSHA256: strings.Repeat("ab", 32), Phase: attest.PhaseEnterInitrd,
			PCRs: map[string]string{"4": pcr, "7": pcr, "11": pcr}, Quote: []byte{1}, Signature: []byte{1}, AKPublic: []byte{1}, EKPublic: []byte{1}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	for _, tc := range []struct {
		name, evidence, build string
		kind                  Kind // 0: let through
		want                  string
	}{
		{"none", "", "", 0, ""},
		{"not base64", "!!", "", Malformed, "malformed evidence"},
		{"a nonce of no server", evidence(strings.Repeat("x", 40)), "", Forbidden, "nonce unknown or expired"},
		{"another node's nonce", evidence(others), "", Forbidden, "was not issued to node " + node},
		{"expired", evidence(expired), "", Forbidden, "it expired at"},
		{"spent", evidence(spent), "", Replayed, "nonce already used"},
		{"another build's nonce", evidence(good), noUKI.ID, Forbidden, "the token is for build " + noUKI.ID},
		{"no prediction", evidence(noPred), "", Forbidden, "no PCR 11 prediction for build " + noUKI.ID},
		{"a quote that does not verify", evidence(good), withUKI.ID, Forbidden, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := s.Verify(ctx, Report{Node: node, Build: tc.build, Evidence: tc.evidence, Body: []byte("{}"), SHA256: strings.Repeat("ab", 32)})
			var ref *Refusal
			switch {
			case tc.kind == 0:
				if err != nil || res.Status != fleetdb.Unattested {
					t.Fatalf("got %+v %v, want unattested", res, err)
				}
			case !errors.As(err, &ref):
				t.Fatalf("got %+v %v, want a refusal", res, err)
			case ref.Kind != tc.kind || !strings.Contains(err.Error(), tc.want):
				t.Errorf("refusal %d %q, want %d with %q", ref.Kind, err, tc.kind, tc.want)
			}
		})
	}
	// A refusal decides nothing: no AK was recorded for the node.
	if ak, err := st.NodeAK(ctx, node); err != nil || ak != nil {
		t.Errorf("AK after refusals: %+v %v", ak, err)
	}
}
