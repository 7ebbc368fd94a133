package nvrun

import (
	"strings"
	"testing"
)

// Header forms at the edges (make mutants' nvrun survivors): each case fails
// when its condition is inverted or its bound moved by one.
func TestHeaderEdges(t *testing.T) {
	for _, c := range []struct{ name, head, want string }{
		// A header error without a line says so without "line 0".
		{"no line", "#! /bin/sh\nlabel=x\n\n", "bad makeself header: no skip= line"},
		// An empty first line is a complete line that is not a shebang.
		{"empty first line", "\n#! /bin/sh\nskip=3\n", "bad makeself header: line 1: want a shell script's"},
		// Another interpreter's shebang is not a makeself archive.
		{"perl", "#!/usr/bin/perl\nskip=3\n\n", "bad makeself header: line 1: want a shell script's"},
		{"not a shebang", "# sh\nskip=3\n\n", "bad makeself header: line 1: want a shell script's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseHeader([]byte(c.head))
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("got %v, want an error starting %q", err, c.want)
			}
		})
	}
}
