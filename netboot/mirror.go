package netboot

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/peerboot/peerboot/mirror"
)

// mirrorChecks remembers which files the mirror (Options.FilesURL) was seen
// to hold whole: a file is fetched and hashed once before the first node is
// sent for it (its URL names its content, so once is enough), and a file
// found missing or altered is tried again only after mirrorRetry.
type mirrorChecks struct {
	mu     sync.Mutex // one check at a time: a fleet's first boots wait for one fetch
	client *http.Client
	ok     map[string]bool
	failed map[string]time.Time
}

const mirrorRetry = time.Minute

func checkFilesURL(u string) (string, error) {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return "", fmt.Errorf("files URL: want http(s)://HOST[/PATH] of a mirror holding sha256/<hex> (peerboot publish --http DIR), got %q", u)
	}
	return strings.TrimRight(u, "/"), nil
}

// fromMirror says whether every file of sums is on the mirror as its sha256
// says; the error names the first that is not, and why.
func (s *Server) fromMirror(ctx context.Context, sums ...string) error {
	c := s.mirror
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sum := range sums {
		if c.ok[sum] {
			continue
		}
		if at, bad := c.failed[sum]; bad && s.opt.Now().Sub(at) < mirrorRetry {
			return fmt.Errorf("%s failed its check less than %s ago", mirror.URL(s.opt.FilesURL, sum), mirrorRetry)
		}
		if err := mirror.Check(ctx, c.client, s.opt.FilesURL, sum); err != nil {
			c.failed[sum] = s.opt.Now()
			return err
		}
		delete(c.failed, sum)
		c.ok[sum] = true
	}
	return nil
}
