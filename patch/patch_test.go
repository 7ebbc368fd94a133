package patch

import (
	"errors"
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
	}{
		{name: "clean", content: base, want: strings.Replace(base, "four", "FOUR", 1)},
		{name: "offset", content: "zero\nzero2\n" + base, want: "zero\nzero2\n" + strings.Replace(base, "four", "FOUR", 1), offset: "hunk 1 applied at offset +2 lines"},
		{name: "failing hunk", content: strings.Replace(base, "five", "5", 1),
			err: `patch p.patch: f.txt: hunk 1 (@@ -3,3 +3,3 @@) does not apply: its 3 old lines (first: "three") are not in the file`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := tree(t, c.content)
			res, err := Apply(dir, "p.patch", []byte(p1))
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

func FuzzCheck(f *testing.F) {
	f.Add([]byte(p1))
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data) == nil {
			Apply(t.TempDir(), "fuzz.patch", data)
		}
	})
}
