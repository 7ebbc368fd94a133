package netboot

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/peerboot/peerboot/netboot/attestation"
)

// Writes (rollout promote, halt, resume, a node's clear, AK reset, enrollment)
// are the operator's: they change what the fleet boots and which TPMs are
// believed. The operator token is their only credential:
//
//   - it is distinct from the page password and the page token (those stay the
//     reads' credentials), and from the node tokens (anyone who fetches
//     /boot.ipxe reads one);
//   - it travels only as Authorization: Bearer, a header a browser never adds by
//     itself and another site cannot make it send without CORS, which this
//     server never grants; Basic credentials, which a browser re-sends on its
//     own, never authorise a write;
//   - a request that says it comes from another site (Sec-Fetch-Site other than
//     same-origin or none, an Origin that is not this server) is refused before
//     the token is looked at;
//   - without a token (Options.OperatorToken "") every write is refused: a
//     server whose writes nobody can authenticate accepts none.

// errNoOperator is a write to a server started without an operator token.
var errNoOperator = errors.New("writes are off: this server was started without an operator token (peerboot serve creates one, 0600, at --operator-token)")

// operator guards a write route.
func (s *Server) operator(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opt.OperatorToken == "" {
			s.fail(w, r, http.StatusForbidden, "write refused", errNoOperator)
			return
		}
		if err := crossSite(r); err != nil {
			s.fail(w, r, http.StatusForbidden, "write refused", err)
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.opt.OperatorToken)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="peerboot operator"`)
			s.fail(w, r, http.StatusUnauthorized, "write refused", errors.New("send the operator token as Authorization: Bearer TOKEN (peerboot rollout reads it from --operator-token FILE); page credentials do not authorise writes"))
			return
		}
		h(w, r)
	})
}

// crossSite refuses a request a browser says another site made: Sec-Fetch-Site
// (sent by current browsers on every request) other than same-origin or none
// (typed, or a bookmark), or an Origin whose host is not the Host asked.
// Non-browser clients send neither.
func crossSite(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("a cross-site request (Sec-Fetch-Site: %s): writes come from peerboot rollout or this server's own pages", attestation.Clip(site))
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Errorf("a cross-origin request (Origin: %s, this server is %s)", attestation.Clip(o), attestation.Clip(r.Host))
	}
	return nil
}

// errAmbiguousNode is an operator's write naming a node by a hostname or
// serial that more than one node claims.
var errAmbiguousNode = errors.New("more than one node answers to this name: name the node by its MAC")

// writeNode is the node id an operator's write (clear, ak-reset, burn-in stop)
// names by key: a MAC (normalized) is the node's id; else the node whose id,
// hostname or serial key is. A hostname or serial is whatever a boot script's
// fetcher claims (/boot.ipxe?host=&serial=), so a name that several nodes
// claim is refused (409, errAmbiguousNode) rather than given to the one seen
// last: else a stranger fetching a script under a node's hostname would take
// the operator's write on that node to a made-up node of its own. A key no
// node answers to is returned as it is: the write says it knows no such node.
// On an error, status is the answer.
func (s *Server) writeNode(ctx context.Context, key string) (id string, status int, err error) {
	if id, err = nodeKey(key); err != nil {
		return "", http.StatusBadRequest, err
	}
	if _, err := NormalizeMAC(id); err == nil {
		return id, 0, nil // a MAC is the node's id, whoever claims it as a name
	}
	n, err := s.opt.Store.Node(ctx, id)
	if err != nil || n.ID == id {
		return id, 0, nil
	}
	nodes, err := s.opt.Store.Nodes(ctx)
	if err != nil {
		return "", http.StatusServiceUnavailable, err
	}
	var ids []string
	for _, o := range nodes {
		if o.MAC == id || o.Hostname == id || o.Serial == id {
			ids = append(ids, o.ID)
		}
	}
	if len(ids) > 1 {
		return "", http.StatusConflict, fmt.Errorf("%q: %w (%s)", id, errAmbiguousNode, strings.Join(ids, ", "))
	}
	return n.ID, 0, nil
}
