package netboot

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/peerboot/peerboot/internal/swtpmtest"
)

// TestStrangerCannotMoveRollout is issue 28's end to end over HTTP: a rollout
// whose two canaries are listed by MAC with tpm = true, promote_after = 2, and a
// hostname glob that also says canary. A stranger on the segment, with no
// operator token but everything the unauthenticated routes hand out (scripts,
// report tokens, nonces) and a software TPM of its own:
//
//   - cannot promote, halt, resume or clear (anonymous, the page's Basic
//     credentials, a node's report token);
//   - cannot open an enrollment window, nor reset an AK;
//   - forges an unattested PASS, and an unattested FAIL, for the canaries: stored,
//     not counted;
//   - quotes for a canary with its own TPM: refused, an AK conflict (canary 1
//     has its AK on record) or not enrolled (no window open for canary 2);
//   - invents two nodes by a host= claim matching the canary glob and passes
//     on both, unattested and attested by its own TPM: not counted.
//
// The rollout does not move; the two genuine canaries' attested PASSes then
// promote B.
func TestStrangerCannotMoveRollout(t *testing.T) {
	const inventory = `default = "default"
[[rollout]]
recipe = "default"
channels = ["canary", "stable"]
promote_after = 2
window = "6h"

[[node]]
mac = "` + n1 + `"
channel = "canary"
tpm = true

[[node]]
mac = "` + n2 + `"
channel = "canary"
tpm = true

[[node]]
host = "gpu-c-*"
channel = "canary"
`
	e := newRolloutEnvWith(t, inventory, Options{OperatorToken: testOperator, PredictPCR11: stubPCR11, SourceBurst: 1000,
		PageUser: "ops", PagePassword: "page-password"})
	page := []string{"Authorization", basic("ops", "page-password")}
	a := e.build(t, "default").ID
	e.rollout(t, page...)
	bb := e.addBuild(t, "b", 8192)
	b := bb.ID
	uki, err := os.ReadFile(filepath.Join(bb.Dir, "peerboot.efi"))
	if err != nil {
		t.Fatal(err)
	}
	if st := e.rollout(t, page...); st.Channels[0].Build != b || st.Channels[1].Build != a {
		t.Fatalf("B did not enter canary: %+v", st.Channels)
	}
	nonceRE := regexp.MustCompile(`peerboot\.nonce=(\S+)`)
	// script is what anyone gets from /boot.ipxe: the build, the token, the nonce.
	script := func(query string) (build, token, nonce string) {
		t.Helper()
		resp, body := e.get(t, "/boot.ipxe?"+query)
		m, n := scriptBuild.FindStringSubmatch(body), nonceRE.FindStringSubmatch(body)
		if resp.StatusCode != 200 || m == nil || n == nil {
			t.Fatalf("boot %s: %d %s", query, resp.StatusCode, body)
		}
		return m[1], m[2], n[1]
	}
	boot := 0
	report := func(node, query string, tp *swtpmtest.TPM, fail bool) (int, string) {
		t.Helper()
		boot++
		build, token, nonce := script(query)
		if build != b && !fail {
			t.Fatalf("%s was served %s, want B", node, build)
		}
		body := reportBody(t, Epyc4GPU, boot, false)
		if fail {
			body = reportBody(t, Xeon8GPU, boot, true)
		}
		hdr := ""
		if tp != nil {
			tp.Reboot()
			measureBoot(t, tp, uki)
			_, hdr = quoted(t, tp, nonce, body)
		}
		resp, out := e.postAttested(t, "/reports?node="+node, token, hdr, body)
		return resp.StatusCode, out
	}
	unmoved := func(when string, passes int) {
		t.Helper()
		st := e.rollout(t, page...)
		if st.Halted || st.Channels[1].Build != a || st.Builds[1].Pass != passes || st.Builds[1].Fail != 0 {
			t.Fatalf("%s: the rollout moved: halted %t, stable %s, B %+v", when, st.Halted, st.Channels[1].Build, st.Builds[1])
		}
	}

	// The operator enrolls canary 1 as it is installed; it passes on B, attested.
	enroll := func(node string) {
		t.Helper()
		if resp, body := e.post(t, "/api/attest/enroll", testOperator, []byte(`{"nodes": ["`+node+`"], "for": "1h"}`)); resp.StatusCode != 200 {
			t.Fatalf("enroll: %d %s", resp.StatusCode, body)
		}
	}
	enroll(n1)
	canary1, canary2, stranger := swtpmtest.Start(t), swtpmtest.Start(t), swtpmtest.Start(t)
	if code, out := report(n1, "mac="+n1, canary1, false); code != 201 || !strings.Contains(out, `"attestation":"attested"`) {
		t.Fatalf("canary 1: %d %s", code, out)
	}
	unmoved("after canary 1", 1)

	// The stranger's writes.
	_, nodeToken, _ := script("mac=" + n2)
	for _, path := range []string{"/api/rollouts/default/promote", "/api/rollouts/default/halt", "/api/rollouts/default/resume",
		"/api/nodes/" + n1 + "/clear", "/api/nodes/" + n1 + "/ak-reset", "/api/attest/enroll",
		"/api/nodes/" + n1 + "/soak/stop"} {
		for _, hdr := range [][]string{nil, page, {"Authorization", "Bearer " + nodeToken}} {
			code, body := postWith(t, e.testEnv, path, `{"build": "`+b+`", "for": "1h"}`, hdr...)
			if code != 401 {
				t.Errorf("stranger POST %s with %v: %d %s", path, hdr, code, body)
			}
		}
	}
	unmoved("after the stranger's writes", 1)

	// Forged unattested verdicts for the canaries: stored, not counted.
	if code, out := report(n2, "mac="+n2, nil, false); code != 201 || !strings.Contains(out, `"attestation":"unattested"`) {
		t.Fatalf("forged PASS: %d %s", code, out)
	}
	if code, out := report(n1, "mac="+n1, nil, true); code != 201 {
		t.Fatalf("forged FAIL: %d %s", code, out)
	}
	unmoved("after forged unattested verdicts", 1)

	// The stranger's TPM quoting for a canary: an AK conflict.
	if code, out := report(n2, "mac="+n2, stranger, false); code != 403 || !strings.Contains(out, "AK not enrolled") {
		t.Errorf("the stranger's TPM for canary 2, no window open: %d %s", code, out)
	}
	if code, out := report(n1, "mac="+n1, stranger, false); code != 403 || !strings.Contains(out, "AK changed") {
		t.Errorf("the stranger's TPM for canary 1: %d %s", code, out)
	}
	unmoved("after the stranger's quotes", 1)

	// Invented nodes by a host= claim on the canary glob.
	for i, inv := range []string{"02:00:00:00:0c:01", "02:00:00:00:0c:02"} {
		if code, out := report(inv, "mac="+inv+"&host=gpu-c-0"+string(rune('1'+i)), nil, false); code != 201 {
			t.Fatalf("invented node %s: %d %s", inv, code, out)
		}
		if code, out := report(inv, "mac="+inv+"&host=gpu-c-0"+string(rune('1'+i)), stranger, false); code != 403 || !strings.Contains(out, "AK not enrolled") {
			t.Errorf("invented node %s attested by the stranger's TPM: %d %s", inv, code, out)
		}
	}
	unmoved("after invented nodes", 1)

	// The genuine second canary, enrolled as it is installed: B is promoted.
	enroll(n2)
	if code, out := report(n2, "mac="+n2, canary2, false); code != 201 || !strings.Contains(out, `"attestation":"attested"`) {
		t.Fatalf("canary 2: %d %s", code, out)
	}
	if st := e.rollout(t, page...); st.Channels[1].Build != b || st.Halted {
		t.Errorf("the two genuine canaries did not promote B: %+v", st)
	}
}

// postWith POSTs body to path with the headers given and nothing else.
func postWith(t *testing.T, e *testEnv, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}
