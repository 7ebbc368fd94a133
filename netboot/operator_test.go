package netboot

import (
	"net/http"
	"strings"
	"testing"
)

// TestOperatorWrites: issue 28's items 1 and 2. A write (promote, halt, resume,
// clear) needs the operator token as a bearer token; nothing else a stranger on
// the segment or a browser can present authorises one, and a cross-site request
// is refused even with it. Before the fix: an anonymous promote or halt on a
// server with default options was 200, and so was a body-less POST carrying only
// the Basic credentials a browser re-sends by itself.
func TestOperatorWrites(t *testing.T) {
	e, _, b := failOnCanary(t)
	// Serve's defaults (no --auth, no --page-token): a stranger's JSON POSTs.
	for _, path := range []string{"/api/rollouts/default/promote", "/api/rollouts/default/halt", "/api/rollouts/default/resume"} {
		if resp, body := e.post(t, path, "", nil); resp.StatusCode != 401 {
			t.Errorf("anonymous POST %s with open pages: %d %s", path, resp.StatusCode, body)
		}
	}
	const user, pass, pageToken = "ops", "page-password", "page-token"
	e.srv.opt.PageUser, e.srv.opt.PagePassword, e.srv.opt.PageToken = user, pass, pageToken
	_, nodeToken := e.boot(t, n2)

	write := func(path, body string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", e.http.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		sb.Write(buf[:n])
		return resp.StatusCode, sb.String()
	}
	bearer := "Bearer " + testOperator
	json := "application/json"
	for _, c := range []struct {
		name string
		hdr  []string
		want int
		why  string
	}{
		{"anonymous", nil, 401, "operator token"},
		{"anonymous JSON", []string{"Content-Type", json}, 401, "operator token"},
		{"the page's Basic credentials (a browser re-sends them)", []string{"Authorization", basic(user, pass)}, 401, "page credentials do not authorise writes"},
		{"Basic with the operator token as password", []string{"Authorization", basic("x", testOperator), "Content-Type", json}, 401, "operator token"},
		{"the page token", []string{"Authorization", "Bearer " + pageToken, "Content-Type", json}, 401, "operator token"},
		{"a node's report token", []string{"Authorization", "Bearer " + nodeToken, "Content-Type", json}, 401, "operator token"},
		{"the operator token in X-Peerboot-Token", []string{"X-Peerboot-Token", testOperator, "Content-Type", json}, 401, "operator token"},
		{"cross-site, with the token", []string{"Authorization", bearer, "Sec-Fetch-Site", "cross-site"}, 403, "cross-site"},
		{"same-site other origin, with the token", []string{"Authorization", bearer, "Sec-Fetch-Site", "same-site"}, 403, "cross-site"},
		{"another Origin, with the token", []string{"Authorization", bearer, "Origin", "http://evil.example"}, 403, "cross-origin"},
		{"Origin null, with the token", []string{"Authorization", bearer, "Origin", "null"}, 403, "cross-origin"},
		// An Origin that does not parse as a URL names no site this server
		// can vouch for: refused like another site's, before anything reads
		// its host (url.Parse returns no URL with its error).
		{"an Origin that is no URL, with the token", []string{"Authorization", bearer, "Origin", "http://[::1"}, 403, "cross-origin"},
	} {
		for _, path := range []string{"/api/rollouts/default/promote", "/api/rollouts/default/halt", "/api/rollouts/default/resume", "/api/nodes/" + n1 + "/clear"} {
			code, body := write(path, "", c.hdr...)
			if code != c.want || !strings.Contains(body, c.why) {
				t.Errorf("%s: POST %s: %d %q, want %d with %q", c.name, path, code, body, c.want, c.why)
			}
		}
	}
	st := e.rollout(t, "Authorization", basic(user, pass))
	if !st.Halted || len(st.HeldBack) != 1 || st.Channels[1].Build == b {
		t.Fatalf("a refused write changed the rollout: %+v", st)
	}
	// The operator: the same origin and no browser headers both pass.
	if code, body := write("/api/rollouts/default/promote", `{"build": "`+b+`"}`, "Authorization", bearer, "Content-Type", json,
		"Origin", e.http.URL, "Sec-Fetch-Site", "same-origin"); code != 200 {
		t.Fatalf("the operator's promote: %d %s", code, body)
	}
	if st := e.rollout(t, "Authorization", basic(user, pass)); st.Channels[1].Build != b {
		t.Errorf("the operator's promote did not move %s to stable: %+v", b, st.Channels)
	}
	// Reads stay as configured: the page credentials.
	if resp, _ := e.get(t, "/api/rollouts", "Authorization", basic(user, pass)); resp.StatusCode != 200 {
		t.Errorf("a read with the page password: %d", resp.StatusCode)
	}
	if resp, _ := e.get(t, "/api/rollouts"); resp.StatusCode != 401 {
		t.Errorf("an anonymous read of protected pages: %d", resp.StatusCode)
	}
}

// TestNoOperatorTokenNoWrites: a server started without an operator token takes no
// write from anyone (serve always gives one; a library user may not).
func TestNoOperatorTokenNoWrites(t *testing.T) {
	e := newRolloutEnvWith(t, rolloutTestInventory, Options{})
	for _, tok := range []string{"", "anything"} {
		resp, body := e.post(t, "/api/rollouts/default/halt", tok, nil)
		if resp.StatusCode != 403 || !strings.Contains(body, "without an operator token") {
			t.Errorf("halt with %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	if e.rollout(t).Halted {
		t.Error("halted without an operator token")
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}
