package netboot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/peerboot/peerboot/attest"
	"github.com/peerboot/peerboot/internal/swtpmtest"
	"github.com/peerboot/peerboot/netboot/fleetdb"
)

// stubPCR11 is a FAKE predictor standing in for measure.Predict (systemd-stub's
// rules, tested in measure): PCR 11 after extending sha256(uki) and the phase
// word. The swtpm below extends the same two events, so the collector's flow
// (prediction per build, compare, refuse) runs against genuine quotes.
func stubPCR11(uki []byte) ([32]byte, error) {
	var v [32]byte
	for _, e := range [][]byte{uki, []byte(attest.PhaseEnterInitrd)} {
		d := sha256.Sum256(e)
		v = sha256.Sum256(append(v[:], d[:]...))
	}
	return v, nil
}

// measureBoot is what the stub does to a fresh TPM for uki, under stubPCR11's rules.
func measureBoot(t *testing.T, tp *swtpmtest.TPM, uki []byte) {
	t.Helper()
	for _, e := range [][]byte{uki, []byte(attest.PhaseEnterInitrd)} {
		if err := tp.Extend(11, e); err != nil {
			t.Fatal(err)
		}
	}
}

// quoted is tp's evidence for body under nonce, as a node makes it after
// PhaseEnterInitrd, and that evidence as the report's header.
func quoted(t *testing.T, tp *swtpmtest.TPM, nonce string, body []byte) (*attest.Evidence, string) {
	t.Helper()
	ev, err := tp.Quote(nonce, body, attest.PhaseEnterInitrd, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := attest.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return ev, hdr
}

func (e *testEnv) postAttested(t *testing.T, path, token, header string, body []byte) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.http.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if header != "" {
		req.Header.Set(attest.Header, header)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp, b.String()
}

var nonceArg = regexp.MustCompile(`peerboot\.nonce=([0-9a-f]{80})`)

// bootNonce is the nonce in the boot script served to mac.
func (e *testEnv) bootNonce(t *testing.T, mac string) string {
	t.Helper()
	_, script := e.get(t, "/boot.ipxe?mac="+mac)
	m := nonceArg.FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no nonce in the script:\n%s", script)
	}
	return m[1]
}

// clock is a settable Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func TestAttestedReports(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	e := newEnv(t, Options{PredictPCR11: stubPCR11, Now: clk.now, RateBurst: 100, SourceBurst: 100, EnrollAll: time.Hour})
	const mac = "52:54:00:aa:00:01"
	b := e.build(t, "default")
	uki, err := os.ReadFile(filepath.Join(b.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	tok := e.srv.Token(b.ID, mac)
	path := "/reports?node=" + mac
	tp := swtpmtest.Start(t)

	// 1. A boot: the script carries a nonce; the TPM measures the UKI served; the
	// report goes with its quote and is stored attested.
	nonce := e.bootNonce(t, mac)
	measureBoot(t, tp, uki)
	pass := reportBody(t, Epyc4GPU, 0, false)
	ev, hdr := quoted(t, tp, nonce, pass)
	resp, out := e.postAttested(t, path, tok, hdr, pass)
	if resp.StatusCode != 201 || !strings.Contains(out, `"attestation":"attested"`) {
		t.Fatalf("attested PASS: %d %s", resp.StatusCode, out)
	}
	akName, _ := attest.AKName(ev.AKPublic)
	if ak, err := e.store.NodeAK(context.Background(), mac); err != nil || ak == nil || ak.AKName != akName {
		t.Fatalf("AK not recorded on first use: %+v %v", ak, err)
	}
	var nv NodeView
	_, api := e.get(t, "/api/nodes/"+mac)
	if err := json.Unmarshal([]byte(api), &nv); err != nil || nv.Latest == nil || nv.Latest.Attestation != fleetdb.Attested || nv.Latest.AKName != akName {
		t.Fatalf("API: %v %s", err, api)
	}
	if _, page := e.get(t, "/"); !strings.Contains(page, `data-attestation="attested"`) {
		t.Errorf("fleet page lacks the attested report:\n%s", page)
	}

	// 2. The same header and body again, a retry whose answer was lost: the stored
	// report, named a duplicate (the POST is idempotent). Another body under the spent
	// nonce is a replay.
	resp, out = e.postAttested(t, path, tok, hdr, pass)
	if resp.StatusCode != 200 || !strings.Contains(out, `"duplicate":true`) {
		t.Errorf("retry: %d %s", resp.StatusCode, out)
	}
	resp, out = e.postAttested(t, path, tok, hdr, reportBody(t, Epyc4GPU, 5, false))
	if resp.StatusCode != 409 || !strings.Contains(out, "nonce already used") {
		t.Errorf("replay: %d %s", resp.StatusCode, out)
	}

	// 3. A forged report under the token only: stored, unattested.
	forged := reportBody(t, Epyc4GPU, 1, false)
	resp, out = e.postAttested(t, path, tok, "", forged)
	if resp.StatusCode != 201 || !strings.Contains(out, `"attestation":"unattested"`) {
		t.Errorf("token only: %d %s", resp.StatusCode, out)
	}

	// 4. A second boot of a UKI with one byte changed, the nonce from POST
	// /attest/nonce: the TPM's PCR 11 is not the served build's prediction.
	resp, out = e.postAttested(t, "/attest/nonce?node="+mac, tok, "", nil)
	var nr struct{ Nonce, Build string }
	if err := json.Unmarshal([]byte(out), &nr); resp.StatusCode != 200 || err != nil || nr.Build != b.ID {
		t.Fatalf("POST /attest/nonce: %d %s", resp.StatusCode, out)
	}
	tp.Reboot()
	changed := bytes.Clone(uki)
	changed[len(changed)-1] ^= 1
	measureBoot(t, tp, changed)
	second := reportBody(t, Epyc4GPU, 2, false)
	_, hdr2 := quoted(t, tp, nr.Nonce, second)
	resp, out = e.postAttested(t, path, tok, hdr2, second)
	if resp.StatusCode != 403 || !strings.Contains(out, "PCR 11 mismatch") {
		t.Errorf("changed UKI: %d %s", resp.StatusCode, out)
	}

	// 5. Another TPM (a swapped board, or a forger's) under a fresh nonce: AK changed.
	n3 := e.bootNonce(t, mac)
	tp2 := swtpmtest.Start(t)
	measureBoot(t, tp2, uki)
	third := reportBody(t, Epyc4GPU, 3, false)
	_, hdr3 := quoted(t, tp2, n3, third)
	resp, out = e.postAttested(t, path, tok, hdr3, third)
	if resp.StatusCode != 403 || !strings.Contains(out, "AK changed") {
		t.Errorf("other TPM: %d %s", resp.StatusCode, out)
	}

	// 6. Another node's nonce, an expired one, garbage.
	foreign := e.bootNonce(t, "52:54:00:aa:00:02")
	tp.Reboot()
	measureBoot(t, tp, uki)
	_, hdr4 := quoted(t, tp, foreign, third)
	resp, out = e.postAttested(t, path, tok, hdr4, third)
	if resp.StatusCode != 403 || !strings.Contains(out, "nonce unknown or expired") {
		t.Errorf("another node's nonce: %d %s", resp.StatusCode, out)
	}
	n5 := e.bootNonce(t, mac)
	_, hdr5 := quoted(t, tp, n5, third)
	clk.add(3 * time.Hour)
	resp, out = e.postAttested(t, path, tok, hdr5, third)
	if resp.StatusCode != 403 || !strings.Contains(out, "nonce unknown or expired") {
		t.Errorf("expired nonce: %d %s", resp.StatusCode, out)
	}
	resp, out = e.postAttested(t, path, tok, "e30", third)
	if resp.StatusCode != 400 || !strings.Contains(out, "malformed evidence") {
		t.Errorf("garbage header: %d %s", resp.StatusCode, out)
	}

	// What the node's page and API show: two reports (attested, unattested), and
	// the refusals with their reasons.
	nv = NodeView{}
	_, api = e.get(t, "/api/nodes/"+mac)
	if err := json.Unmarshal([]byte(api), &nv); err != nil {
		t.Fatal(err)
	}
	var states []string
	for _, h := range nv.History {
		states = append(states, h.Attestation)
	}
	if got := strings.Join(states, " "); got != "unattested attested" {
		t.Errorf("history attestation %q, want newest first: unattested attested", got)
	}
	var reasons []string
	for _, r := range nv.Refusals {
		reasons = append(reasons, r.Reason)
	}
	all := strings.Join(reasons, "\n")
	for _, want := range []string{"malformed evidence", "nonce unknown or expired", "AK changed", "PCR 11 mismatch", "nonce already used"} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals lack %q:\n%s", want, all)
		}
	}
	if nv.Refused != 6 {
		t.Errorf("refused %d, want 6", nv.Refused)
	}
	_, page := e.get(t, "/nodes/"+mac)
	for _, want := range []string{`id="attestation" data-attestation="unattested"`, `class="refusal"`, "PCR 11 mismatch", "AK changed"} {
		if !strings.Contains(page, want) {
			t.Errorf("node page lacks %q", want)
		}
	}
	_, page = e.get(t, "/nodes/"+mac+"?report=1")
	if !strings.Contains(page, `id="attestation" data-attestation="attested"`) || !strings.Contains(page, akName) {
		t.Errorf("node page of report 1 does not show it attested by %s", akName)
	}
}

// TestNonceEndpoint: POST /attest/nonce takes the report token (a build's, or a
// static one: then the node's build by the inventory), and refuses the rest.
func TestNonceEndpoint(t *testing.T) {
	e := newEnv(t, Options{PredictPCR11: stubPCR11, StaticTokens: []string{"static-t0k"}})
	b := e.build(t, "default")
	for _, tc := range []struct {
		name, node, token string
		status            int
		want              string
	}{
		{"build token", "52:54:00:aa:00:09", e.srv.Token(b.ID, "52:54:00:aa:00:09"), 200, `"build": "` + b.ID + `"`},
		{"static token, named node", "tpm-node", "static-t0k", 200, `"node": "tpm-node"`},
		{"no token", "tpm-node", "", 401, "no token"},
		{"another node's token", "52:54:00:aa:00:08", e.srv.Token(b.ID, "52:54:00:aa:00:09"), 403, "not one this server issued"},
		{"bad node", "a b", "static-t0k", 400, "node:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", e.http.URL+"/attest/nonce?node="+strings.ReplaceAll(tc.node, " ", "%20"), nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := e.http.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			buf.ReadFrom(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(buf.String(), tc.want) {
				t.Fatalf("%d %s, want %d with %q", resp.StatusCode, buf.String(), tc.status, tc.want)
			}
			if tc.status == 200 {
				var v struct{ Nonce string }
				json.Unmarshal(buf.Bytes(), &v)
				build, _, ok := e.srv.openNonce(v.Nonce, tc.node)
				pcr11, _, _, err := e.store.Prediction(context.Background(), b.ID)
				if !ok || build != b.ID || err != nil || pcr11 == "" {
					t.Fatalf("nonce %s: build %s ok %t, prediction %q %v", v.Nonce, build, ok, pcr11, err)
				}
			}
		})
	}
}
