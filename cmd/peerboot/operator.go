package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The operator token authorises serve's writes (rollout actions, holds, AK reset,
// enrollment; netboot/operator.go). serve creates it on first start, 0600, and
// `peerboot rollout` reads it; replicas are given a copy of the same file.

// defaultOperatorToken is where both look without --operator-token.
func defaultOperatorToken(out string) string {
	if f := os.Getenv("PEERBOOT_OPERATOR_TOKEN_FILE"); f != "" {
		return f
	}
	return filepath.Join(out, "operator.token")
}

// errCreateToken is a token that could not be created (a read-only directory):
// serve then runs with writes off. A token file that is there but wrong stops it.
var errCreateToken = errors.New("creating the operator token")

// minOperatorToken is the shortest token accepted from a file someone wrote.
const minOperatorToken = 32

// ensureOperatorToken reads the token at file, creating it (32 random bytes, hex,
// mode 0600, never over an existing file) when there is none. created says so.
func ensureOperatorToken(file string) (tok string, created bool, err error) {
	tok, err = readOperatorToken(file)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", false, fmt.Errorf("%w: %w", errCreateToken, err)
	}
	// Written whole beside it, then linked into place: another serve starting at
	// the same moment reads either no file or the whole token, never a part, and
	// the link never replaces a token that is there.
	f, err := os.CreateTemp(filepath.Dir(file), ".operator.token-*")
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", errCreateToken, err)
	}
	defer os.Remove(f.Name())
	tok = hex.EncodeToString(raw)
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(tok + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("%w %s: %w", errCreateToken, file, err)
	}
	if err := os.Link(f.Name(), file); errors.Is(err, fs.ErrExist) {
		tok, err = readOperatorToken(file) // another serve made it first
		return tok, false, err
	} else if err != nil {
		return "", false, fmt.Errorf("%w: %w", errCreateToken, err)
	}
	return tok, true, nil
}

// readOperatorToken reads an existing token file: one line, at least
// minOperatorToken characters, readable by its owner only.
func readOperatorToken(file string) (string, error) {
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
	if len(tok) < minOperatorToken || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("operator token %s: want one word of at least %d characters, got %d", file, minOperatorToken, len(tok))
	}
	return tok, nil
}
