package main

import (
	"bytes"
	"testing"
)

// --version prints what a report's tool field says and runs nothing.
func TestVersionFlag(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run([]string{"--version"}, &out, &errs); code != 0 || out.String() != "p2pcheck "+version+"\n" || errs.Len() != 0 {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out.String(), errs.String())
	}
}
