package located

import (
	"errors"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestTOML decodes malformed documents with the real decoder and checks where
// the problem is placed. The first rows are the line-offset fix: the decoder
// counts the newline ending a bad line as the next line's.
func TestTOML(t *testing.T) {
	type doc struct {
		Name  string            `toml:"name"`
		Count int               `toml:"count"`
		Node  []map[string]any  `toml:"node"`
		Env   map[string]string `toml:"env"`
	}
	tests := []struct {
		name, src string
		want      string
		libLine   int // the decoder's own line, when it differs from want's
	}{
		{"unclosed array table header", "name = \"x\"\n[[node]\n", "f.toml:2: expected end of table array name delimiter ']', but got '\\n' instead", 3},
		{"unclosed table header, last key not blamed", "name = \"x\"\n[env\n", "f.toml:2: expected '.' or ']' to end table name, but got '\\n' instead", 3},
		{"unterminated string", "count = 1\nname = \"x\ncount = 2\n", "f.toml:2: name: strings cannot contain newlines", 0},
		{"bad value mid-file", "name = \"x\"\ncount = 1x\n\n", "f.toml:2: expected a top-level item to end with a newline, comment, or EOF, but got 'x' instead", 0},
		{"wrong type", "count = \"three\"\n", "f.toml:1: count: wrong type: want an integer, got a string", 0},
		{"wrong type in a table", "[env]\na = 1\n", "f.toml:2: env.a: wrong type: want a string, got an integer", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			_, err := toml.Decode(tt.src, &d)
			if err == nil {
				t.Fatal("decoded without error")
			}
			e := TOML("f.toml", []byte(tt.src), err)
			if got := e.Error(); got != tt.want {
				t.Errorf("TOML() = %q, want %q", got, tt.want)
			}
			var pe toml.ParseError
			if tt.libLine != 0 && errors.As(err, &pe) && pe.Position.Line != tt.libLine {
				t.Errorf("the decoder now says line %d (was %d): the offset fix may be obsolete", pe.Position.Line, tt.libLine)
			}
		})
	}
}

// TestTOMLNoLine: the decoder gives no line for a type error found when it has
// no position; the key is kept so that the caller can place it. The message is
// the decoder's format (decode.go's "toml: (last key %q): "), written here
// because no document makes the decoder produce it on demand.
func TestTOMLNoLine(t *testing.T) {
	err := errors.New(`toml: (last key "a.b"): incompatible types: TOML value has type Integer; destination has type string`)
	e := TOML("f.toml", nil, err)
	if e.Line != 0 || e.Key != "a.b" || e.Msg != "wrong type: want a string, got an integer" {
		t.Errorf("TOML() = %+v", *e)
	}
	if e := TOML("f.toml", nil, errors.New("toml: something else")); e.Error() != "f.toml: something else" {
		t.Errorf("TOML(other) = %q", e.Error())
	}
}

func TestErrorsSortAndFormat(t *testing.T) {
	es := Errors{
		{File: "b.toml", Line: 1, Msg: "m1"},
		{File: "a.toml", Line: 9, Key: "k", Msg: "m2"},
		{File: "a.toml", Line: 2, Key: "z", Msg: "m3"},
		{File: "a.toml", Line: 2, Key: "a", Msg: "m4"},
		{File: "a.toml", Msg: "m5"},
	}
	Sort(es)
	want := "a.toml: m5\na.toml:2: a: m4\na.toml:2: z: m3\na.toml:9: k: m2\nb.toml:1: m1"
	if got := es.Error(); got != want {
		t.Errorf("sorted Errors:\n%s\nwant:\n%s", got, want)
	}
}
