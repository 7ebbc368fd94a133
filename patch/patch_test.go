package patch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const base = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"

const p1 = `From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: peerboot <peerboot@localhost>
Date: Sat, 29 Nov 2025 12:00:00 +0000
Subject: [PATCH] change four

Why: a test.
---
 f.txt | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/f.txt b/f.txt
--- a/f.txt
+++ b/f.txt
@@ -3,3 +3,3 @@
 three
-four
+FOUR
 five
`

func tree(t *testing.T, content string) string {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644)
	return dir
}

func TestApply(t *testing.T) {
	cases := []struct {
		name, content, want, offset, err string
		exact                            bool
	}{
		{name: "clean", content: base, want: strings.Replace(base, "four", "FOUR", 1)},
		{name: "offset", content: "zero\nzero2\n" + base, want: "zero\nzero2\n" + strings.Replace(base, "four", "FOUR", 1), offset: "hunk 1 applied at offset +2 lines"},
		{name: "failing hunk", content: strings.Replace(base, "five", "5", 1),
			err: `patch p.patch: f.txt: hunk 1 (@@ -3,3 +3,3 @@) does not apply: its 3 old lines (first: "three") are not in the file`},
		{name: "exact clean", exact: true, content: base, want: strings.Replace(base, "four", "FOUR", 1)},
		// The offset case above, refused: an exact apply takes a hunk only at its line.
		{name: "exact offset", exact: true, content: "zero\nzero2\n" + base,
			err: `patch p.patch: f.txt: hunk 1 (@@ -3,3 +3,3 @@) is recorded at line 3, but its old lines (first: "three") are at line 5 (offset +2): ` +
				`refusing to apply away from the recorded line (an exact apply; regenerate the patch against this tree)`},
		{name: "exact failing hunk", exact: true, content: strings.Replace(base, "five", "5", 1),
			err: `patch p.patch: f.txt: hunk 1 (@@ -3,3 +3,3 @@) does not apply: its 3 old lines (first: "three") are not in the file`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tree(t, c.content)
			apply := Apply
			if c.exact {
				apply = ApplyExact
			}
			res, err := apply(dir, "p.patch", []byte(p1))
			if c.err != "" {
				var pe *Error
				if err == nil || err.Error() != c.err || !errors.As(err, &pe) || pe.Hunk != 1 {
					t.Fatalf("got %v, want %s", err, c.err)
				}
				if got, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(got) != c.content {
					t.Fatal("a failed patch changed the file")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(filepath.Join(dir, "f.txt"))
			if string(got) != c.want {
				t.Fatalf("got %q want %q", got, c.want)
			}
			if c.offset != "" && (len(res.Offsets) != 1 || !strings.Contains(res.Offsets[0], c.offset)) {
				t.Fatalf("offsets %v, want %q", res.Offsets, c.offset)
			}
		})
	}
}

func TestMissingFileAndEscape(t *testing.T) {
	dir := t.TempDir()
	if _, err := Apply(dir, "p.patch", []byte(p1)); err == nil || !strings.Contains(err.Error(), "f.txt: file to patch does not exist") {
		t.Fatalf("got %v", err)
	}
	evil := strings.ReplaceAll(p1, "f.txt", "../../etc/passwd")
	if _, err := Apply(dir, "evil.patch", []byte(evil)); err == nil || !strings.Contains(err.Error(), "leaves the source tree") {
		t.Fatalf("got %v", err)
	}
}

func TestHeader(t *testing.T) {
	h, err := ParseHeader([]byte(p1))
	if err != nil || h.Subject != "change four" || !strings.Contains(h.Body, "Why: a test.") {
		t.Fatalf("%+v %v", h, err)
	}
}

// Every patch in driver/patches must carry a subject and a body saying why.
func TestSeriesHeaders(t *testing.T) {
	files, _ := filepath.Glob("../driver/patches/*/*.patch")
	if len(files) == 0 {
		t.Fatal("no patches found")
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		h, err := ParseHeader(data)
		if err != nil || h.Subject == "" || len(strings.TrimSpace(h.Body)) < 40 {
			t.Errorf("%s: want a Subject and a body explaining why: %+v %v", f, h, err)
		}
		if err := Check(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// FuzzCheck parses, then applies to a tree holding f.txt and links out of it
// (sub -> the outside directory, up -> ../outside): nothing outside may change.
func FuzzCheck(f *testing.F) {
	f.Add([]byte(p1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data) != nil {
			return
		}
		parent := t.TempDir()
		dir, outside := filepath.Join(parent, "src"), filepath.Join(parent, "outside")
		os.MkdirAll(dir, 0o755)
		os.MkdirAll(outside, 0o755)
		os.WriteFile(filepath.Join(dir, "f.txt"), []byte(base), 0o644)
		os.WriteFile(filepath.Join(outside, "f.txt"), []byte(base), 0o644)
		os.Symlink(outside, filepath.Join(dir, "sub"))
		os.Symlink("../outside", filepath.Join(dir, "up"))
		Apply(dir, "fuzz.patch", data)
		entries, _ := os.ReadDir(outside)
		got, _ := os.ReadFile(filepath.Join(outside, "f.txt"))
		if len(entries) != 1 || string(got) != base {
			t.Fatalf("outside the tree changed: %v, f.txt %q", entries, got)
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 2 {
			t.Fatalf("a write beside the tree: %v", entries)
		}
	})
}

const newFile = `diff --git a/DIR/new.txt b/DIR/new.txt
new file mode 100644
--- /dev/null
+++ b/DIR/new.txt
@@ -0,0 +1 @@
+planted
`

const deleteFile = `diff --git a/DIR/f.txt b/DIR/f.txt
deleted file mode 100644
--- a/DIR/f.txt
+++ /dev/null
@@ -1,7 +0,0 @@
-one
-two
-three
-four
-five
-six
-seven
`

const symlinkPatch = `diff --git a/l b/l
new file mode 120000
--- /dev/null
+++ b/l
@@ -0,0 +1 @@
+/etc/passwd
\ No newline at end of file
`

// hostileTrees are source trees whose symlinks (as a tarball can leave them)
// point outside, and patches that would write, read or delete through them. On the
// code before the fix, every case but the symlink-mode one changed outside/.
func TestRefusesToPatchThroughSymlinks(t *testing.T) {
	cases := []struct {
		name, patch string
		links       map[string]string // in the tree: name -> target ("OUT" is the outside dir)
		err         string
	}{
		{name: "modify through dir link", patch: strings.ReplaceAll(p1, "f.txt", "sub/f.txt"),
			links: map[string]string{"sub": "OUT"}, err: "sub/f.txt: sub is a symlink (to OUT) in the tree: refusing to patch through it"},
		{name: "modify a link to a host file", patch: p1,
			links: map[string]string{"f.txt": "OUT/f.txt"}, err: "f.txt: f.txt is a symlink (to OUT/f.txt)"},
		{name: "relative link out", patch: strings.ReplaceAll(p1, "f.txt", "up/f.txt"),
			links: map[string]string{"up": "../outside"}, err: "up is a symlink (to ../outside)"},
		{name: "create through dir link", patch: strings.ReplaceAll(newFile, "DIR", "sub"),
			links: map[string]string{"sub": "OUT"}, err: "sub is a symlink"},
		{name: "create under a deeper dir link", patch: strings.ReplaceAll(newFile, "DIR", "sub/deeper"),
			links: map[string]string{"sub": "OUT"}, err: "sub is a symlink"},
		{name: "delete through dir link", patch: strings.ReplaceAll(deleteFile, "DIR", "sub"),
			links: map[string]string{"sub": "OUT"}, err: "sub is a symlink"},
		{name: "symlink mode", patch: symlinkPatch, err: "l: symlink patches are not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dir, outside := filepath.Join(parent, "src"), filepath.Join(parent, "outside")
			os.MkdirAll(dir, 0o755)
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "f.txt"), []byte(base), 0o644)
			for name, target := range c.links {
				os.Symlink(strings.ReplaceAll(target, "OUT", outside), filepath.Join(dir, name))
			}
			_, err := Apply(dir, "evil.patch", []byte(c.patch))
			msg := strings.ReplaceAll(fmt.Sprint(err), outside, "OUT")
			if err == nil || !strings.Contains(msg, c.err) {
				t.Errorf("got %q, want an error containing %q", msg, c.err)
			}
			entries, _ := os.ReadDir(outside)
			got, _ := os.ReadFile(filepath.Join(outside, "f.txt"))
			if len(entries) != 1 || string(got) != base {
				t.Errorf("outside the tree changed: %v, f.txt %q", entries, got)
			}
			if _, err := os.Lstat(filepath.Join(dir, "l")); err == nil {
				t.Error("a symlink patch left a file")
			}
		})
	}
}

// An exact apply that refuses a hunk of the second file writes neither file:
// the first file's clean hunk is not left applied.
func TestApplyExactLeavesTreeUnchanged(t *testing.T) {
	dir := tree(t, base)
	shifted := "zero\n" + base
	if err := os.WriteFile(filepath.Join(dir, "g.txt"), []byte(shifted), 0o644); err != nil {
		t.Fatal(err)
	}
	two := p1 + strings.ReplaceAll(p1[strings.Index(p1, "diff --git"):], "f.txt", "g.txt")
	_, err := ApplyExact(dir, "p.patch", []byte(two))
	var pe *Error
	if !errors.As(err, &pe) || pe.File != "g.txt" || pe.Hunk != 1 || !strings.Contains(err.Error(), "recorded at line 3, but its old lines (first: \"three\") are at line 4 (offset +1)") {
		t.Fatalf("got %v, want g.txt hunk 1 refused at offset +1", err)
	}
	for f, want := range map[string]string{"f.txt": base, "g.txt": shifted} {
		if got, _ := os.ReadFile(filepath.Join(dir, f)); string(got) != want {
			t.Errorf("%s changed by a refused patch: %q", f, got)
		}
	}
	// The same patch applies with offsets allowed, so the refusal is the exact rule's.
	if res, err := Apply(dir, "p.patch", []byte(two)); err != nil || len(res.Offsets) != 1 {
		t.Fatalf("Apply: %v, offsets %v", err, res)
	}
}
