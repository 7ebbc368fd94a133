package netboot

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/peerboot/peerboot/selftest"
)

// authNode is the prologue of a node's POST (a report, a nonce request): the
// client address's rate (429), the token (401 missing), the node (400), the
// token against the node (403). On false the refusal is written; refused names
// the request in the log, tooOften says what the client does too often, and
// tokenHint where the node gets its token.
func (s *Server) authNode(w http.ResponseWriter, r *http.Request, refused, tooOften, tokenHint string) (node, buildID string, ok bool) {
	remote := remoteIP(r)
	if wait := s.source.take(remote); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
		s.fail(w, r, http.StatusTooManyRequests, refused, fmt.Errorf("%s %s: retry in %s", remote, tooOften, wait.Round(time.Second)))
		return "", "", false
	}
	tok := bearer(r)
	if tok == "" {
		s.fail(w, r, http.StatusUnauthorized, refused, fmt.Errorf("no token: send Authorization: Bearer TOKEN (%s)", tokenHint))
		return "", "", false
	}
	node, err := reportNode(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, refused, err)
		return "", "", false
	}
	buildID, ok = s.checkToken(tok, node)
	if !ok {
		s.fail(w, r, http.StatusForbidden, refused, fmt.Errorf("the token is not one this server issued to node %s", node), "node", node)
		return "", "", false
	}
	return node, buildID, true
}

// receiveReport is the pipeline's first stage (pipeline.go): who is posting
// and what. In order: the client address's rate (429), the token (401 missing),
// the node (400), the token against the node (403), the node's rate (429), the
// size (413), the body's arrival (408), the JSON (400), the schema and content
// (422), the recipe against the token's (422). On false the refusal is written.
func (s *Server) receiveReport(w http.ResponseWriter, r *http.Request) (*incoming, bool) {
	in := &incoming{start: s.opt.Now(), remote: remoteIP(r)}
	var ok bool
	in.node, in.buildID, ok = s.authNode(w, r, "report refused", "sends reports too often", "the image gets it as peerboot.token=")
	if !ok {
		return nil, false
	}
	node := in.node
	if wait := s.limit.take(node); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
		s.fail(w, r, http.StatusTooManyRequests, "report refused", fmt.Errorf("node %s sends reports too often: retry in %s", node, wait.Round(time.Second)), "node", node)
		return nil, false
	}
	max := s.opt.MaxReportBytes
	if r.ContentLength > max {
		s.fail(w, r, http.StatusRequestEntityTooLarge, "report refused", fmt.Errorf("%d bytes, the limit is %d", r.ContentLength, max), "node", node)
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		s.fail(w, r, http.StatusRequestEntityTooLarge, "report refused", fmt.Errorf("more than %d bytes", max), "node", node)
		return nil, false
	case errors.As(err, &netErr) && netErr.Timeout():
		s.fail(w, r, http.StatusRequestTimeout, "report refused", fmt.Errorf("the body did not arrive within %s", s.opt.Limits.BodyTimeout), "node", node)
		return nil, false
	case err != nil:
		s.fail(w, r, http.StatusBadRequest, "report refused", fmt.Errorf("reading the body: %w", err), "node", node)
		return nil, false
	}
	// The body is in: the commit below must not be cut off by the body's deadline.
	http.NewResponseController(w).SetReadDeadline(time.Time{})
	rep, status, err := decodeReport(body)
	if err != nil {
		s.fail(w, r, status, "report refused", err, "node", node)
		return nil, false
	}
	recipe := rep.Recipe.Name
	if in.buildID != "" {
		if issued, known := s.buildRecipe(in.buildID); known {
			if recipe != "" && recipe != issued {
				s.fail(w, r, http.StatusUnprocessableEntity, "report refused", fmt.Errorf("the report is from recipe %q, the token is for %q", recipe, issued), "node", node)
				return nil, false
			}
			recipe = issued
		}
	}
	sum := sha256.Sum256(body)
	in.body, in.rep, in.recipe, in.sum = body, rep, recipe, hex.EncodeToString(sum[:])
	return in, true
}

// prune applies the retention policy after a write about node; a failure is logged,
// never the client's problem.
func (s *Server) prune(r *http.Request, node string) {
	n, err := s.opt.Store.Prune(r.Context(), node, s.opt.Retention)
	if err != nil {
		s.log.Error("retention", "node", node, "error", err.Error())
	} else if n > 0 {
		s.log.Info("retention: reports deleted", "node", node, "deleted", n)
	}
}

// bearer takes the token from Authorization: Bearer, X-Peerboot-Token or ?token=.
func bearer(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if t, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	if t := r.Header.Get("X-Peerboot-Token"); t != "" {
		return strings.TrimSpace(t)
	}
	return r.URL.Query().Get("token")
}

// reportNode is the node a report is filed under: ?node= from the report URL the boot
// script gave, else X-Peerboot-Node, else the client address.
func reportNode(r *http.Request) (string, error) {
	n := r.URL.Query().Get("node")
	if n == "" {
		n = r.Header.Get("X-Peerboot-Node")
	}
	if n == "" {
		return "ip:" + remoteIP(r), nil
	}
	if mac, err := NormalizeMAC(n); err == nil {
		return mac, nil
	}
	if !nodeWord.MatchString(n) {
		return "", fmt.Errorf("node: want a MAC or up to 64 of A-Z a-z 0-9 . _ : -, got %q", n)
	}
	return n, nil
}

// decodeReport checks a body with one parse, the one every reader of a report uses
// (selftest.Decode, which validates): not JSON is 400, a JSON value that is no valid
// schema-2 report is 422.
func decodeReport(body []byte) (*selftest.Report, int, error) {
	rep, err := selftest.Decode(body)
	switch {
	case errors.Is(err, selftest.ErrNotJSON):
		return nil, http.StatusBadRequest, err
	case err != nil:
		return nil, http.StatusUnprocessableEntity, err
	}
	return rep, 0, nil
}

// maxBuckets bounds a limiter's memory (about 100 bytes a key).
const maxBuckets = 100000

// limiter is a token bucket per key (a node, a client address).
type limiter struct {
	mu      sync.Mutex
	every   time.Duration
	burst   float64
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(every time.Duration, burst int, now func() time.Time) *limiter {
	return &limiter{every: every, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// take spends one token of key's bucket; it returns how long to wait when empty.
func (l *limiter) take(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		if len(l.buckets) >= maxBuckets {
			// Every bucket is in use: a new key waits rather than the map growing.
			return l.every
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(l.every))
	}
	b.tokens--
	return 0
}

// prune forgets buckets that have refilled: they behave as new ones.
func (l *limiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.at))/float64(l.every) >= l.burst {
			delete(l.buckets, k)
		}
	}
}
