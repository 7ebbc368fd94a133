package netboot

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzParseAction(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"build": "0123456789abcdef"}`, `{"reason": "disk swap"}`, `{"bild": 1}`, `{} {}`, `[1]`, `{"build": "zz"}`, `{"reason": "a\nb"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := parseAction(body)
		if err != nil {
			return
		}
		if a.Build != "" && (len(a.Build) != 16 || !isHex(a.Build)) {
			t.Fatalf("accepted build %q", a.Build)
		}
		if len(a.Reason) > 200 || strings.ContainsAny(a.Reason, "\x00\r\n") || !utf8.ValidString(a.Reason) && utf8.Valid(body) {
			t.Fatalf("accepted reason %q", a.Reason)
		}
	})
}

func TestParseAction(t *testing.T) {
	for _, c := range []struct {
		body, err string
	}{
		{``, ``}, {` `, ``}, {`{"build": "0123456789abcdef"}`, ``},
		{`{"bild": "x"}`, `unknown field "bild"`}, {`{} {}`, `got more after it`}, {`{"build": "0123"}`, `want a build id`},
		{`{"reason": "a\nb"}`, `want one line`}, {strings.Repeat(" ", 5000), `over 4096 bytes`},
	} {
		_, err := parseAction([]byte(c.body))
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%.40q: %v, want %q", c.body, err, c.err)
		}
	}
}

// What parseAction keeps: a reason on its own, a long one cut to 200 bytes, a
// body of exactly the limit; a build id of 16 characters that are not hex is
// no build id.
func TestParseActionValues(t *testing.T) {
	for _, c := range []struct {
		body   string
		reason string
		err    string
	}{
		{body: `{"reason": "disk swap"}`, reason: "disk swap"},
		{body: `{"reason": "` + strings.Repeat("r", 300) + `"}`, reason: strings.Repeat("r", 200)},
		{body: `{"reason": "` + strings.Repeat("r", 200) + `"}`, reason: strings.Repeat("r", 200)},
		{body: `{"reason": "x"}` + strings.Repeat(" ", maxActionBody-len(`{"reason": "x"}`)), reason: "x"},
		{body: `{"reason": "x"}` + strings.Repeat(" ", maxActionBody+1-len(`{"reason": "x"}`)), err: "over 4096 bytes"},
		{body: `{"build": "zzzzzzzzzzzzzzzz"}`, err: "want a build id"},
	} {
		a, err := parseAction([]byte(c.body))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%.40q: %v, want an error containing %q", c.body, err, c.err)
			}
			continue
		}
		if err != nil || a.Reason != c.reason || a.Build != "" {
			t.Errorf("%.40q: %+v, %v; want reason %.20q", c.body, a, err, c.reason)
		}
	}
}
