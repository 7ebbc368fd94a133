package netboot

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A report sent chunked (no Content-Length, so the up-front size check cannot
// see it) is still bounded while it is read: 413 once it passes the limit,
// nothing stored. The same report within the limit, chunked, is stored.
// (Issue 35: no test failed when the read was unbounded.)
func TestCollectorBoundsChunkedReport(t *testing.T) {
	const max = 256 << 10
	e := newEnv(t, Options{MaxReportBytes: max, RateBurst: 4})
	build := e.build(t, "default").ID
	good := reportBody(t, Epyc4GPU, 0, false)
	padded := append(bytes.Clone(good), bytes.Repeat([]byte(" "), max)...) // valid JSON, past the limit
	post := func(node string, body []byte) (*http.Response, string) {
		t.Helper()
		// A reader that is not a *bytes.Reader: the client cannot know the length
		// and sends the body chunked.
		req, _ := http.NewRequest("POST", e.http.URL+"/reports?node="+node, struct{ io.Reader }{bytes.NewReader(body)})
		req.Header.Set("Authorization", "Bearer "+e.srv.Token(build, node))
		req.Header.Set("Content-Type", "application/json")
		if req.ContentLength != 0 && req.ContentLength != -1 {
			t.Fatalf("request has Content-Length %d; the test needs a chunked one", req.ContentLength)
		}
		resp, err := e.http.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	before := len(e.log.String())
	resp, body := post("52:54:00:00:00:01", padded)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunked report of %d bytes: %d %s, want 413", len(padded), resp.StatusCode, body)
	}
	if logged := e.log.String()[before:]; !strings.Contains(logged, "more than 262144 bytes") {
		t.Errorf("log %q lacks the limit", logged)
	}
	if n, _ := e.store.Count(context.Background()); n != 0 {
		t.Fatalf("%d reports stored after the oversized one", n)
	}
	if resp, body := post("52:54:00:00:00:02", good); resp.StatusCode != http.StatusCreated {
		t.Fatalf("a chunked report within the limit: %d %s", resp.StatusCode, body)
	}
}
