package main

import "testing"

func TestLineDiff(t *testing.T) {
	a := "recipe = \"x\"\n[[deb]]\n  version = \"1\"\n  sha256 = \"aa\"\n[[deb]]\n  version = \"2\"\n"
	b := "recipe = \"x\"\n[[deb]]\n  version = \"1\"\n  sha256 = \"bb\"\n[[deb]]\n  version = \"2\"\n[[deb]]\n  version = \"3\"\n"
	want := "@@ -4 +4 @@\n-  sha256 = \"aa\"\n+  sha256 = \"bb\"\n@@ -7 +7 @@\n+[[deb]]\n+  version = \"3\"\n"
	if got := lineDiff(a, b); got != want {
		t.Errorf("lineDiff:\n%s\nwant:\n%s", got, want)
	}
	if got := lineDiff(a, a); got != "" {
		t.Errorf("lineDiff of equal texts: %q", got)
	}
}
