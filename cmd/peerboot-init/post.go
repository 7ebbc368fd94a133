package main

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// statusError is a report POST the server answered with other than 2xx.
type statusError struct {
	code   int
	status string
}

func (e *statusError) Error() string { return "HTTP " + e.status }

// postWaits are the pauses between report POST attempts: four tries in about 7 s.
var postWaits = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// retryPost makes post try again when the server did not answer (a replica killed
// mid-request: the next attempt dials afresh, and a report URL whose name resolves to
// several replicas reaches another) or answered 5xx, 408 or 429. The same bytes go
// each time, and serve answers a report it already stored with 200, so a retry whose
// first answer was lost stores nothing twice. Other refusals (401, 403, 409, 413, 422)
// are final.
func retryPost(post func(url, token string, body []byte, attestation string) error, sleep func(time.Duration)) func(url, token string, body []byte, attestation string) error {
	r := retryPostAnswer(func(url, token string, body []byte, attestation string) ([]byte, error) {
		return nil, post(url, token, body, attestation)
	}, sleep)
	return func(url, token string, body []byte, attestation string) error {
		_, err := r(url, token, body, attestation)
		return err
	}
}

// retryPostAnswer is retryPost for a POST whose answer is read (a progress POST's:
// serve may ask the burn-in to stop).
func retryPostAnswer(post func(url, token string, body []byte, attestation string) ([]byte, error), sleep func(time.Duration)) func(url, token string, body []byte, attestation string) ([]byte, error) {
	return func(url, token string, body []byte, attestation string) ([]byte, error) {
		var errs []error
		for i := 0; ; i++ {
			ans, err := post(url, token, body, attestation)
			if err == nil {
				return ans, nil
			}
			errs = append(errs, fmt.Errorf("attempt %d: %w", i+1, err))
			var se *statusError
			final := errors.As(err, &se) && se.code < 500 && se.code != http.StatusRequestTimeout && se.code != http.StatusTooManyRequests
			if final || i == len(postWaits) {
				return nil, errors.Join(errs...)
			}
			sleep(postWaits[i])
		}
	}
}
