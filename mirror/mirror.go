// Package mirror is the content-addressed layout boot files take on an HTTP
// mirror, object store or CDN: each file at sha256/<hex> of its bytes, so a
// URL names exactly one content and any cache may keep it forever. Publish
// writes the layout from a build output (`peerboot publish --http DIR`);
// serve points boot scripts at it (`serve --files-url URL`) and Check proves
// a mirror holds a file's bytes before nodes are sent there.
package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
	"github.com/peerboot/peerboot/output"
)

// Dir is the layout's one directory.
const Dir = "sha256"

// Path is where the file with this sha256 (lowercase hex) lies under the
// mirror's root.
func Path(sum string) string { return Dir + "/" + sum }

// URL is the file's URL under the mirror's base URL.
func URL(base, sum string) string { return strings.TrimRight(base, "/") + "/" + Path(sum) }

// Published is what Publish did with one file of the output.
type Published struct {
	File   string // its path in the output (pxe/vmlinuz)
	SHA256 string
	Size   int64
	Copied bool // false: the mirror held it already
}

// Publish puts every file OUTDIR's SHA256SUMS lists into dir's layout, each
// checked against its listed sha256 on the way: an output file that no longer
// matches its list refuses the whole publish before anything is written. An
// entry already there is re-hashed and kept when whole, replaced when not.
// Entries are written to a temporary name and renamed, so a reader of the
// mirror never sees half a file.
func Publish(ctx context.Context, outDir, dir string) ([]Published, error) {
	b, err := os.ReadFile(filepath.Join(outDir, output.SumsFile))
	if err != nil {
		return nil, fmt.Errorf("%s is not a build output: %w", outDir, err)
	}
	sums, err := output.ParseSums(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", outDir, err)
	}
	// Every file first: an output altered since it was listed publishes nothing.
	var out []Published
	for _, s := range sums {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(outDir, filepath.FromSlash(s.Path))
		got, err := fsutil.HashFile(p)
		if err != nil {
			return nil, err
		}
		if got != s.SHA256 {
			return nil, &MismatchError{Where: p, Want: s.SHA256, Got: got}
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		out = append(out, Published{File: s.Path, SHA256: s.SHA256, Size: fi.Size()})
	}
	if err := os.MkdirAll(filepath.Join(dir, Dir), 0o755); err != nil {
		return nil, err
	}
	for i, f := range out {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dst := filepath.Join(dir, filepath.FromSlash(Path(f.SHA256)))
		if have, err := fsutil.HashFile(dst); err == nil && have == f.SHA256 {
			continue
		}
		tmp := filepath.Join(dir, Dir, ".tmp-"+f.SHA256)
		if err := fsutil.CopyFile(filepath.Join(outDir, filepath.FromSlash(f.File)), tmp, 0o644); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("publishing %s: %w", f.File, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("publishing %s: %w", f.File, err)
		}
		out[i].Copied = true
	}
	if err := fsutil.SyncTree(filepath.Join(dir, Dir)); err != nil {
		return nil, err
	}
	return out, nil
}

// MismatchError is a file whose bytes are not the ones its sha256 names.
type MismatchError struct {
	Where     string // a path or URL
	Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: sha256 %s, want %s: the file was altered or damaged", e.Where, e.Got, e.Want)
}

// ErrMissing is a file the mirror does not hold.
var ErrMissing = errors.New("not on the mirror")

// Check fetches the file with this sha256 from the mirror at base and hashes
// it whole: nil only when the mirror serves exactly those bytes. A missing
// file wraps ErrMissing; other bytes are a *MismatchError.
func Check(ctx context.Context, client *http.Client, base, sum string) error {
	u := URL(base, sum)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("mirror URL %s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s: %w (peerboot publish --http DIR writes it)", u, ErrMissing)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", u, resp.Status)
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return fmt.Errorf("fetching %s: %w", u, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return &MismatchError{Where: u, Want: sum, Got: got}
	}
	return nil
}
