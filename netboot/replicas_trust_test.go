package netboot

import (
	"context"
	"encoding/json"
	"github.com/peerboot/peerboot/internal/testguard"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/internal/swtpmtest"
	"github.com/peerboot/peerboot/netboot/fleetdb/sqldb"
)

// TestReplicasTrust: two servers over one PostgreSQL database, the way serve's
// replicas run. The nonce and AK rules hold across them (issue 28):
//
//   - a nonce from one replica's script is spent at the other;
//   - two reports quoted with one nonce, POSTed at once, one to each replica: one
//     is stored, the other refused 409, once;
//   - an enrollment window opened at one lets the other record the AK; another
//     TPM's quote at either is a conflict that both show; an ak-reset at one is
//     seen by the other.
func TestReplicasTrust(t *testing.T) {
	testguard.Short(t, "starts PostgreSQL")
	dsn := postgresDSN(t)
	dir := filepath.Join(t.TempDir(), "default")
	fakeBuild(t, dir, "default", 1<<20)
	var reps [2]*testEnv
	for i := range reps {
		bs, err := LoadBuilds([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		st, err := sqldb.OpenPostgres(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		logs := &syncBuffer{}
		s, err := New(context.Background(), Options{Builds: bs, Store: st, PredictPCR11: stubPCR11, OperatorToken: testOperator,
			RateBurst: 100, SourceBurst: 100, Log: slog.New(slog.NewTextHandler(logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		reps[i] = &testEnv{srv: s, http: hs, store: st, log: logs}
	}
	a, b := reps[0], reps[1]
	const mac = "52:54:00:aa:00:0f"
	build := a.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(build.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tok := a.srv.Token(build.ID, mac)
	if tok != b.srv.Token(build.ID, mac) {
		t.Fatal("the replicas do not share the token secret")
	}
	tp, other := swtpmtest.Start(t), swtpmtest.Start(t)
	path := "/reports?node=" + mac

	// Enrollment opened at A; the AK recorded through B, under a nonce from A.
	if resp, body := a.post(t, "/api/attest/enroll", testOperator, []byte(`{"nodes": ["`+mac+`"], "for": "1h"}`)); resp.StatusCode != 200 {
		t.Fatalf("enroll at A: %d %s", resp.StatusCode, body)
	}
	nonce := a.bootNonce(t, mac)
	measureBoot(t, tp, uki)
	first := reportBody(t, Epyc4GPU, 0, false)
	_, hdr := quoted(t, tp, nonce, first)
	if resp, out := b.postAttested(t, path, tok, hdr, first); resp.StatusCode != 201 || !strings.Contains(out, `"attestation":"attested"`) {
		t.Fatalf("A's nonce spent at B: %d %s", resp.StatusCode, out)
	}
	// The same nonce, another body, at A: spent.
	again := reportBody(t, Epyc4GPU, 1, false)
	_, hdrAgain := quoted(t, tp, nonce, again)
	if resp, out := a.postAttested(t, path, tok, hdrAgain, again); resp.StatusCode != 409 || !strings.Contains(out, "nonce already used") {
		t.Errorf("B's spent nonce at A: %d %s", resp.StatusCode, out)
	}

	// One nonce (from B), two bodies, one POST to each replica at once, several rounds.
	for round := range 5 {
		n := b.bootNonce(t, mac)
		tp.Reboot()
		measureBoot(t, tp, uki)
		var bodies [2][]byte
		var hdrs [2]string
		for i := range bodies {
			bodies[i] = reportBody(t, Epyc4GPU, 10+2*round+i, false)
			_, hdrs[i] = quoted(t, tp, n, bodies[i])
		}
		var wg sync.WaitGroup
		var codes [2]int
		for i, rep := range reps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, _ := rep.postAttested(t, path, tok, hdrs[i], bodies[i])
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		if !(codes[0] == 201 && codes[1] == 409 || codes[0] == 409 && codes[1] == 201) {
			t.Errorf("round %d: answers %v, want one 201 and one 409", round, codes)
		}
	}
	if n, _ := a.store.Count(context.Background()); n != 6 {
		t.Errorf("%d reports stored, want 6 (the first and one per round)", n)
	}

	// Another TPM's quote at A: a conflict, seen at B.
	measureBoot(t, other, uki)
	forged := reportBody(t, Epyc4GPU, 40, false)
	_, hdrOther := quoted(t, other, a.bootNonce(t, mac), forged)
	if resp, out := a.postAttested(t, path, tok, hdrOther, forged); resp.StatusCode != 403 || !strings.Contains(out, "AK changed") {
		t.Errorf("another TPM at A: %d %s", resp.StatusCode, out)
	}
	var nv NodeView
	_, api := b.get(t, "/api/nodes/"+mac)
	if err := json.Unmarshal([]byte(api), &nv); err != nil || nv.AKName == "" || len(nv.AKConflicts) != 1 {
		t.Fatalf("B's view of the node: %v %s", err, api)
	}
	// ak-reset at B, the window closed: A takes no AK.
	a.srv.opt.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if resp, body := b.post(t, "/api/nodes/"+mac+"/ak-reset", testOperator, nil); resp.StatusCode != 200 {
		t.Fatalf("ak-reset at B: %d %s", resp.StatusCode, body)
	}
	tp.Reboot()
	measureBoot(t, tp, uki)
	late := reportBody(t, Epyc4GPU, 41, false)
	_, hdrLate := quoted(t, tp, a.bootNonce(t, mac), late)
	if resp, out := a.postAttested(t, path, tok, hdrLate, late); resp.StatusCode != 403 || !strings.Contains(out, "AK not enrolled") {
		t.Errorf("after ak-reset at B, at A outside the window: %d %s", resp.StatusCode, out)
	}
}
