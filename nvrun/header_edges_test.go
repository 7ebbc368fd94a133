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
		// size_decompress is a line count: never negative (-1 would make the
		// sum come out right), at most maxSkip; 0 is an empty decompressor.
		{"negative size_decompress", "#! /bin/sh\nskip=10\nskip_decompress=11\nsize_decompress=-1\n\n", "bad makeself header: line 4: size_decompress: want a line number"},
		{"size_decompress past maxSkip", "#! /bin/sh\nskip=10\nskip_decompress=9\nsize_decompress=1048577\n\n", "bad makeself header: line 4: size_decompress: want a line number"},
		{"size_decompress of maxSkip", "#! /bin/sh\nskip=10\nskip_decompress=9\nsize_decompress=1048576\n\n", "bad makeself header: line 3: skip_decompress=9 + size_decompress=1048576 must equal skip=10"},
		// skip= and skip_decompress= must point past the header block: its last
		// line is inside it.
		{"skip at the block's last line", "#! /bin/sh\nskip=3\nlabel=x\n\n", "bad makeself header: line 2: skip=3 points into the header block itself (3 lines)"},
		{"skip_decompress at the block's last line", "#! /bin/sh\nskip=5\nskip_decompress=4\nsize_decompress=1\n\n", "bad makeself header: line 3: skip_decompress=4 + size_decompress=1 must equal skip=5, after the header block"},
		// CRCsum= and MD5= come together.
		{"CRCsum alone", "#! /bin/sh\nCRCsum=1\nskip=9\n\n", "bad makeself header: line 2: CRCsum= and MD5= come together"},
		{"MD5 alone", "#! /bin/sh\nMD5=00000000000000000000000000000000\nskip=9\n\n", "bad makeself header: line 2: CRCsum= and MD5= come together"},
		// Line numbers run from 1 to maxSkip.
		{"skip=0", "#! /bin/sh\nskip=0\n\n", "bad makeself header: line 2: skip: want a line number (1..1048576)"},
		{"skip=1", "#! /bin/sh\nskip=1\n\n", "bad makeself header: line 2: skip=1 points into the header block"},
		{"skip past maxSkip", "#! /bin/sh\nskip=1048577\n\n", "bad makeself header: line 2: skip: want a line number"},
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

// An empty embedded decompressor (size_decompress=0) is a header like any other.
func TestHeaderEmptyDecompressor(t *testing.T) {
	h, err := ParseHeader([]byte("#! /bin/sh\nskip=10\nskip_decompress=10\nsize_decompress=0\n\n"))
	if err != nil || h.SizeDecompress != 0 || h.Skip != 10 {
		t.Fatalf("%+v %v", h, err)
	}
}

// The same headers one line further on are accepted: the cases above fail for
// their bound, not for another reason.
func TestHeaderJustPastTheBlock(t *testing.T) {
	for _, head := range []string{"#! /bin/sh\nskip=4\nlabel=x\n\n", "#! /bin/sh\nskip=6\nskip_decompress=5\nsize_decompress=1\n\n", "#! /bin/sh\nskip=9\nlabel=x\n\n"} {
		if _, err := ParseHeader([]byte(head)); err != nil {
			t.Errorf("%q: %v", head, err)
		}
	}
}

// A header without CRCsum= and MD5= checks nothing (CheckFrom 0); skip= may
// be as large as maxSkip.
func TestHeaderWithoutSums(t *testing.T) {
	h, err := ParseHeader([]byte("#! /bin/sh\nskip=1048576\nlabel=x\n\n"))
	if err != nil || h.CheckFrom != 0 || h.HasCRC || h.Skip != maxSkip {
		t.Fatalf("%+v %v", h, err)
	}
}

func TestUnquoteAndClip(t *testing.T) {
	for in, want := range map[string]string{`"a b"`: "a b", `'a b'`: "a b", `""`: "", `"a'`: `"a'`, `'a"`: `'a"`, `"`: `"`, `a"`: `a"`, `"a`: `"a`, `'a`: `'a`, `a'`: `a'`, "ab": "ab"} {
		if got := unquote(in); got != want {
			t.Errorf("unquote(%q) = %q, want %q", in, got, want)
		}
	}
	s60, s61 := strings.Repeat("a", 60), strings.Repeat("b", 61)
	if clip(s60) != s60 || clip(s61) != strings.Repeat("b", 57)+"..." {
		t.Errorf("clip: %q %q", clip(s60), clip(s61))
	}
}
