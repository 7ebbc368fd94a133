package recipe

import (
	"bufio"
	"bytes"
	"sort"
	"strconv"
	"strings"
)

// lineIndex maps key paths ("repo[1].suite") to the line that defines them. The TOML
// library keeps positions private, so we scan the text ourselves; it only has to be
// right for error messages, and falls back to the nearest enclosing key. Elements of
// arrays get their own entries ("driver.modules[2]", "userspace.exclude[1].reason")
// when they start on a line of their own or inside a one-line array.
type lineIndex map[string]int

func indexLines(data []byte) lineIndex {
	idx := lineIndex{}
	arrays := map[string]int{} // array-of-tables path -> count so far
	table := ""
	inMultiString := ""
	var val valueScan // the value being read while it spans lines
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if inMultiString != "" {
			if strings.Count(line, inMultiString)%2 == 1 {
				inMultiString = ""
			}
			continue
		}
		if val.depth > 0 {
			val.scan(idx, line, n)
			continue
		}
		switch {
		case line == "" || line[0] == '#':
		case strings.HasPrefix(line, "[["):
			name := cleanKey(strings.TrimSuffix(strings.TrimSpace(stripComment(line[2:])), "]]"))
			name = join(withIndexes(parent(name), arrays), lastSegment(name))
			arrays[name]++
			table = name + "[" + strconv.Itoa(arrays[name]-1) + "]"
			setOnce(idx, name, n)
			idx[table] = n
		case line[0] == '[':
			name := cleanKey(strings.TrimSuffix(strings.TrimSpace(stripComment(line[1:])), "]"))
			table = withIndexes(name, arrays)
			idx[table] = n
		default:
			key, value, ok := cutKey(line)
			if !ok {
				continue
			}
			path := join(table, cleanKey(key))
			idx[path] = n
			value = strings.TrimSpace(value)
			for _, q := range []string{`"""`, `'''`} {
				if strings.HasPrefix(value, q) && strings.Count(value, q)%2 == 1 {
					inMultiString = q
				}
			}
			if inMultiString != "" {
				continue
			}
			val = valueScan{path: path}
			val.scan(idx, value, n)
		}
	}
	return idx
}

// cutKey splits "key = value" at the first '=' outside a quoted key.
func cutKey(line string) (key, value string, ok bool) {
	if i := indexUnquoted(line, '='); i >= 0 {
		return line[:i], line[i+1:], true
	}
	return "", "", false
}

// indexUnquoted is the index of the first c outside a TOML string, or -1.
func indexUnquoted(s string, c byte) int {
	inQuote := byte(0)
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case inQuote != 0 && b == '\\' && inQuote == '"':
			i++
		case inQuote != 0 && b == inQuote:
			inQuote = 0
		case inQuote == 0 && (b == '"' || b == '\''):
			inQuote = b
		case inQuote == 0 && b == c:
			return i
		}
	}
	return -1
}

// valueScan follows one value over its lines: it counts brackets to find where the
// value ends, and records the line of each array element ("path[i]") and the keys of
// inline tables ("path.key", "path[i].key").
type valueScan struct {
	path    string
	depth   int  // bracket depth after the text read so far
	isArray bool // the value is an array, not an inline table
	count   int  // array elements seen
	expect  bool // the next value character at depth 1 starts an element
}

func (v *valueScan) scan(idx lineIndex, text string, n int) {
	s := stripComment(text)
	inQuote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inQuote != 0 {
			switch {
			case c == '\\' && inQuote == '"':
				i++
			case c == inQuote:
				inQuote = 0
			}
			continue
		}
		if v.isArray && v.depth == 1 && v.expect && c != ' ' && c != '\t' && c != ',' && c != ']' {
			elem := v.path + "[" + strconv.Itoa(v.count) + "]"
			v.count++
			v.expect = false
			idx[elem] = n
			if c == '{' {
				indexInline(idx, elem, s[i:], n)
			}
		}
		switch c {
		case '"', '\'':
			inQuote = c
		case '[', '{':
			if v.depth == 0 {
				v.isArray = c == '['
				v.expect = v.isArray
				if c == '{' {
					indexInline(idx, v.path, s[i:], n)
				}
			}
			v.depth++
		case ']', '}':
			if v.depth > 0 {
				v.depth--
			}
		case ',':
			if v.depth == 1 {
				v.expect = true
			}
		}
	}
}

// indexInline records the top-level keys of a one-line inline table, e.g.
// source = { deb = "x" }; value starts at its '{'.
func indexInline(idx lineIndex, path, value string, n int) {
	depth, inQuote, start := 0, byte(0), 1
	for i := 0; i < len(value); i++ {
		c := value[i]
		if inQuote != 0 {
			switch {
			case c == '\\' && inQuote == '"':
				i++
			case c == inQuote:
				inQuote = 0
			}
			continue
		}
		switch c {
		case '"', '\'':
			inQuote = c
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				indexInlinePart(idx, path, value[start:i], n)
				return
			}
		case ',':
			if depth == 1 {
				indexInlinePart(idx, path, value[start:i], n)
				start = i + 1
			}
		}
	}
	indexInlinePart(idx, path, value[start:], n)
}

func indexInlinePart(idx lineIndex, path, part string, n int) {
	if k, _, ok := cutKey(part); ok && strings.TrimSpace(k) != "" {
		idx[join(path, cleanKey(k))] = n
	}
}

func setOnce(idx lineIndex, k string, n int) {
	if _, ok := idx[k]; !ok {
		idx[k] = n
	}
}

// withIndexes turns "repo.extra" into "repo[2].extra" when repo is an array of tables.
func withIndexes(name string, arrays map[string]int) string {
	parts := strings.Split(name, ".")
	out := ""
	for _, p := range parts {
		out = join(out, p)
		if c, ok := arrays[out]; ok {
			out += "[" + strconv.Itoa(c-1) + "]"
		}
	}
	return out
}

func lastSegment(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// cleanKey turns a TOML key as written (`a . "b.c"`) into a key path (`a.b.c`): the
// segments unquoted and joined with dots, as toml.Key's String does.
func cleanKey(k string) string {
	var parts []string
	var cur strings.Builder
	inQuote := byte(0)
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case inQuote == '"' && c == '\\' && i+1 < len(k):
			i++
			cur.WriteByte(k[i])
		case inQuote != 0 && c == inQuote:
			inQuote = 0
		case inQuote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			inQuote = c
		case c == '.':
			parts = append(parts, cur.String())
			cur.Reset()
		case c == ' ' || c == '\t':
		default:
			cur.WriteByte(c)
		}
	}
	return strings.Join(append(parts, cur.String()), ".")
}

func stripComment(s string) string {
	if i := indexUnquoted(s, '#'); i >= 0 {
		return s[:i]
	}
	return s
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// parent drops the last segment of a key path: "a.b[2]" -> "a.b", "a.b" -> "a".
func parent(path string) string {
	if i := strings.LastIndexByte(path, '['); i > 0 && strings.HasSuffix(path, "]") && i > strings.LastIndexByte(path, '.') {
		return path[:i]
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// line returns the line defining path or its nearest enclosing key; 0 if none.
func (idx lineIndex) line(path string) int {
	for p := path; p != ""; p = parent(p) {
		if n, ok := idx[p]; ok {
			return n
		}
	}
	return 0
}

// lineUnindexed finds a path written without array indexes ("repo.foo", as toml.Key
// has it) among the array-of-tables elements: the nth match in file order. It returns
// the line and the path with its indexes ("repo[1].foo") where it found one.
func (idx lineIndex) lineUnindexed(path string, nth int) (int, string) {
	if n, ok := idx[path]; ok {
		return n, path
	}
	var matches []string
	for k := range idx {
		if stripIndexes(k) == path {
			matches = append(matches, k)
		}
	}
	sort.Slice(matches, func(i, j int) bool {
		if idx[matches[i]] != idx[matches[j]] {
			return idx[matches[i]] < idx[matches[j]]
		}
		return matches[i] < matches[j]
	})
	if nth < len(matches) {
		return idx[matches[nth]], matches[nth]
	}
	return idx.line(path), path
}

// stripIndexes turns "repo[1].suite" into "repo.suite".
func stripIndexes(path string) string {
	if !strings.Contains(path, "[") {
		return path
	}
	var b strings.Builder
	depth := 0
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}
