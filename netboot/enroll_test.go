package netboot

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// TestAKEnrollment: issue 28's item 6. Trust on first use let whoever quoted
// first for a node (an attacker's swtpm, with the token and nonce from the
// node's script) register its AK and lock the real node out, with no way back.
// Now: outside an enrollment window the first AK is refused and shown as a
// conflict; the operator opens a window (operator token only); a second AK is
// a visible conflict; ak-reset forgets the AK on record; an ak_name pinned in
// the inventory needs no window and refuses every other AK.
func TestAKEnrollment(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, Options{PredictPCR11: stubPCR11, Now: clk.now, RateBurst: 100, SourceBurst: 100, OperatorToken: testOperator})
	const mac = "52:54:00:aa:00:0e"
	b := e.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(b.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tok := e.srv.Token(b.ID, mac)
	real, forger := swtpmtest.Start(t), swtpmtest.Start(t)
	boot := 0
	post := func(tp *swtpmtest.TPM) (int, string, string) {
		t.Helper()
		boot++
		tp.Reboot()
		measureBoot(t, tp, uki)
		body := reportBody(t, Epyc4GPU, boot, false)
		ev, hdr := quoted(t, tp, e.bootNonce(t, mac), body)
		ak, _ := attest.AKName(ev.AKPublic)
		resp, out := e.postAttested(t, "/reports?node="+mac, tok, hdr, body)
		return resp.StatusCode, out, ak
	}
	node := func() NodeView {
		t.Helper()
		var nv NodeView
		_, api := e.get(t, "/api/nodes/"+mac)
		if err := json.Unmarshal([]byte(api), &nv); err != nil {
			t.Fatalf("%v: %s", err, api)
		}
		return nv
	}

	// 1. The forger quotes first, no window open: refused, a conflict, nothing recorded.
	code, out, forgerAK := post(forger)
	if code != 403 || !strings.Contains(out, "AK not enrolled") {
		t.Fatalf("first AK outside a window: %d %s", code, out)
	}
	if nv := node(); nv.AKName != "" || len(nv.AKConflicts) != 1 || nv.AKConflicts[0].AKName != forgerAK {
		t.Fatalf("after the refused first AK: AK %q, conflicts %+v", nv.AKName, nv.AKConflicts)
	}

	// 2. Only the operator opens a window.
	for _, c := range []struct {
		token string
		want  int
	}{{"", 401}, {tok, 401}, {testOperator, 200}} {
		if resp, body := e.post(t, "/api/attest/enroll", c.token, []byte(`{"nodes": ["`+mac+`"], "for": "30m"}`)); resp.StatusCode != c.want {
			t.Errorf("enroll with %q: %d %s, want %d", c.token, resp.StatusCode, body, c.want)
		}
	}

	// 3. The real node, inside the window: recorded.
	code, out, realAK := post(real)
	if code != 201 || !strings.Contains(out, `"attestation":"attested"`) {
		t.Fatalf("the real node in the window: %d %s", code, out)
	}
	if nv := node(); nv.AKName != realAK {
		t.Fatalf("AK on record %q, want the real node's %s", nv.AKName, realAK)
	}
	if open, err := e.store.Enrolling(context.Background(), mac, clk.now()); err != nil || open {
		t.Errorf("the node's window admitted an AK and stays open: %t %v", open, err)
	}

	// 4. The forger again, still inside the window: a conflict, counted, on the page.
	code, out, _ = post(forger)
	if code != 403 || !strings.Contains(out, "AK changed") || !strings.Contains(out, "ak-reset") {
		t.Fatalf("a second AK: %d %s", code, out)
	}
	if nv := node(); len(nv.AKConflicts) != 1 || nv.AKConflicts[0].Tries != 2 {
		t.Errorf("conflicts %+v, want the forger's AK tried twice", nv.AKConflicts)
	}
	if _, page := e.get(t, "/nodes/"+mac); !strings.Contains(page, `class="ak-conflict"`) || !strings.Contains(page, forgerAK) {
		t.Error("the node page does not show the AK conflict")
	}

	// 5. ak-reset: the operator's only; afterwards, with the window closed, no AK is taken.
	if resp, body := e.post(t, "/api/nodes/"+mac+"/ak-reset", "", nil); resp.StatusCode != 401 {
		t.Errorf("anonymous ak-reset: %d %s", resp.StatusCode, body)
	}
	clk.add(time.Hour)
	if resp, body := e.post(t, "/api/nodes/"+mac+"/ak-reset", testOperator, nil); resp.StatusCode != 200 || !strings.Contains(body, realAK) {
		t.Fatalf("ak-reset: %d %s", resp.StatusCode, body)
	}
	if nv := node(); nv.AKName != "" || len(nv.AKConflicts) != 0 {
		t.Errorf("after ak-reset: AK %q conflicts %+v", nv.AKName, nv.AKConflicts)
	}
	if code, out, _ := post(real); code != 403 || !strings.Contains(out, "AK not enrolled") {
		t.Errorf("after ak-reset, the window closed: %d %s", code, out)
	}

	// 6. ak_name pinned in the inventory: the pinned TPM without a window, no other.
	inv, err := ParseInventory("inv.toml", []byte("default = \"default\"\n[[node]]\nmac = \""+mac+"\"\nak_name = \""+realAK+"\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	e.srv.opt.Inventory = inv
	if code, out, _ := post(forger); code != 403 || !strings.Contains(out, "the inventory pins AK") {
		t.Errorf("another AK than the pinned one: %d %s", code, out)
	}
	if code, out, _ := post(real); code != 201 {
		t.Errorf("the pinned AK: %d %s", code, out)
	}
}
