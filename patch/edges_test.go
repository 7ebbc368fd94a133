package patch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Behaviour the mutation run (make mutants, patch) found no -short test for:
// each case fails when its condition is inverted.

// A patch that creates a file in a new directory, one that deletes a file and
// one that renames one each do exactly that; creating a file that exists is refused.
func TestApplyCreateDeleteRename(t *testing.T) {
	dir := tree(t, base)
	res, err := Apply(dir, "new.patch", []byte(strings.ReplaceAll(newFile, "DIR", "a/b")))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/new.txt")); string(b) != "planted\n" || len(res.Files) != 1 || res.Files[0] != "a/b/new.txt" {
		t.Fatalf("new file: %q, result %+v", b, res)
	}
	if _, err := Apply(dir, "new.patch", []byte(strings.ReplaceAll(newFile, "DIR", "a/b"))); err == nil || !strings.Contains(err.Error(), "a/b/new.txt: patch creates a file that already exists") {
		t.Fatalf("creating it again: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "d/f.txt"), []byte(base), 0o644)
	res, err = Apply(dir, "delete.patch", []byte(strings.ReplaceAll(deleteFile, "DIR", "d")))
	if err != nil || res == nil || len(res.Files) != 1 {
		t.Fatalf("delete: %+v %v", res, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d/f.txt")); err == nil {
		t.Fatal("the deleted file is still there")
	}
	rename := "diff --git a/f.txt b/g.txt\nsimilarity index 100%\nrename from f.txt\nrename to g.txt\n"
	if _, err := Apply(dir, "rename.patch", []byte(rename)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "f.txt")); err == nil {
		t.Error("the renamed file's old name is still there")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "g.txt")); string(b) != base {
		t.Errorf("renamed file: %q", b)
	}
}

// A mode change in a patch reaches the file (it was ignored for a file that
// already existed: the mode was only passed to open).
func TestApplyModeChange(t *testing.T) {
	dir := tree(t, base)
	mode := "diff --git a/f.txt b/f.txt\nold mode 100644\nnew mode 100755\n"
	if _, err := Apply(dir, "mode.patch", []byte(mode)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "f.txt")); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %o, want 755", fi.Mode().Perm())
	}
	// Without a mode line the file keeps its own.
	os.Chmod(filepath.Join(dir, "f.txt"), 0o600)
	if _, err := Apply(dir, "p.patch", []byte(p1)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "f.txt")); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o after a content patch, want the file's 600", fi.Mode().Perm())
	}
}

// A hunk at the file's first line applies (line 0 is a position, not "not found").
func TestApplyAtFirstLine(t *testing.T) {
	dir := tree(t, base)
	first := "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n"
	if _, err := ApplyExact(dir, "first.patch", []byte(first)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != strings.Replace(base, "one", "ONE", 1) {
		t.Fatalf("got %q", b)
	}
}

// Check returns the parser's error for a malformed patch, not a generic one.
func TestCheckMalformed(t *testing.T) {
	bad := "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1,x +1 @@\n-one\n"
	err := Check([]byte(bad))
	if err == nil || strings.Contains(err.Error(), "no file changes") {
		t.Fatalf("malformed: %v", err)
	}
	if err := Check([]byte(p1)); err != nil {
		t.Fatal(err)
	}
	if err := Check([]byte("just text\n")); err == nil || !strings.Contains(err.Error(), "no file changes") {
		t.Fatalf("no changes: %v", err)
	}
}

func TestSafePath(t *testing.T) {
	for p, want := range map[string]bool{"": false, "/etc/x": false, "..": false, "../x": false, "a/../../x": false, "a/b": true, "a/../b": true} {
		if got := safePath(p); got != want {
			t.Errorf("safePath(%q) = %v, want %v", p, got, want)
		}
	}
}

// Two adjacent hunks (the second starts where the first ends) and a hunk that
// ends at the file's last line both apply exactly.
func TestApplyAdjacentAndLastHunks(t *testing.T) {
	dir := tree(t, base)
	p := "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n" +
		"@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n" +
		"@@ -3,2 +3,2 @@\n-three\n+THREE\n four\n" +
		"@@ -6,2 +6,2 @@\n six\n-seven\n+SEVEN\n"
	if _, err := ApplyExact(dir, "p.patch", []byte(p)); err != nil {
		t.Fatal(err)
	}
	want := "ONE\ntwo\nTHREE\nfour\nfive\nsix\nSEVEN\n"
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != want {
		t.Fatalf("got %q, want %q", b, want)
	}
}

// A hunk whose old lines are earlier than recorded is found there (a negative
// offset), as far back as the file's first line.
func TestApplyNegativeOffset(t *testing.T) {
	dir := tree(t, base)
	// Recorded at line 8 (past the 7 lines): "one" is found 7 lines earlier.
	p := "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -8,1 +8,1 @@\n-one\n+ONE\n"
	res, err := Apply(dir, "p.patch", []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != strings.Replace(base, "one", "ONE", 1) || len(res.Offsets) != 1 || !strings.Contains(res.Offsets[0], "offset -7 lines") {
		t.Fatalf("got %q, offsets %v", b, res.Offsets)
	}
}

// A new file under a path whose parent is a file is refused, naming it.
func TestApplyUnderAFile(t *testing.T) {
	dir := tree(t, base)
	_, err := Apply(dir, "p.patch", []byte(strings.ReplaceAll(newFile, "DIR", "f.txt")))
	if err == nil || !strings.Contains(err.Error(), "f.txt is not a directory") {
		t.Fatalf("got %v", err)
	}
}

func TestSplitLines(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "a\nb\n": {"a\n", "b\n"}, "\nx\n": {"\n", "x\n"}, "a\nb": {"a\n", "b"}} {
		got := splitLines([]byte(in))
		if strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("splitLines(%q) = %q, want %q", in, got, want)
		}
	}
}

// A rename out of a path that leaves the tree is refused, though its new name is inside.
func TestRenameFromOutside(t *testing.T) {
	dir := tree(t, base)
	p := "diff --git a/../outside.txt b/inside.txt\nsimilarity index 100%\nrename from ../outside.txt\nrename to inside.txt\n"
	if _, err := Apply(dir, "p.patch", []byte(p)); err == nil || !strings.Contains(err.Error(), "path leaves the source tree") {
		t.Fatalf("got %v", err)
	}
}
