// Package patch applies git format-patch files to a source tree in pure Go. Hunks
// must match exactly: no fuzz, so a patch never lands in the wrong place silently.
// Apply still finds a hunk that has moved (at an offset, as `patch` and `git apply`
// do) and reports it; ApplyExact refuses it, for series regenerated against one
// pinned tree, where a hunk away from its line means the wrong tree or the wrong
// place (generated tables whose slots look alike).
package patch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// Header is a patch's mail header: what it does and why.
type Header struct {
	Subject string
	Body    string
}

// Result says what a patch did.
type Result struct {
	Files   []string // paths touched, relative to the tree
	Offsets []string // hunks applied away from their recorded line, for the log
}

// Error is a patch that does not apply, located at file and hunk.
type Error struct {
	Patch string
	File  string
	Hunk  int    // 1-based; 0 when the problem is not a hunk
	Range string // the hunk's @@ header
	Msg   string
}

func (e *Error) Error() string {
	if e.Hunk == 0 {
		return fmt.Sprintf("patch %s: %s: %s", e.Patch, e.File, e.Msg)
	}
	return fmt.Sprintf("patch %s: %s: hunk %d (%s) %s", e.Patch, e.File, e.Hunk, e.Range, e.Msg)
}

// ParseHeader reads the Subject and body of a format-patch file.
func ParseHeader(data []byte) (Header, error) {
	_, preamble, err := gitdiff.Parse(bytes.NewReader(data))
	if err != nil {
		return Header{}, err
	}
	h, err := gitdiff.ParsePatchHeader(preamble)
	if err != nil {
		return Header{}, err
	}
	return Header{Subject: h.Title, Body: h.Body}, nil
}

// Check parses a patch without applying it (fuzzed: outside bytes).
func Check(data []byte) error {
	files, _, err := gitdiff.Parse(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return errors.New("no file changes in patch")
	}
	return nil
}

// Apply applies the patch named name (data) under dir. Every file is patched in
// memory first; nothing is written unless every hunk of every file applies. A
// hunk whose old lines have moved is applied where they are and listed in
// Result.Offsets.
func Apply(dir, name string, data []byte) (*Result, error) {
	return apply(dir, name, data, false)
}

// ApplyExact is Apply, except that every hunk must apply at the line it records:
// a hunk whose old lines are only found elsewhere is an error naming the file,
// the hunk, the recorded line and the line found, and nothing is written.
func ApplyExact(dir, name string, data []byte) (*Result, error) {
	return apply(dir, name, data, true)
}

func apply(dir, name string, data []byte, exact bool) (*Result, error) {
	files, _, err := gitdiff.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", name, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("patch %s: no file changes in it", name)
	}
	type write struct {
		path   string
		data   []byte
		mode   os.FileMode
		delete bool
	}
	var writes []write
	res := &Result{}
	// Every path is resolved inside dir (os.Root), and no directory on the way, nor
	// the file patched, may be a symlink: a source tarball can leave links to
	// anywhere in the tree, and a patch applied through one writes there.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", name, err)
	}
	defer root.Close()
	for _, f := range files {
		target := f.NewName
		if f.IsDelete {
			target = f.OldName
		}
		if f.IsBinary {
			return nil, &Error{Patch: name, File: target, Msg: "binary patches are not supported"}
		}
		if !safePath(target) || (f.OldName != "" && !safePath(f.OldName)) {
			return nil, &Error{Patch: name, File: target, Msg: "path leaves the source tree"}
		}
		if isLinkMode(f.OldMode) || isLinkMode(f.NewMode) {
			return nil, &Error{Patch: name, File: target, Msg: "symlink patches are not supported"}
		}
		for _, p := range []string{f.OldName, f.NewName} {
			if p == "" {
				continue
			}
			if msg := throughLink(root, p); msg != "" {
				return nil, &Error{Patch: name, File: p, Msg: msg}
			}
		}
		var old []byte
		mode := os.FileMode(0o644)
		if !f.IsNew {
			info, err := root.Lstat(f.OldName)
			if err != nil {
				return nil, &Error{Patch: name, File: f.OldName, Msg: "file to patch does not exist"}
			}
			if !info.Mode().IsRegular() {
				return nil, &Error{Patch: name, File: f.OldName, Msg: "not a regular file"}
			}
			mode = info.Mode().Perm()
			if old, err = readNoFollow(root, f.OldName); err != nil {
				return nil, err
			}
		} else if _, err := root.Lstat(f.NewName); err == nil {
			return nil, &Error{Patch: name, File: f.NewName, Msg: "patch creates a file that already exists"}
		}
		if f.NewMode != 0 {
			mode = f.NewMode.Perm()
		}
		out, offsets, err := applyFile(old, f, name, target, exact)
		if err != nil {
			return nil, err
		}
		res.Offsets = append(res.Offsets, offsets...)
		res.Files = append(res.Files, target)
		if f.IsRename && f.OldName != f.NewName {
			writes = append(writes, write{path: f.OldName, delete: true})
		}
		writes = append(writes, write{path: target, data: out, mode: mode, delete: f.IsDelete})
	}
	for _, w := range writes {
		p := filepath.ToSlash(filepath.Clean(w.path))
		if w.delete {
			if err := root.Remove(p); err != nil {
				return nil, err
			}
			continue
		}
		if err := mkdirNoFollow(root, path.Dir(p)); err != nil {
			return nil, &Error{Patch: name, File: w.path, Msg: err.Error()}
		}
		// O_NOFOLLOW: the file itself is never a link either.
		f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, w.mode)
		if err != nil {
			return nil, err
		}
		_, err = f.Write(w.data)
		if err == nil {
			// The mode open gives applies only to a new file (and through the
			// umask): a patch's mode change must reach an existing one too.
			err = f.Chmod(w.mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// throughLink says why p cannot be patched when a directory on its way, or p
// itself, is a symlink in the tree; "" when it can.
func throughLink(root *os.Root, p string) string {
	p = filepath.ToSlash(filepath.Clean(p))
	parts := strings.Split(p, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		info, err := root.Lstat(prefix)
		if err != nil {
			return "" // missing from here on: made as real directories
		}
		if info.Mode()&os.ModeSymlink != 0 {
			l, _ := root.Readlink(prefix)
			return fmt.Sprintf("%s is a symlink (to %s) in the tree: refusing to patch through it", prefix, l)
		}
	}
	return ""
}

func readNoFollow(root *os.Root, p string) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// mkdirNoFollow makes dir and its parents, refusing a symlink on the way.
func mkdirNoFollow(root *os.Root, dir string) error {
	if dir == "." {
		return nil
	}
	if err := mkdirNoFollow(root, path.Dir(dir)); err != nil {
		return err
	}
	info, err := root.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return root.Mkdir(dir, 0o755)
	case err != nil:
		return err
	case info.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink in the tree: refusing to patch through it", dir)
	case !info.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// isLinkMode reports git's symlink mode (120000); gitdiff keeps git's raw octal.
func isLinkMode(m os.FileMode) bool { return m&0o170000 == 0o120000 }

func safePath(p string) bool {
	c := filepath.Clean(p)
	return p != "" && !filepath.IsAbs(c) && c != ".." && !strings.HasPrefix(c, "../")
}

// applyFile applies every hunk of f to old, searching for each hunk's old lines at
// its recorded position first, then at growing offsets after the previous hunk;
// exact refuses any hunk not at its recorded position.
func applyFile(old []byte, f *gitdiff.File, patchName, file string, exact bool) ([]byte, []string, error) {
	lines := splitLines(old)
	var out []string
	var offsets []string
	pos := 0 // first line of lines not yet copied
	for i, frag := range f.TextFragments {
		var want, repl []string
		for _, l := range frag.Lines {
			switch l.Op {
			case gitdiff.OpContext:
				want = append(want, l.Line)
				repl = append(repl, l.Line)
			case gitdiff.OpDelete:
				want = append(want, l.Line)
			case gitdiff.OpAdd:
				repl = append(repl, l.Line)
			}
		}
		expected := int(frag.OldPosition) - 1
		if frag.OldLines == 0 {
			expected = int(frag.OldPosition) // pure insertion after line OldPosition
		}
		at := find(lines, want, expected, pos)
		hunkErr := func(msg string) error {
			return &Error{Patch: patchName, File: file, Hunk: i + 1,
				Range: fmt.Sprintf("@@ -%d,%d +%d,%d @@", frag.OldPosition, frag.OldLines, frag.NewPosition, frag.NewLines), Msg: msg}
		}
		if at < 0 {
			return nil, nil, hunkErr(fmt.Sprintf("does not apply: its %d old lines (first: %q) are not in the file", len(want), firstLine(want)))
		}
		if at != expected && exact {
			return nil, nil, hunkErr(fmt.Sprintf("is recorded at line %d, but its old lines (first: %q) are at line %d (offset %+d): "+
				"refusing to apply away from the recorded line (an exact apply; regenerate the patch against this tree)",
				expected+1, firstLine(want), at+1, at-expected))
		}
		if at != expected {
			offsets = append(offsets, fmt.Sprintf("%s: hunk %d applied at offset %+d lines", file, i+1, at-expected))
		}
		out = append(out, lines[pos:at]...)
		out = append(out, repl...)
		pos = at + len(want)
	}
	out = append(out, lines[pos:]...)
	return []byte(strings.Join(out, "")), offsets, nil
}

func firstLine(ls []string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.TrimRight(ls[0], "\n")
}

// find returns where want occurs in lines at or after min, nearest to expected.
func find(lines, want []string, expected, min int) int {
	matches := func(at int) bool {
		if at < min || at+len(want) > len(lines) {
			return false
		}
		for j, w := range want {
			if lines[at+j] != w {
				return false
			}
		}
		return true
	}
	for d := 0; d <= len(lines); d++ {
		if matches(expected + d) {
			return expected + d
		}
		if d > 0 && matches(expected-d) {
			return expected - d
		}
	}
	return -1
}

// splitLines keeps each line's newline so the file's bytes round-trip exactly.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}
