// Package optoken is the operator token's file: the one credential of serve's
// writes (rollout actions, holds, AK reset, enrollment; netboot/operator.go).
// serve creates it on first start, 0600, and the rollout client reads it;
// replicas are given a copy of the same file. Both sides read it here, so what
// a valid token file is cannot differ between them.
package optoken

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/peerboot/peerboot/internal/fsutil"
)

// FileName is the token's file under an output root (serve --out), where
// serve and the rollout command look without --operator-token.
const FileName = "operator.token"

// Default is the token file under the output root out.
func Default(out string) string { return filepath.Join(out, FileName) }

// ErrCreate is a token that could not be created (a read-only directory):
// serve then runs with writes off. A token file that is there but wrong stops it.
var ErrCreate = errors.New("creating the operator token")

// MinLen is the shortest token accepted from a file someone wrote.
const MinLen = 32

// Ensure reads the token at file, creating it (32 random bytes, hex, mode
// 0600, never over an existing file) when there is none. created says so.
func Ensure(file string) (tok string, created bool, err error) {
	tok, err = Read(file)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrCreate, err)
	}
	tok = hex.EncodeToString(raw)
	err = create(file, []byte(tok+"\n"))
	if errors.Is(err, fs.ErrExist) {
		tok, err = Read(file) // another serve made it first
		return tok, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrCreate, err)
	}
	return tok, true, nil
}

// create puts data at file whole and never over a file that is there, so
// another serve starting at the same moment reads either no file or the whole
// token, never a part: fsutil.WriteAtomic writes it (mode 0600, fsync) under a
// fresh name beside file, which is then linked to file (fs.ErrExist when
// another made it first) and removed. Nothing is left beside file.
func create(file string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+FileName+"-*")
	if err != nil {
		return err
	}
	fresh := f.Name()
	f.Close()
	defer os.Remove(fresh)
	if err := fsutil.WriteFileAtomic(fresh, data, 0o600); err != nil {
		return err
	}
	if err := os.Link(fresh, file); err != nil {
		return err
	}
	if err := os.Remove(fresh); err != nil {
		return err
	}
	return fsutil.Sync(filepath.Dir(file))
}

// Read reads an existing token file: one line, at least MinLen characters,
// readable by its owner only.
func Read(file string) (string, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("operator token %s: mode %04o lets others read it: chmod 600 %s", file, fi.Mode().Perm(), file)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < MinLen || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("operator token %s: want one word of at least %d characters, got %d", file, MinLen, len(tok))
	}
	return tok, nil
}
