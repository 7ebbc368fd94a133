package netboot

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/peerboot/peerboot/internal/swtpmtest"
	"github.com/peerboot/peerboot/netboot/attestation"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// TestNonceNotEvicted: issue 28's item 5. Anonymous script fetches for a node
// (anyone can make them) used to replace its outstanding nonces, 16 kept: the
// node's genuine quoted FAIL was then refused 403 and the failing build looked
// healthy. A nonce is now an HMAC checked without a row: after 100 fetches by a
// stranger the node's report under the nonce of its own boot is stored attested,
// and a nonce altered in one digit, or made for another node, is refused.
func TestNonceNotEvicted(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, Options{PredictPCR11: stubPCR11, Now: clk.now, RateBurst: 100, SourceBurst: 100, EnrollAll: time.Hour})
	const mac = "52:54:00:aa:00:05"
	b := e.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(b.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tp := swtpmtest.Start(t)
	nonce := e.bootNonce(t, mac)
	for range 100 {
		e.bootNonce(t, mac) // the stranger
	}
	measureBoot(t, tp, uki)
	fail := reportBody(t, Xeon8GPU, 1, true)
	_, hdr := quoted(t, tp, nonce, fail)
	resp, out := e.postAttested(t, "/reports?node="+mac, e.srv.Token(b.ID, mac), hdr, fail)
	if resp.StatusCode != 201 || !strings.Contains(out, `"attestation":"attested"`) || !strings.Contains(out, `"verdict":"fail"`) {
		t.Fatalf("the genuine FAIL after 100 anonymous fetches: %d %s", resp.StatusCode, out)
	}
	// The nonce is bound to its node and build by the HMAC.
	other := e.bootNonce(t, "52:54:00:aa:00:06")
	for name, n := range map[string]string{"another node's": other, "an altered": nonce[:20] + flip(nonce[20]) + nonce[21:], "a short": nonce[:32]} {
		if _, _, ok := e.srv.openNonce(n, mac); ok {
			t.Errorf("%s nonce opens for %s", name, mac)
		}
	}
	if build, expires, ok := e.srv.openNonce(nonce, mac); !ok || build != b.ID || !expires.Equal(clk.now().Add(attestation.DefaultNonceTTL).Truncate(time.Second)) {
		t.Errorf("the node's nonce opens as %s %s %t", build, expires, ok)
	}
}

func flip(c byte) string {
	if c == '0' {
		return "1"
	}
	return "0"
}

// TestNoOrphanRows: issue 28's item 7. Nodes known only from script fetches are
// pruned (--keep-unreported); nothing of theirs may stay behind. Before: every
// fetch left a nonce row that outlived its node.
func TestNoOrphanRows(t *testing.T) {
	e := newEnv(t, Options{PredictPCR11: stubPCR11, Retention: fleetdb.Retention{UnreportedNodes: 5}})
	as := e.store
	ctx := context.Background()
	for i := range 40 {
		mac := fmt.Sprintf("02:00:00:00:01:%02x", i)
		e.bootNonce(t, mac)
		if err := as.AddRefusal(ctx, fleetdb.AttestRefusal{NodeID: mac, At: time.Now(), Reason: "test"}, 10); err != nil {
			t.Fatal(err)
		}
	}
	// Read beside the server's store, as an operator's sqlite3 would.
	db, err := sql.Open("sqlite", e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"attest_nonces", "attest_refusals", "ak_conflicts"} {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+` x WHERE NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = x.node_id)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d rows of nodes no longer known", table, n)
		}
	}
}
