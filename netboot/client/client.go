// Package client is the one client of serve's JSON API that `peerboot
// rollout` uses: reads with the page credentials, writes with the operator
// token, each answer decoded into the type the server encodes it from
// (fleetdb.RolloutStatus, rollout.Event, package api). Its errors carry the
// exit class the command exits with: the server unreachable, a 5xx or an
// answer that is not the API's is network; a refusal (4xx), a bad server URL
// or a missing token file is usage.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/netboot/api"
	"github.com/peerboot/peerboot/netboot/fleetdb"
	"github.com/peerboot/peerboot/netboot/optoken"
	"github.com/peerboot/peerboot/rollout"
)

// DefaultServer is the serve asked without a server named: one on this
// machine at serve's default port (netboot.DefaultListen).
const DefaultServer = "http://127.0.0.1:8080"

// Options say which server to ask and with what.
type Options struct {
	// Server is the serve's base URL, http(s)://HOST[:PORT].
	Server string
	// PageToken (serve --page-token) or else Auth, USER:PASSWORD (serve
	// --auth), authorise the reads.
	PageToken, Auth string
	// OperatorTokenFile is the file of serve's operator token, read for each
	// write: page credentials never authorise one.
	OperatorTokenFile string
	// Timeout bounds each request (default 30 s).
	Timeout time.Duration
}

// Client asks one serve.
type Client struct {
	opt  Options
	base string
	http *http.Client
}

// New checks the server URL and makes a client of it.
func New(opt Options) (*Client, error) {
	base := strings.TrimRight(opt.Server, "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, exitcode.Tag(exitcode.Usage, fmt.Errorf("--server: want http://HOST[:PORT], got %q", base))
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 30 * time.Second
	}
	return &Client{opt: opt, base: base, http: &http.Client{Timeout: opt.Timeout}}, nil
}

// Base is the server's URL, as asked.
func (c *Client) Base() string { return c.base }

// Rollouts is every rollout the server keeps.
func (c *Client) Rollouts(ctx context.Context) ([]fleetdb.RolloutStatus, error) {
	var out []fleetdb.RolloutStatus
	return out, c.call(ctx, http.MethodGet, "/api/rollouts", nil, &out)
}

// Rollout is one recipe's rollout.
func (c *Client) Rollout(ctx context.Context, recipe string) (fleetdb.RolloutStatus, error) {
	var out fleetdb.RolloutStatus
	return out, c.call(ctx, http.MethodGet, "/api/rollouts/"+url.PathEscape(recipe), nil, &out)
}

// Promote moves build ("": the newest in the pipeline) to recipe's next channel.
func (c *Client) Promote(ctx context.Context, recipe, build string) (rollout.Event, error) {
	return c.action(ctx, "/api/rollouts/"+url.PathEscape(recipe)+"/promote", &api.Action{Build: build})
}

// Halt stops recipe's automatic promotion, for reason ("": the server's "manual").
func (c *Client) Halt(ctx context.Context, recipe, reason string) (rollout.Event, error) {
	return c.action(ctx, "/api/rollouts/"+url.PathEscape(recipe)+"/halt", &api.Action{Reason: reason})
}

// Resume starts recipe's automatic promotion again.
func (c *Client) Resume(ctx context.Context, recipe string) (rollout.Event, error) {
	return c.action(ctx, "/api/rollouts/"+url.PathEscape(recipe)+"/resume", nil)
}

// Clear ends node's hold.
func (c *Client) Clear(ctx context.Context, node string) (rollout.Event, error) {
	return c.action(ctx, "/api/nodes/"+url.PathEscape(node)+"/clear", nil)
}

// Enroll opens an AK enrollment window of d for nodes (none: every node).
func (c *Client) Enroll(ctx context.Context, nodes []string, d time.Duration) (api.Enrolled, error) {
	var out api.Enrolled
	body := api.EnrollRequest{Nodes: append([]string{}, nodes...), For: d.String()}
	return out, c.call(ctx, http.MethodPost, "/api/attest/enroll", body, &out)
}

// AKReset forgets node's AK.
func (c *Client) AKReset(ctx context.Context, node string) (api.AKReset, error) {
	var out api.AKReset
	return out, c.call(ctx, http.MethodPost, "/api/nodes/"+url.PathEscape(node)+"/ak-reset", api.Action{}, &out)
}

// SoakStop asks node's running burn-in to stop, for reason (may be ""): the node
// reads it with its next progress POST.
func (c *Client) SoakStop(ctx context.Context, node, reason string) (api.SoakStop, error) {
	var out api.SoakStop
	return out, c.call(ctx, http.MethodPost, "/api/nodes/"+url.PathEscape(node)+"/soak/stop", api.Action{Reason: reason}, &out)
}

func (c *Client) action(ctx context.Context, path string, body *api.Action) (rollout.Event, error) {
	var ev rollout.Event
	var b any
	if body != nil {
		b = body
	}
	return ev, c.call(ctx, http.MethodPost, path, b, &ev)
}

// call does one API request (a POST is a write) and decodes the JSON answer into out.
func (c *Client) call(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return exitcode.Tag(exitcode.Usage, err)
	}
	if err := c.authorise(req); err != nil {
		return exitcode.Tag(exitcode.Usage, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return exitcode.Tag(exitcode.Network, fmt.Errorf("asking %s: %w", c.base, err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return exitcode.Tag(exitcode.Network, fmt.Errorf("reading the answer of %s: %w", c.base, err))
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(data))
		err := fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, msg)
		if resp.StatusCode >= 500 {
			return exitcode.Tag(exitcode.Network, err)
		}
		return exitcode.Tag(exitcode.Usage, err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return exitcode.Tag(exitcode.Network, fmt.Errorf("%s %s: the answer is not the API's JSON (is %s a peerboot serve?): %w", method, path, c.base, err))
	}
	return nil
}

// authorise adds the credentials: a write the operator token, never the page
// credentials; a read the page token, else the page password.
func (c *Client) authorise(req *http.Request) error {
	if req.Method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		tok, err := optoken.Read(c.opt.OperatorTokenFile)
		if err != nil {
			return fmt.Errorf("%w: writes need the file peerboot serve created (--operator-token FILE)", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
	if c.opt.PageToken != "" {
		req.Header.Set("Authorization", "Bearer "+c.opt.PageToken)
	} else if c.opt.Auth != "" {
		u, p, ok := strings.Cut(c.opt.Auth, ":")
		if !ok || u == "" || p == "" {
			return errors.New("--auth: want USER:PASSWORD")
		}
		req.SetBasicAuth(u, p)
	}
	return nil
}
