package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRetryPost(t *testing.T) {
	refused := errors.New("dial tcp 10.0.0.1:8080: connect: connection refused")
	tests := []struct {
		name    string
		answers []error // one per attempt; past the end: success
		tries   int
		ok      bool
		errHas  string
	}{
		{"first try", nil, 1, true, ""},
		{"replica killed, the next answers", []error{refused}, 2, true, ""},
		{"503 then 429 then stored", []error{&statusError{503, "503 Service Unavailable"}, &statusError{429, "429 Too Many Requests"}}, 3, true, ""},
		{"403 is final", []error{&statusError{403, "403 Forbidden"}}, 1, false, "attempt 1: HTTP 403"},
		{"409 is final", []error{&statusError{409, "409 Conflict"}}, 1, false, "HTTP 409"},
		{"never answers: four tries", []error{refused, refused, refused, refused, refused}, 4, false, "attempt 4: dial tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var bodies []string
			var slept []time.Duration
			post := retryPost(func(url, token string, body []byte, attestation string) error {
				bodies = append(bodies, string(body)+attestation)
				if len(bodies) <= len(tt.answers) {
					return tt.answers[len(bodies)-1]
				}
				return nil
			}, func(d time.Duration) { slept = append(slept, d) })
			err := post("http://x/reports", "tok", []byte("same "), "bytes")
			if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("err %v, want ok=%v containing %q", err, tt.ok, tt.errHas)
			}
			if len(bodies) != tt.tries || len(slept) != tt.tries-1 {
				t.Errorf("%d attempts, %d sleeps; want %d attempts", len(bodies), len(slept), tt.tries)
			}
			for _, b := range bodies {
				if b != "same bytes" {
					t.Errorf("attempt sent %q: a retry must send the same bytes", b)
				}
			}
		})
	}
}
