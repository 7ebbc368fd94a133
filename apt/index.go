package apt

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ulikunitz/xz"
)

// Repo is one apt repository as a recipe names it.
type Repo struct {
	Name    string // recipe's name for it, e.g. "bookworm-security"
	BaseURL string // archive root: the directory holding dists/ and pool/
	// Suite is e.g. "bookworm"; "/" is a flat repository (apt's "deb URI /"): InRelease
	// and Packages sit in BaseURL itself, with no components, as NVIDIA's CUDA
	// repository has them.
	Suite      string
	Components []string // main contrib non-free non-free-firmware; none for a flat repository
	Arch       string   // amd64
	Keyring    string   // path to an OpenPGP keyring file (binary or armored)
	// IgnoreValidUntil is apt's Check-Valid-Until=false for this repository: an
	// InRelease whose Valid-Until has passed is still read (its signature is still
	// verified); the Index says it was expired so the caller can warn.
	IgnoreValidUntil bool
}

// Cache stores downloaded index files by sha256 (the project's
// content-addressed store implements it).
type Cache interface {
	// Open returns the cached bytes with that sha256 (hex), or an error wrapping fs.ErrNotExist.
	Open(sha256 string) (io.ReadCloser, error)
	// Put stores r, failing if its sha256 differs from want (hex). Returns when the entry is durable.
	Put(ctx context.Context, r io.Reader, want string) error
}

// Client fetches and verifies repository indexes.
type Client struct {
	HTTP  *http.Client // nil means http.DefaultClient
	Cache Cache        // may be nil: no caching
	// IgnoreValidUntil accepts an InRelease whose Valid-Until has passed in
	// every repository, for rebuilding from an archive snapshot on purpose;
	// Repo.IgnoreValidUntil does it for one.
	IgnoreValidUntil bool
	// Now returns the current time for expiry checks; nil means time.Now.
	Now func() time.Time
}

// Index is a verified view of one repository.
type Index struct {
	Repo            Repo
	InReleaseSHA256 string    // sha256 of the InRelease bytes that were verified
	Date            time.Time // InRelease Date field
	ValidUntil      time.Time // InRelease Valid-Until field; zero when absent
	// Expired says Valid-Until had passed when the index was read, which only
	// IgnoreValidUntil (the client's or the repository's) lets through: the
	// mirror may be stale or the suite unmaintained (missing security fixes).
	Expired  bool
	Packages []Package
}

// Limits on what a server can make us hold in memory. Real InRelease files
// are a few hundred KiB, the largest Packages index about 50 MiB.
const (
	maxInRelease = 32 << 20
	maxIndex     = 2 << 30
)

// release is the part of an InRelease file LoadIndex uses.
type release struct {
	Suite, Codename string
	Date            time.Time
	ValidUntil      time.Time // zero when absent
	Components      []string
	AcquireByHash   bool
	Files           map[string]fileRef // by path relative to dists/<suite>/
}

type fileRef struct {
	SHA256 string
	Size   int64
}

// LoadIndex downloads and verifies <BaseURL>/dists/<Suite>/InRelease, then
// the binary Packages index of each component, checked against the hashes
// that InRelease lists. Index files go through Cache by those hashes, so a
// second load with an unchanged InRelease downloads only InRelease.
func (c *Client) LoadIndex(ctx context.Context, r Repo) (*Index, error) {
	flat := r.Flat()
	switch {
	case r.BaseURL == "" || r.Suite == "" || r.Arch == "" || (len(r.Components) == 0 && !flat):
		return nil, fmt.Errorf("repository %q: base URL, suite, components and architecture are all required", r.Name)
	case flat && len(r.Components) > 0:
		return nil, fmt.Errorf("repository %q: a flat repository (suite \"/\") has no components, got %s", r.Name, strings.Join(r.Components, ", "))
	}
	keyring, err := readKeyring(r.Keyring)
	if err != nil {
		return nil, withKind(KindKeyring, fmt.Errorf("repository %q: %w", r.Name, err))
	}
	base := strings.TrimRight(r.BaseURL, "/")
	distURL := base + "/dists/" + r.Suite
	if flat {
		distURL = base
	}
	irURL := distURL + "/InRelease"
	raw, err := c.get(ctx, irURL, maxInRelease)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", r.Name, err)
	}
	sum := sha256.Sum256(raw)
	plain, err := verifyClearsigned(raw, keyring, c.now())
	if err != nil {
		return nil, withKind(KindIntegrity, fmt.Errorf("repository %q: verifying %s against keyring %s: %w", r.Name, irURL, r.Keyring, err))
	}
	rel, err := parseRelease(plain)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %s: %w", r.Name, irURL, err)
	}
	if !flat && rel.Suite != r.Suite && rel.Codename != r.Suite {
		// Guards against a mirror answering with another suite's signed file.
		return nil, withKind(KindIntegrity, fmt.Errorf("repository %q: %s describes suite %q (codename %q), not %q",
			r.Name, irURL, rel.Suite, rel.Codename, r.Suite))
	}
	// Only checked after the signature: an expired index is still one the archive
	// signed, while a bad signature is refused whatever the validity setting.
	expired := !rel.ValidUntil.IsZero() && c.now().After(rel.ValidUntil)
	if expired && !c.IgnoreValidUntil && !r.IgnoreValidUntil {
		return nil, withKind(KindIntegrity, fmt.Errorf("repository %q: %s expired at %s (Valid-Until); the mirror is stale or replaying old metadata "+
			"(a suite the archive no longer refreshes can be read anyway with check_valid_until = false on its [[repo]])",
			r.Name, irURL, rel.ValidUntil.Format(time.RFC1123)))
	}
	idx := &Index{Repo: r, InReleaseSHA256: hex.EncodeToString(sum[:]), Date: rel.Date, ValidUntil: rel.ValidUntil, Expired: expired}
	if flat {
		pkgs, err := c.loadComponent(ctx, r, distURL, rel, "")
		if err != nil {
			return nil, fmt.Errorf("repository %q: %w", r.Name, err)
		}
		idx.Packages = pkgs
		return idx, nil
	}
	for _, comp := range r.Components {
		// The security archive lists its components as "updates/main" while its
		// index files stay under main/; accept the plain name as apt does.
		listed := contains(rel.Components, comp) || contains(rel.Components, "updates/"+comp)
		if len(rel.Components) > 0 && !listed {
			return nil, fmt.Errorf("repository %q: component %q is not in %s; it has: %s",
				r.Name, comp, irURL, strings.Join(rel.Components, ", "))
		}
		pkgs, err := c.loadComponent(ctx, r, distURL, rel, comp)
		if err != nil {
			return nil, fmt.Errorf("repository %q: %w", r.Name, err)
		}
		idx.Packages = append(idx.Packages, pkgs...)
	}
	return idx, nil
}

// Flat says the repository is a flat one (Suite "/").
func (r Repo) Flat() bool { return r.Suite == "/" }

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// loadComponent fetches, verifies and parses one component's Packages index,
// preferring the smallest compression that InRelease lists.
func (c *Client) loadComponent(ctx context.Context, r Repo, distURL string, rel *release, comp string) ([]Package, error) {
	dir := comp + "/binary-" + r.Arch + "/"
	byHash := rel.AcquireByHash
	if comp == "" {
		// A flat repository: the index files beside InRelease, no by-hash directory
		// (apt uses by-hash only with dists/ layouts).
		dir, byHash = "", false
	}
	forms := []string{"Packages.xz", "Packages.gz", "Packages"}
	if c.Cache != nil {
		// Any cached form will do; look before downloading anything, so a
		// form the mirror lacks is not asked for again on every load.
		for _, name := range forms {
			ref, ok := rel.Files[dir+name]
			if !ok {
				continue
			}
			data, err := c.fromCache(ref)
			if err == nil {
				return parseCompressed(data, name, r.Name, comp, rel.Files[dir+"Packages"])
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, err
			}
		}
	}
	var tried []string
	for _, name := range forms {
		ref, ok := rel.Files[dir+name]
		if !ok {
			continue
		}
		data, err := c.fetchIndexFile(ctx, distURL, dir, name, ref, byHash)
		if errors.Is(err, errNotFound) {
			// InRelease may list files the mirror does not carry; try the next form.
			tried = append(tried, name)
			continue
		}
		if err != nil {
			return nil, err
		}
		pkgs, err := parseCompressed(data, name, r.Name, comp, rel.Files[dir+"Packages"])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", distURL+"/"+dir+name, err)
		}
		return pkgs, nil
	}
	what := fmt.Sprintf("component %q", comp)
	if comp == "" {
		what = "flat repository"
	}
	if len(tried) > 0 {
		return nil, fmt.Errorf("%s: mirror lacks every Packages index InRelease lists (%s)", what, strings.Join(tried, ", "))
	}
	return nil, fmt.Errorf("%s: InRelease lists no Packages index for architecture %q", what, r.Arch)
}

var (
	errNotFound = errors.New("not found on the server")
	errTooLarge = errors.New("response larger than expected")
)

// fetchIndexFile downloads one index file, verifies it against InRelease
// and stores it in Cache.
func (c *Client) fetchIndexFile(ctx context.Context, distURL, dir, name string, ref fileRef, byHash bool) ([]byte, error) {
	url := distURL + "/" + dir + name
	if byHash {
		// by-hash names stay valid while the mirror swaps in a newer index,
		// so the file cannot change between reading InRelease and this fetch.
		url = distURL + "/" + dir + "by-hash/SHA256/" + ref.SHA256
	}
	data, err := c.get(ctx, url, ref.Size)
	if errors.Is(err, errTooLarge) {
		return nil, withKind(KindIntegrity, fmt.Errorf("%s does not match InRelease: expected sha256 %s (%d bytes), got a larger file", url, ref.SHA256, ref.Size))
	}
	if err != nil {
		return nil, err
	}
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != ref.SHA256 || int64(len(data)) != ref.Size {
		return nil, withKind(KindIntegrity, fmt.Errorf("%s does not match InRelease: expected sha256 %s (%d bytes), got %s (%d bytes)",
			url, ref.SHA256, ref.Size, hex.EncodeToString(got[:]), len(data)))
	}
	if c.Cache != nil {
		if err := c.Cache.Put(ctx, bytes.NewReader(data), ref.SHA256); err != nil {
			return nil, fmt.Errorf("caching %s: %w", url, err)
		}
	}
	return data, nil
}

func (c *Client) fromCache(ref fileRef) ([]byte, error) {
	rc, err := c.Cache.Open(ref.SHA256)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, ref.Size+1))
	if err != nil {
		return nil, fmt.Errorf("reading cached index %s: %w", ref.SHA256, err)
	}
	// The cache is outside our control; a corrupt entry must not pass as verified.
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != ref.SHA256 {
		return nil, fmt.Errorf("cached index %s is corrupt (sha256 %x)", ref.SHA256, got)
	}
	return data, nil
}

// get downloads url, refusing bodies over limit bytes.
func (c *Client) get(ctx context.Context, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("fetching %s: %w", url, errNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching %s: server answered %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("fetching %s: %w", url, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("fetching %s: %w (limit %d bytes)", url, errTooLarge, limit)
	}
	return data, nil
}

// parseCompressed decompresses and parses a Packages index. When InRelease
// also lists the uncompressed file, its hash is checked too, so a flaw in a
// decompressor cannot change what we parse.
func parseCompressed(data []byte, name, repo, comp string, plain fileRef) ([]Package, error) {
	var r io.Reader = bytes.NewReader(data)
	switch {
	case strings.HasSuffix(name, ".xz"):
		xr, err := xz.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("decompressing: %w", err)
		}
		r = xr
	case strings.HasSuffix(name, ".gz"):
		gr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("decompressing: %w", err)
		}
		defer gr.Close()
		r = gr
	}
	r = io.LimitReader(r, maxIndex)
	var h hash.Hash
	var n countWriter
	if plain.SHA256 != "" {
		h = sha256.New()
		r = io.TeeReader(r, io.MultiWriter(h, &n))
	}
	pkgs, err := ParsePackages(r, repo, comp)
	if err != nil {
		return nil, err
	}
	if h != nil {
		// Drain what the parser left (trailing blank lines) before comparing.
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, fmt.Errorf("decompressing: %w", err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != plain.SHA256 || int64(n) != plain.Size {
			return nil, withKind(KindIntegrity, fmt.Errorf("uncompressed index does not match InRelease: expected sha256 %s (%d bytes), got %s (%d bytes)",
				plain.SHA256, plain.Size, got, int64(n)))
		}
	}
	return pkgs, nil
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// readKeyring reads a binary or ASCII-armored OpenPGP keyring.
func readKeyring(path string) (openpgp.EntityList, error) {
	if path == "" {
		return nil, fmt.Errorf("no keyring configured to verify the repository signature")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading keyring: %w", err)
	}
	var el openpgp.EntityList
	if bytes.Contains(data[:min(len(data), 1024)], []byte("-----BEGIN PGP")) {
		el, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(data))
	} else {
		el, err = openpgp.ReadKeyRing(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("reading keyring %s: %w", path, err)
	}
	if len(el) == 0 {
		return nil, fmt.Errorf("keyring %s holds no keys", path)
	}
	return el, nil
}

// verifyClearsigned checks the clear signature on an InRelease file and
// returns only the signed text: anything outside the signed block is ignored.
func verifyClearsigned(raw []byte, keyring openpgp.EntityList, now time.Time) ([]byte, error) {
	block, _ := clearsign.Decode(raw)
	if block == nil {
		return nil, fmt.Errorf("not a clearsigned file")
	}
	cfg := &packet.Config{Time: func() time.Time { return now }}
	if _, err := block.VerifySignature(keyring, cfg); err != nil {
		ids := signerIDs(raw)
		if errors.Is(err, pgperrors.ErrUnknownIssuer) {
			return nil, fmt.Errorf("signed by key %s, which the keyring does not hold", ids)
		}
		return nil, fmt.Errorf("bad signature from key %s: %w", ids, err)
	}
	return block.Plaintext, nil
}

// signerIDs lists the issuer key ids of the signatures on a clearsigned
// file, for error messages.
func signerIDs(raw []byte) string {
	block, _ := clearsign.Decode(raw)
	if block == nil || block.ArmoredSignature == nil {
		return "(unknown)"
	}
	var ids []string
	pr := packet.NewReader(block.ArmoredSignature.Body)
	for {
		p, err := pr.Next()
		if err != nil {
			break
		}
		if sig, ok := p.(*packet.Signature); ok {
			switch {
			case len(sig.IssuerFingerprint) > 0:
				ids = append(ids, strings.ToUpper(hex.EncodeToString(sig.IssuerFingerprint)))
			case sig.IssuerKeyId != nil:
				ids = append(ids, fmt.Sprintf("%016X", *sig.IssuerKeyId))
			}
		}
	}
	if len(ids) == 0 {
		return "(unknown)"
	}
	return strings.Join(ids, ", ")
}

// parseRelease reads the fields LoadIndex needs from verified InRelease text.
func parseRelease(text []byte) (*release, error) {
	var paras []paragraph
	err := readParagraphs(bytes.NewReader(text), nil, false, func(p *paragraph) error {
		paras = append(paras, paragraph{Line: p.Line, Fields: append([]field(nil), p.Fields...)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(paras) != 1 {
		return nil, fmt.Errorf("expected one Release paragraph, found %d", len(paras))
	}
	p := &paras[0]
	rel := &release{Files: map[string]fileRef{}}
	rel.Suite, _ = p.Get("Suite")
	rel.Codename, _ = p.Get("Codename")
	comps, _ := p.Get("Components")
	rel.Components = strings.Fields(comps)
	abh, _ := p.Get("Acquire-By-Hash")
	rel.AcquireByHash = strings.EqualFold(abh, "yes")
	date, ok := p.Get("Date")
	if !ok {
		return nil, fmt.Errorf("missing Date field")
	}
	if rel.Date, err = parseReleaseTime(date); err != nil {
		return nil, fmt.Errorf("invalid Date: %w", err)
	}
	if vu, ok := p.Get("Valid-Until"); ok {
		if rel.ValidUntil, err = parseReleaseTime(vu); err != nil {
			return nil, fmt.Errorf("invalid Valid-Until: %w", err)
		}
	}
	sums, ok := p.Get("SHA256")
	if !ok {
		return nil, fmt.Errorf("no SHA256 file list; refusing to trust weaker hashes")
	}
	for _, line := range strings.Split(sums, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || !isSHA256(f[0]) {
			return nil, fmt.Errorf("malformed SHA256 entry %q", truncate(line, 80))
		}
		size, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || size < 0 {
			return nil, fmt.Errorf("malformed size in SHA256 entry %q", truncate(line, 80))
		}
		rel.Files[f[2]] = fileRef{SHA256: strings.ToLower(f[0]), Size: size}
	}
	return rel, nil
}

// parseReleaseTime accepts the RFC 2822 dates apt writes, in UTC or with a
// numeric zone.
func parseReleaseTime(s string) (time.Time, error) {
	var firstErr error
	for _, layout := range []string{time.RFC1123, time.RFC1123Z, "Mon, 2 Jan 2006 15:04:05 MST", "Mon, 2 Jan 2006 15:04:05 -0700"} {
		t, err := time.Parse(layout, strings.TrimSpace(s))
		if err == nil {
			return t.UTC(), nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return time.Time{}, firstErr
}
