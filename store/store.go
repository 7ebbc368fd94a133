// Package store is peerboot's content-addressed cache: inputs by sha256, stage outputs
// by action key. Every write is atomic (temp file, fsync, rename), so a killed process
// never leaves an entry that looks complete, and concurrent processes are safe.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/peerboot/peerboot/internal/fsutil"
)

var sumRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Store is a cache directory.
//
//	blobs/sha256/ab/abcd...   inputs, named by their sha256
//	out/<key>/                stage outputs, named by action key, with a MANIFEST
//	git/<name>.git            bare git repositories for git inputs
//	tmp/                      partial downloads and scratch directories
//	locks/                    flock files
type Store struct {
	Root string

	mu   sync.Mutex
	held []*Scratch // NewScratch's scratches, locked until the process exits
}

// DefaultRoot is $PEERBOOT_CACHE, else ~/.cache/peerboot.
func DefaultRoot() string {
	if d := os.Getenv("PEERBOOT_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "peerboot")
	}
	return filepath.Join(os.TempDir(), "peerboot-cache")
}

// Open creates the store's directories if needed.
func Open(root string) (*Store, error) {
	for _, d := range []string{"blobs/sha256", "out", "git", "tmp", "locks"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("opening store %s: %w", root, err)
		}
	}
	return &Store{Root: root}, nil
}

// MismatchError is a hash check that failed.
type MismatchError struct {
	What      string
	Want, Got string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s: sha256 mismatch: expected %s, got %s", e.What, e.Want, e.Got)
}

func checkSum(sum string) error {
	if !sumRe.MatchString(sum) {
		return fmt.Errorf("not a sha256 (64 lower-case hex digits): %q", sum)
	}
	return nil
}

// GitDir is the bare repository that holds the fetched commits of cloneURL
// (fetch fills it, the stages archive from it).
func (s *Store) GitDir(cloneURL string) string {
	sum := sha256.Sum256([]byte(cloneURL))
	return filepath.Join(s.Root, "git", hex.EncodeToString(sum[:8])+".git")
}

// PlanPath is where the last built plan of the recipe named name is kept, for
// `peerboot why` to compare the next plan with.
func (s *Store) PlanPath(name string) string {
	return filepath.Join(s.Root, "plans", name+".json")
}

// Hints the store keeps about this host: neither inputs nor outputs, safe to delete.
const (
	// KVMFailsHint exists once a KVM boot failed here: QEMU runs use TCG until it is deleted.
	KVMFailsHint = "kvm-fails"
	// StatCacheHint is the digests of the plan's data files by their stat (package statcache).
	StatCacheHint = "statcache"
)

// HintPath is the file of the hint named name (KVMFailsHint, a kernel stage's
// step counts).
func (s *Store) HintPath(name string) string {
	return filepath.Join(s.Root, "hints", name)
}

// BlobPath is where the input with that sha256 lives (whether or not it exists).
func (s *Store) BlobPath(sum string) string {
	return filepath.Join(s.Root, "blobs", "sha256", sum[:2], sum)
}

// HasBlob says whether an entry exists; CheckBlob also re-hashes it.
func (s *Store) HasBlob(sum string) bool {
	if checkSum(sum) != nil {
		return false
	}
	_, err := os.Stat(s.BlobPath(sum))
	return err == nil
}

// CheckBlob re-hashes the entry: nil if present and intact, fs.ErrNotExist if absent,
// a *MismatchError if corrupt.
func (s *Store) CheckBlob(sum string) error {
	if err := checkSum(sum); err != nil {
		return err
	}
	got, err := fsutil.HashFile(s.BlobPath(sum))
	if err != nil {
		return err
	}
	if got != sum {
		return &MismatchError{What: s.BlobPath(sum), Want: sum, Got: got}
	}
	return nil
}

// Open returns the entry's bytes (implements apt.Cache).
func (s *Store) Open(sum string) (io.ReadCloser, error) {
	if err := checkSum(sum); err != nil {
		return nil, err
	}
	return os.Open(s.BlobPath(sum))
}

// Put copies r into the store if its sha256 is want (implements apt.Cache).
func (s *Store) Put(ctx context.Context, r io.Reader, want string) error {
	p, err := s.NewPartial(want, false)
	if err != nil {
		return err
	}
	defer p.Abort()
	if _, err := io.Copy(p, ctxReader{ctx, r}); err != nil {
		return err
	}
	return p.Commit()
}

// Import adds a local file whose sha256 must be want.
func (s *Store) Import(ctx context.Context, path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return s.Put(ctx, f, want)
}

// ErrNoPin is a file ImportPinned refused: its sha256 is none of the pins.
var ErrNoPin = errors.New("matches no pin")

// Imported is a file ImportPinned added: its path, the pin's name, its sha256.
type Imported struct {
	File, Name, SHA256 string
}

// ImportPinned adds each file, in order, whose sha256 is a key of pins
// (sha256 -> the name of the input pinned to it): how files downloaded
// elsewhere enter an air-gapped store. The first file that matches no pin
// stops it with an error wrapping ErrNoPin; what was imported before is
// returned with any error.
func (s *Store) ImportPinned(ctx context.Context, files []string, pins map[string]string) ([]Imported, error) {
	done := []Imported{}
	for _, f := range files {
		sum, err := fsutil.HashFile(f)
		if err != nil {
			return done, err
		}
		name, ok := pins[sum]
		if !ok {
			return done, fmt.Errorf("%s (sha256 %s) %w", f, sum, ErrNoPin)
		}
		if err := s.Import(ctx, f, sum); err != nil {
			return done, err
		}
		done = append(done, Imported{File: f, Name: name, SHA256: sum})
	}
	return done, nil
}

// Remove deletes an entry (used to replace a corrupt one).
func (s *Store) Remove(sum string) error {
	if err := checkSum(sum); err != nil {
		return err
	}
	err := os.Remove(s.BlobPath(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Partial is an entry being written. Bytes go to tmp/<sum>.partial; Commit checks the
// hash, fsyncs and renames into place. A resumable Partial keeps earlier bytes, so an
// interrupted download continues where it stopped.
type Partial struct {
	store  *Store
	sum    string
	f      *os.File
	hash   hashWriter
	size   int64
	unlock func()
	done   bool
}

// NewPartial opens the temp file for sum, holding an exclusive lock on it until Commit
// or Abort. With resume, existing partial bytes are kept and re-hashed.
func (s *Store) NewPartial(sum string, resume bool) (*Partial, error) {
	if err := checkSum(sum); err != nil {
		return nil, err
	}
	unlock, err := s.Lock("blob-" + sum)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(s.Root, "tmp", sum+".partial")
	flags := os.O_RDWR | os.O_CREATE
	if !resume {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		unlock()
		return nil, err
	}
	p := &Partial{store: s, sum: sum, f: f, hash: newHashWriter(), unlock: unlock}
	if resume {
		n, err := io.Copy(p.hash, f)
		if err != nil {
			p.Abort()
			return nil, err
		}
		p.size = n
	}
	return p, nil
}

// Size is how many bytes are already written (the offset to resume from).
func (p *Partial) Size() int64 { return p.size }

// Reset drops the bytes written so far (a server that ignored a range request).
func (p *Partial) Reset() error {
	if err := p.f.Truncate(0); err != nil {
		return err
	}
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p.hash = newHashWriter()
	p.size = 0
	return nil
}

func (p *Partial) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.hash.Write(b[:n])
	p.size += int64(n)
	return n, err
}

// Commit verifies the hash and publishes the entry. On mismatch the temp file is
// removed and a *MismatchError returned.
func (p *Partial) Commit() error {
	if p.done {
		return errors.New("store: partial already finished")
	}
	got := p.hash.Sum()
	if got != p.sum {
		p.Abort()
		return &MismatchError{What: "download", Want: p.sum, Got: got}
	}
	if err := p.f.Sync(); err != nil {
		p.Abort()
		return err
	}
	if err := p.f.Close(); err != nil {
		p.Abort()
		return err
	}
	dst := p.store.BlobPath(p.sum)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		p.Abort()
		return err
	}
	if err := os.Rename(p.f.Name(), dst); err != nil {
		p.Abort()
		return err
	}
	p.done = true
	err := fsutil.Sync(filepath.Dir(dst))
	p.unlock()
	return err
}

// Abort drops the temp file; safe to call after Commit.
func (p *Partial) Abort() {
	if p.done {
		return
	}
	p.done = true
	p.f.Close()
	os.Remove(p.f.Name())
	p.unlock()
}

// Keep closes the partial but leaves its bytes for a later resume.
func (p *Partial) Keep() {
	if p.done {
		return
	}
	p.done = true
	p.f.Sync()
	p.f.Close()
	p.unlock()
}

// Lock takes an exclusive advisory lock named name, waiting for other processes.
func (s *Store) Lock(name string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.Root, "locks", name+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

type hashWriter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newHashWriter() hashWriter                  { return hashWriter{sha256.New()} }
func (w hashWriter) Write(b []byte) (int, error) { return w.h.Write(b) }
func (w hashWriter) Sum() string                 { return hex.EncodeToString(w.h.Sum(nil)) }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// isBlobName reports whether a file name under blobs/ is a well-formed entry.
func isBlobName(name string) bool { return sumRe.MatchString(name) && !strings.Contains(name, ".") }
