// Package located is the one type for a problem in a file the user wrote: located
// at file:line and a key path, the form editors jump to. Recipes and the serve
// inventory report their problems as Errors, and TOML turns the TOML decoder's
// errors into one, with the line the user sees.
package located

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Error is one problem at file:line and a key path.
type Error struct {
	File string
	Line int    // 1-based; 0: the problem has no line (the file as a whole)
	Key  string // the key path ("kernel.version", "node[2].mac"); "": none
	Msg  string

	// Meant is, for an unknown key, the known key it is likely a typo of, so that
	// a problem with the key meant is not reported a second time.
	Meant string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return loc + ": " + e.Msg
	}
	return loc + ": " + e.Key + ": " + e.Msg
}

// Errors is every problem found, one a line.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Sort orders es by file, line and key, keeping the order of equal problems.
func Sort(es Errors) {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].File != es[j].File {
			return es[i].File < es[j].File
		}
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Key < es[j].Key
	})
}

var (
	libErrRe  = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "([^"]*)"\): (.*)$`)
	badTypeRe = regexp.MustCompile(`incompatible types: TOML value has type (\S+); destination has type (\S+)`)
)

// TOML locates err, an error of the TOML decoder reading data from file. Its
// Line is 0 when the decoder gave none (a type error it found after parsing):
// the caller, which knows where its keys are, fills it in from Key.
func TOML(file string, data []byte, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		// The decoder counts the newline that ends a bad line as part of the next
		// line; the byte offset is exact.
		line := pe.Position.Line
		if s := pe.Position.Start; s >= 0 && s <= len(data) {
			line = 1 + bytes.Count(data[:s], []byte("\n"))
		}
		// LastKey is the key parsed before the error. When the error is in a table
		// header that key belongs to another table and would mislead.
		key := pe.LastKey
		if strings.HasPrefix(strings.TrimSpace(lineText(data, line)), "[") {
			key = ""
		}
		return &Error{File: file, Line: line, Key: key, Msg: pe.Message}
	}
	if m := libErrRe.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		msg := m[3]
		// The decoder words type errors in Go terms; say what the file wants instead.
		if t := badTypeRe.FindStringSubmatch(msg); t != nil {
			msg = fmt.Sprintf("wrong type: want %s, got %s", typeName(t[2]), typeName(t[1]))
		}
		return &Error{File: file, Line: line, Key: m[2], Msg: msg}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// lineText is line n (1-based) of data, "" past its end.
func lineText(data []byte, n int) string {
	for i := 1; len(data) > 0; i++ {
		line, rest, _ := bytes.Cut(data, []byte("\n"))
		if i == n {
			return string(line)
		}
		data = rest
	}
	return ""
}

func typeName(t string) string {
	switch t {
	case "slice", "Array":
		return "an array"
	case "map", "struct", "Hash":
		return "a table"
	case "String", "string":
		return "a string"
	case "Integer", "integer", "int", "int64":
		return "an integer"
	case "Float", "float", "float64":
		return "a number"
	case "Boolean", "bool", "boolean":
		return "true or false"
	}
	return t
}
