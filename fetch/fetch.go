// Package fetch brings pinned inputs into the store: Debian packages and URLs over
// HTTP(S) with resume, local files, and git commits (optionally from a local mirror).
// Every byte is checked against its pin before the store accepts it.
package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	"github.com/peerboot/peerboot/exitcode"
	"github.com/peerboot/peerboot/lock"
	"github.com/peerboot/peerboot/progress"
	"github.com/peerboot/peerboot/store"
)

// Options tune a fetch.
type Options struct {
	HTTP     *http.Client
	Parallel int       // concurrent downloads; default 4
	Log      io.Writer // progress and one line per download; nil: silent
	// GitMirrors maps a clone URL to a local path or URL to fetch from instead
	// (PEERBOOT_GIT_MIRRORS="url=path,url=path"); the commit id still verifies it.
	GitMirrors map[string]string
	// Recipe names the recipe in messages (the `store import` hint); "" = the default.
	Recipe string
}

// Stats says what a fetch did.
type Stats struct {
	Present    int   // inputs already in the store, intact
	Downloaded int   // inputs fetched
	Replaced   int   // corrupt store entries fetched again
	Bytes      int64 // bytes transferred
}

// Fetch makes every input present and verified in the store.
func Fetch(ctx context.Context, st *store.Store, inputs []lock.Input, opt Options) (Stats, error) {
	if opt.HTTP == nil {
		opt.HTTP = http.DefaultClient
	}
	if opt.Parallel <= 0 {
		opt.Parallel = 4
	}
	var stats Stats
	var todo []lock.Input
	var total int64
	for _, in := range inputs {
		switch in.Kind {
		case lock.KindGit:
			ok, err := hasCommit(ctx, st, in)
			if err != nil {
				return stats, err
			}
			if ok {
				stats.Present++
				continue
			}
		default:
			err := st.CheckBlob(in.SHA256)
			if err == nil {
				stats.Present++
				continue
			}
			var mm *store.MismatchError
			if errors.As(err, &mm) {
				logf(opt.Log, "store entry for %s is corrupt (%v): fetching it again", in.Name, err)
				if err := st.Remove(in.SHA256); err != nil {
					return stats, err
				}
				stats.Replaced++
			}
		}
		todo = append(todo, in)
		total += in.Size
	}
	if len(todo) == 0 {
		return stats, nil
	}
	var meter *progress.Meter
	if opt.Log != nil {
		meter = progress.New(opt.Log, fmt.Sprintf("fetch %d inputs", len(todo)), "B", total)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		// An installer that cannot be downloaded does not stop the other inputs:
		// the air-gapped path imports it by hand after fetching the rest.
		installerErr error
		wg           sync.WaitGroup
		sem          = make(chan struct{}, opt.Parallel)
	)
	for _, in := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			n, err := fetchOne(ctx, st, in, opt, meter)
			mu.Lock()
			defer mu.Unlock()
			stats.Bytes += n
			if err != nil && in.Role == lock.RoleInstaller && !errors.Is(err, context.Canceled) {
				var mm *store.MismatchError
				if !errors.As(err, &mm) {
					installerErr = installerHint(in, opt.Recipe, err)
					return
				}
			}
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("%s %s: %w", in.Role, in.Name, err)
					cancel()
				}
				return
			}
			stats.Downloaded++
		}()
	}
	wg.Wait()
	if meter != nil {
		meter.Done()
	}
	if firstErr == nil {
		firstErr = installerErr
	}
	return stats, firstErr
}

// InstallerError is an NVIDIA installer that could not be downloaded; it says
// how to bring the file by hand.
type InstallerError struct {
	Name string
	Err  error
	Hint string
}

func (e *InstallerError) Error() string {
	return fmt.Sprintf("%s %s: %v\n%s", lock.RoleInstaller, e.Name, e.Err, e.Hint)
}

func (e *InstallerError) Unwrap() error { return e.Err }

func installerHint(in lock.Input, recipe string, err error) error {
	r := ""
	if recipe != "" {
		r = recipe + " "
	}
	return &InstallerError{Name: in.Name, Err: err, Hint: fmt.Sprintf(
		"NVIDIA's installer could not be downloaded from this machine. Download %s where it is reachable, then bring it into the store with\n"+
			"    peerboot store import %s%s\n"+
			"which accepts it only if its sha256 is %s (the recipe's pin). Every other input was fetched.", in.URL, r, in.Name, in.SHA256)}
}

func fetchOne(ctx context.Context, st *store.Store, in lock.Input, opt Options, meter *progress.Meter) (int64, error) {
	switch in.Kind {
	case lock.KindGit:
		return 0, fetchGit(ctx, st, in, opt)
	case lock.KindDeb, lock.KindURL:
		u, err := url.Parse(in.URL)
		if err != nil {
			return 0, err
		}
		if u.Scheme == "file" {
			return 0, st.Import(ctx, u.Path, in.SHA256)
		}
		return download(ctx, st, in, opt.HTTP, meter)
	}
	return 0, fmt.Errorf("unknown input kind %q", in.Kind)
}

// download streams in.URL into the store, resuming a partial file left by an
// interrupted run with a Range request.
func download(ctx context.Context, st *store.Store, in lock.Input, client *http.Client, meter *progress.Meter) (int64, error) {
	p, err := st.NewPartial(in.SHA256, true)
	if err != nil {
		return 0, err
	}
	defer p.Keep() // no-op after Commit/Abort; keeps bytes of an interrupted download
	if in.Size > 0 && p.Size() > in.Size {
		if err := p.Reset(); err != nil {
			return 0, err
		}
	}
	if meter != nil && p.Size() > 0 {
		meter.Add(p.Size())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
	if err != nil {
		return 0, err
	}
	resumeFrom := p.Size()
	if resumeFrom > 0 && (in.Size == 0 || resumeFrom < in.Size) {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", resumeFrom))
	}
	var n int64
	if in.Size == 0 || resumeFrom < in.Size {
		resp, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("downloading %s: %w", in.URL, err)
		}
		defer resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusPartialContent:
		case resp.StatusCode == http.StatusOK:
			if resumeFrom > 0 { // server ignored the range: start over
				if meter != nil {
					meter.Add(-resumeFrom)
				}
				if err := p.Reset(); err != nil {
					return 0, err
				}
			}
		case resp.StatusCode == http.StatusNotFound && in.Kind == lock.KindDeb:
			// Archives drop superseded versions (security updates especially).
			return 0, fmt.Errorf("downloading %s: HTTP %s: the archive no longer has this pinned version; re-pin with `peerboot lock`, or bring the file with `peerboot store import`", in.URL, resp.Status)
		default:
			return 0, fmt.Errorf("downloading %s: HTTP %s", in.URL, resp.Status)
		}
		var w io.Writer = p
		if meter != nil {
			w = io.MultiWriter(p, meterWriter{meter})
		}
		body := io.Reader(resp.Body)
		if in.Size > 0 { // a server sending more than the pin cannot fill the disk first
			body = io.LimitReader(resp.Body, in.Size-p.Size()+1)
		}
		n, err = io.Copy(w, body)
		if err != nil {
			return n, fmt.Errorf("downloading %s: %w (partial download kept for resume)", in.URL, err)
		}
		if in.Size > 0 && p.Size() > in.Size {
			if rerr := p.Reset(); rerr != nil {
				return n, rerr
			}
			return n, exitcode.Tag(exitcode.Integrity, fmt.Errorf("downloading %s: the server sent more than the %d bytes pinned; refused", in.URL, in.Size))
		}
	}
	if err := p.Commit(); err != nil {
		var mm *store.MismatchError
		if errors.As(err, &mm) {
			mm.What = in.URL
		}
		return n, err
	}
	return n, nil
}

type meterWriter struct{ m *progress.Meter }

func (w meterWriter) Write(b []byte) (int, error) { w.m.Add(int64(len(b))); return len(b), nil }

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// ParseGitMirrors reads PEERBOOT_GIT_MIRRORS: comma-separated url=path pairs.
func ParseGitMirrors(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("PEERBOOT_GIT_MIRRORS: want url=path pairs separated by commas, got %q", pair)
		}
		m[k] = v
	}
	return m, nil
}

// GitMirrorsFromEnv reads PEERBOOT_GIT_MIRRORS from the environment.
func GitMirrorsFromEnv() (map[string]string, error) {
	return ParseGitMirrors(os.Getenv("PEERBOOT_GIT_MIRRORS"))
}
