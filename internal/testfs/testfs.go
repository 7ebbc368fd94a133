// Package testfs lays out files for tests that build a fake root (/proc, /sys,
// /lib/modules): one helper, instead of a copy in every test file.
package testfs

import (
	"os"
	"path/filepath"
	"testing"
)

// Write creates path with content, and its parent directories; a failure fails tb.
func Write(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}
